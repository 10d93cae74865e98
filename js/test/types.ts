// Compiled with `tsc --noEmit` (npm run typecheck): every event type is handled, each
// with its own payload type; a field another type has is a compile error.

import type { AgentEvent, EventType } from "../src/index.js";
import { connect } from "../src/index.js";

export function describe(e: AgentEvent): string {
  switch (e.type) {
    case "RUN_STARTED":
      return `${e.data.agentId}: ${e.data.input}${e.data.forkedFrom ? ` (fork of ${e.data.forkedFrom.runId})` : ""}`;
    case "AGENT_STARTED":
      return `${e.source?.agentName} started on ${e.data.task}`;
    case "REASONING":
      if ("delta" in e.data) return e.data.delta;
      if ("thinkingDelta" in e.data) return e.data.thinkingDelta;
      return `${e.data.text} (${e.data.finishReason}, ${e.data.toolCalls.length} calls)`;
    case "TOOL_CALL_DELTA":
      return e.data.argsDelta;
    case "TOOL_CALL":
      return `${e.data.name}(${JSON.stringify(e.data.args)})`;
    case "TOOL_RESULT":
      return `${e.data.toolCallId}: ${e.data.content} ${e.data.isError ? "!" : ""}`;
    case "AGENT_RESULT":
      return `${e.data.text} (${e.data.usage.inputTokens + e.data.subtreeUsage.outputTokens})`;
    case "AGENT_ERROR":
      return `${e.data.errorType}: ${e.data.message}`;
    case "USER_MESSAGE":
      return `${e.data.from}: ${e.data.text}${e.data.control ? ` (${e.data.control})` : ""}`;
    case "TOOL_PROGRESS":
      return `${e.data.progress}/${e.data.total ?? "?"}`;
    case "RUN_RESUMED":
      return `attempt ${e.data.attempt}`;
    case "TURN_ABANDONED":
      return e.data.reason;
    case "APPROVAL_REQUESTED":
      return `${e.data.name} until ${e.data.timeoutAt}`;
    case "APPROVAL_RESOLVED":
      return `${e.data.decision} by ${e.data.by}`;
    case "COMPACTION_STARTED":
      return `${e.data.reason}: ${e.data.beforeTokens}`;
    case "COMPACTION_FINISHED":
      return `${e.data.summary} (${e.data.afterTokens})`;
    case "AGENT_STALLED":
      return `${e.data.silentSeconds} s`;
    case "MODEL_FALLBACK":
      return `${e.data.from} -> ${e.data.to} (${e.data.reason})`;
    case "RUN_FINISHED":
      return `${e.data.status}: ${e.data.result ?? e.data.error ?? ""}`;
    default: {
      const unhandled: never = e;
      return unhandled;
    }
  }
}

export function wrong(e: AgentEvent): void {
  if (e.type === "TOOL_CALL") {
    // @ts-expect-error: a TOOL_CALL's data has no `text`
    void e.data.text;
  }
  if (e.type === "RUN_FINISHED") {
    // @ts-expect-error: `status` is one of four words
    const s: "running" = e.data.status;
    void s;
  }
  // @ts-expect-error: not an event type
  const t: EventType = "RUN_EXPLODED";
  void t;
}

export async function usage(): Promise<void> {
  const client = connect("ws://127.0.0.1:8765/ws", { token: "t" });
  const run = await client.run("planner", "q", { filter: { maxDepth: 1 }, detail: "blocks" });
  for await (const event of run) describe(event);
  const end = await run.done;
  const status: string = end.status;
  void status;
  const root = run.tree.root;
  if (root) {
    for (const child of root.childNodes) void [child.status, child.text, child.usage, child.pending, child.activity];
  }
  await run.approve({ toolCallId: "c", agentKey: null, decision: "deny", reason: "no" });
  // @ts-expect-error: a decision is approve or deny
  await run.approve({ toolCallId: "c", decision: "maybe" });
}
