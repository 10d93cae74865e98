// Drives one of our A2A agents with the official JS SDK (`@a2a-js/sdk`'s ClientFactory
// and JSON-RPC transport, as a user would) and prints one JSON line of what it got:
// the card; a streaming send with a client-chosen contextId; GetTask; a send that
// returns at once, SubscribeToTask on it while it runs — dropped after a few events,
// then resumed after the last seq seen (the A2A-Orchestrator-After-Seq header, the
// card's extension); CancelTask on another running task; SubscribeToTask on an ended
// task (refused).
//
//   node clients/a2a_run.mjs AGENT_URL TASK [TOKEN]
import { clientFactory, textOf } from "./a2a_factory.mjs";

const [url, text, token] = process.argv.slice(2);
const factory = clientFactory(token);

let n = 0;
const message = (contextId) => ({
  message: {
    messageId: `js-${++n}`,
    role: 1, // ROLE_USER
    parts: [{ content: { $case: "text", value: text } }],
    ...(contextId ? { contextId } : {}),
  },
});
const answerOf = (task) => task.artifacts.map((a) => textOf(a.parts)).join("");
const seqOf = (response) => Number(response.payload?.value?.metadata?.seq ?? -1);

/** The answer a client builds from stream responses, on top of `answer`. */
function build(responses, answer = "") {
  for (const { payload } of responses) {
    if (payload?.$case === "task") answer = answerOf(payload.value);
    if (payload?.$case === "artifactUpdate") {
      const chunk = textOf(payload.value.artifact.parts);
      answer = payload.value.append ? answer + chunk : chunk;
    }
  }
  return answer;
}

const out = {};
try {
  const client = await factory.createFromUrl(url);
  const card = await client.getAgentCard();
  out.card = { name: card.name, extensions: card.capabilities?.extensions?.map((e) => e.uri) ?? [] };

  // A streaming send, in a context the client chose.
  const streamed = [];
  for await (const response of client.sendMessageStream(message("ctx-js-1"))) streamed.push(response);
  const first = streamed[0].payload;
  const last = streamed.at(-1).payload;
  out.stream = {
    kinds: streamed.map((r) => r.payload?.$case),
    firstContext: first.value.contextId,
    lastState: last.value.status?.state,
    answer: build(streamed),
  };
  const task = await client.getTask({ id: first.value.id });
  out.get = { state: task.status.state, contextId: task.contextId, answer: answerOf(task) };

  // A send that returns at once; subscribe while it runs, drop, resume by seq.
  const started = await client.sendMessage({ ...message(), configuration: { returnImmediately: true } });
  const runningId = started.id ?? started.payload?.value?.id;
  const before = [];
  const controller = new AbortController();
  try {
    for await (const response of client.resubscribeTask({ id: runningId }, { signal: controller.signal })) {
      before.push(response);
      if (before.length === 5) {
        controller.abort(); // the client drops here
        break;
      }
    }
  } catch (error) {
    if (!controller.signal.aborted) throw error;
  }
  const cursor = Math.max(...before.map(seqOf));
  const after = [];
  for await (const response of client.resubscribeTask(
    { id: runningId },
    { serviceParameters: { "A2A-Orchestrator-After-Seq": String(cursor) } },
  )) after.push(response);
  const ended = await client.getTask({ id: runningId });
  out.resume = {
    firstKinds: before.map((r) => r.payload?.$case),
    cursor,
    resumedFirst: after[0]?.payload?.$case,
    resumedFirstSeq: seqOf(after[0]),
    resumedTaskAnswer: after[0]?.payload?.$case === "task" ? answerOf(after[0].payload.value) : null,
    answerBefore: build(before),
    laterSeqs: after.slice(1).map(seqOf),
    built: build(after.slice(1), build(before)),
    final: answerOf(ended),
    finalState: ended.status.state,
  };

  // CancelTask on a running task.
  const doomed = await client.sendMessage({ ...message(), configuration: { returnImmediately: true } });
  const doomedId = doomed.id ?? doomed.payload?.value?.id;
  const cancelled = await client.cancelTask({ id: doomedId });
  out.cancel = { state: cancelled.status.state };

  // SubscribeToTask on a task that has ended: refused (A2A: UnsupportedOperationError).
  try {
    for await (const _ of client.resubscribeTask({ id: first.value.id })) {
      out.endedSubscribe = { refused: false };
    }
    out.endedSubscribe ??= { refused: false };
  } catch (error) {
    out.endedSubscribe = { refused: true, error: String(error?.message ?? error), name: error?.constructor?.name };
  }
  console.log(JSON.stringify({ ok: true, ...out }));
} catch (error) {
  console.log(JSON.stringify({ ok: false, error: String(error?.stack ?? error), ...out }));
}
