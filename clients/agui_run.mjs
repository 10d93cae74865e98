// Runs one agent through the official AG-UI client (`HttpAgent.runAgent`), which checks
// the event stream itself (order, open messages and tool calls, subagent ids) and
// throws on the first fault. Prints one JSON line: what the client accepted, or why not.
//
//   node clients/agui_run.mjs URL TASK [TOKEN]
import { HttpAgent } from "@ag-ui/client";

const [url, task, token] = process.argv.slice(2);
const agent = new HttpAgent({
  url,
  headers: token ? { Authorization: `Bearer ${token}` } : {},
  initialMessages: [{ id: "task", role: "user", content: task }],
});
const types = [];
try {
  const result = await agent.runAgent(
    { runId: "client-run" },
    { onEvent: ({ event }) => { types.push(event.type); } },
  );
  console.log(JSON.stringify({ ok: true, types, result: result.result ?? null }));
} catch (error) {
  console.log(JSON.stringify({ ok: false, error: String(error?.message ?? error), types }));
}
