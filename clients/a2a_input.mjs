// A task that needs a person's input, through the official A2A JS SDK: TEXT is one
// blocking `sendMessage` (which returns the task as it stands once it is
// input-required), then each ANSWER is one more `sendMessage` with that task's id.
// Prints one JSON line: the task after each message (state, status text and data
// parts, answer), or why the SDK refused. With A2A_TASK_ID set, TEXT too goes to that
// task (an answer to someone's waiting task).
//
//   node clients/a2a_input.mjs AGENT_URL TOKEN TEXT ANSWER...
import { clientFactory, textOf } from "./a2a_factory.mjs";

const [url, token, text, ...answers] = process.argv.slice(2);
const factory = clientFactory(token);
const tasks = [];
const shown = (task) => ({
  id: task.id,
  contextId: task.contextId,
  state: task.status?.state,
  said: textOf(task.status?.message?.parts ?? []),
  data: (task.status?.message?.parts ?? [])
    .filter((p) => p.content?.$case === "data")
    .map((p) => p.content.value),
  answer: (task.artifacts ?? []).map((a) => textOf(a.parts)).join(""),
});
try {
  const client = await factory.createFromUrl(url);
  const given = process.env.A2A_TASK_ID;
  let task = given ? { id: given } : null;
  for (const [n, said] of [text, ...answers].entries()) {
    const message = {
      messageId: `input-${n}`,
      role: 1, // ROLE_USER
      parts: [{ content: { $case: "text", value: said } }],
    };
    if (task) Object.assign(message, { taskId: task.id });
    const sent = await client.sendMessage({ message });
    task = sent.payload?.value ?? sent;
    tasks.push(shown(task));
  }
  console.log(JSON.stringify({ ok: true, tasks }));
} catch (error) {
  console.log(JSON.stringify({ ok: false, error: String(error?.message ?? error), tasks }));
}
