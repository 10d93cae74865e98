// Runs one agent through the official AG-UI client (`HttpAgent.runAgent`), which checks
// the event stream itself (order, open messages and tool calls, subagent ids) and
// throws on the first fault. A run that ends with interrupts (tool calls waiting for a
// person) is resumed the AG-UI way: `runAgent({ resume })`, one entry per interrupt,
// answered from OPTIONS, until the run ends. Prints one JSON line: what the client
// accepted, segment by segment, or why not.
//
//   node clients/agui_run.mjs URL TASK [TOKEN] [OPTIONS]
//
// OPTIONS (JSON): {"answers": {TOOL_NAME: PAYLOAD}} — the payload for each interrupt
// of that tool (default {"approved": true}); {"forwardedProps": {...}} for the first
// request (a reconnect: {"runId": …, "afterSeq": …}).
import { HttpAgent } from "@ag-ui/client";

const [url, task, token, rawOptions] = process.argv.slice(2);
const options = rawOptions ? JSON.parse(rawOptions) : {};
const agent = new HttpAgent({
  url,
  headers: token ? { Authorization: `Bearer ${token}` } : {},
  initialMessages: [{ id: "task", role: "user", content: task }],
});
const segments = [];
let types = [];
let finished = null;
const subscriber = {
  onEvent: ({ event }) => { types.push(event.type); },
  onRunFinishedEvent: (params) => { finished = params; },
};
try {
  let request = { runId: "client-run-0", forwardedProps: options.forwardedProps ?? {} };
  let result = null;
  for (let round = 1; round <= 20; round++) {
    types = [];
    finished = null;
    const done = await agent.runAgent(request, subscriber);
    const interrupts = finished?.interrupts ?? [];
    segments.push({ types, outcome: finished?.outcome ?? null, interrupts });
    result = done.result ?? null;
    if (finished?.outcome !== "interrupt") break;
    const resume = interrupts.map((interrupt) => {
      const payload = options.answers?.[interrupt.metadata?.name] ?? { approved: true };
      return payload === "cancel"
        ? { interruptId: interrupt.id, status: "cancelled" }
        : { interruptId: interrupt.id, status: "resolved", payload };
    });
    request = { runId: `client-run-${round}`, resume };
  }
  console.log(JSON.stringify({ ok: true, types: segments.flatMap((s) => s.types), segments, result }));
} catch (error) {
  console.log(JSON.stringify({ ok: false, error: String(error?.message ?? error), types, segments }));
}
