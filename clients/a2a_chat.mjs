// A conversation through the official A2A JS SDK: each TEXT is one blocking
// `sendMessage` in the one contextId CONTEXT (a thread of the server's). Prints one
// JSON line: each task's contextId and answer, or why the SDK refused.
//
//   node clients/a2a_chat.mjs AGENT_URL TOKEN CONTEXT TEXT...
import { clientFactory, textOf } from "./a2a_factory.mjs";

const [url, token, contextId, ...texts] = process.argv.slice(2);
const factory = clientFactory(token);
const tasks = [];
try {
  const client = await factory.createFromUrl(url);
  for (const [n, text] of texts.entries()) {
    const sent = await client.sendMessage({
      message: {
        messageId: `chat-${n}`,
        role: 1, // ROLE_USER
        contextId,
        parts: [{ content: { $case: "text", value: text } }],
      },
    });
    const task = sent.payload?.value ?? sent;
    tasks.push({
      contextId: task.contextId,
      answer: (task.artifacts ?? []).map((a) => textOf(a.parts)).join(""),
      state: task.status?.state,
    });
  }
  console.log(JSON.stringify({ ok: true, tasks }));
} catch (error) {
  console.log(JSON.stringify({ ok: false, error: String(error?.message ?? error), tasks }));
}
