// A chat through the official AG-UI client: one `HttpAgent` (one threadId) runs each
// turn in order — `addMessage`, then `runAgent`, which posts the whole chat so far —
// and then, with FRESH, a second `HttpAgent` on the same threadId that knows only its
// one new message (a reloaded page). Prints one JSON line: each run's result and each
// agent's messages afterwards, or why the client refused the stream.
//
//   node clients/agui_chat.mjs URL TOKEN THREAD_ID TURNS_JSON [FRESH]
import { HttpAgent } from "@ag-ui/client";

const [url, token, threadId, rawTurns, fresh] = process.argv.slice(2);
const headers = token ? { Authorization: `Bearer ${token}` } : {};
const shown = (agent) => agent.messages.map((m) => ({ id: m.id, role: m.role, content: m.content }));
const results = [];
try {
  const agent = new HttpAgent({ url, headers, threadId });
  for (const [n, text] of JSON.parse(rawTurns).entries()) {
    agent.addMessage({ id: `turn-${n}`, role: "user", content: text });
    const done = await agent.runAgent({ runId: `client-run-${n}` });
    results.push(done.result ?? null);
  }
  let reloaded = null;
  if (fresh) {
    const again = new HttpAgent({
      url,
      headers,
      threadId,
      initialMessages: [{ id: "fresh", role: "user", content: fresh }],
    });
    const done = await again.runAgent({ runId: "client-run-fresh" });
    results.push(done.result ?? null);
    reloaded = shown(again);
  }
  console.log(JSON.stringify({ ok: true, results, messages: shown(agent), reloaded }));
} catch (error) {
  console.log(JSON.stringify({ ok: false, error: String(error?.message ?? error), results }));
}
