// An `AgentTree` from the AG-UI event stream of our `/ag-ui` door (docs/integrations.md),
// for apps that talk AG-UI (CopilotKit, assistant-ui, `@ag-ui/client`) and still want
// the whole tree: the door tags every event of a subagent with `subagentRunId` (its
// agentKey) and `metadata` (agentKey, agentId, path, depth, seq), opens and closes
// each subagent with SUBAGENT_STARTED / SUBAGENT_FINISHED / SUBAGENT_ERROR, and sends
// what AG-UI has no type for as CUSTOM `orchestrator.<TYPE>`. Each AG-UI event becomes
// the event of ours it came from, so the tree is the one `client.run` builds.

import type { AgentEvent, AgentResultData, EventType, RunFinishedData, Source } from "./schema.js";
import { AgentTree } from "./tree.js";

/** An AG-UI event as any AG-UI client hands it over (only what is read here). */
export interface AguiEvent {
  type: string;
  [field: string]: unknown;
}

interface Metadata {
  agentKey?: string | null;
  agentId?: string;
  path?: string;
  depth?: number;
  toolCallId?: string;
  runId?: string;
}

const OURS = new Set<string>([
  "RUN_STARTED", "AGENT_STARTED", "REASONING", "TOOL_CALL_DELTA", "TOOL_CALL", "TOOL_RESULT",
  "AGENT_RESULT", "AGENT_ERROR", "USER_MESSAGE", "TOOL_PROGRESS", "RUN_RESUMED",
  "TURN_ABANDONED", "APPROVAL_REQUESTED", "APPROVAL_RESOLVED", "COMPACTION_STARTED",
  "COMPACTION_FINISHED", "AGENT_STALLED", "RUN_FINISHED",
]);
const NO_USAGE = { inputTokens: 0, outputTokens: 0 };

/** Builds an `AgentTree` from AG-UI events, one at a time (`apply`) or all at once. */
export class AguiTree {
  readonly tree: AgentTree;
  #seq = 0;
  #runId = "";
  readonly #sources = new Map<string, Source>();
  readonly #texts = new Map<string, string>();
  readonly #args = new Map<string, { name: string; text: string }>();

  constructor(tree: AgentTree = new AgentTree()) {
    this.tree = tree;
  }

  /** Apply a batch of AG-UI events, then tell the tree's listeners once. */
  applyAll(events: Iterable<AguiEvent>): AgentTree {
    for (const event of events) this.apply(event);
    this.tree.notify();
    return this.tree;
  }

  /** Apply one AG-UI event (events of other kinds are left aside). */
  apply(event: AguiEvent): void {
    for (const ours of this.#translate(event)) this.tree.apply(ours);
  }

  #event(type: EventType, source: Source | null, data: unknown, last = false): AgentEvent {
    this.#seq += 1;
    return { runId: this.#runId, seq: this.#seq, ts: Date.now() / 1000, type, source, last, data } as AgentEvent;
  }

  #source(event: AguiEvent): Source | null {
    const key = typeof event.subagentRunId === "string" ? event.subagentRunId : null;
    return key === null ? null : (this.#sources.get(key) ?? null);
  }

  #translate(e: AguiEvent): AgentEvent[] {
    const meta = (e.metadata ?? {}) as Metadata;
    if (meta.runId && !this.#runId) this.#runId = meta.runId;
    const source = this.#source(e);
    const text = (v: unknown): string => (typeof v === "string" ? v : "");
    switch (e.type) {
      case "RUN_STARTED":
        return this.#seq === 0 ? [this.#event("RUN_STARTED", null, { agentId: text(meta.agentId), input: "" })] : [];
      case "MESSAGES_SNAPSHOT": {
        const messages = Array.isArray(e.messages) ? (e.messages as { role?: string; content?: unknown }[]) : [];
        const asked = messages.filter((m) => m.role === "user").at(-1);
        const root = this.tree.root;
        if (root && asked && !root.task) root.task = text(asked.content);
        return [];
      }
      case "SUBAGENT_STARTED": {
        const key = text(e.subagentRunId);
        const parent = typeof e.parentSubagentRunId === "string" ? e.parentSubagentRunId : "";
        const made: Source = {
          agentKey: key, agentId: text(meta.agentId), agentName: text(e.name) || text(meta.agentId),
          sessionId: key, parentSessionId: parent, depth: meta.depth ?? 1, path: text(meta.path),
          taskId: null, parentToolCallId: typeof e.parentToolCallId === "string" ? e.parentToolCallId : null,
        };
        this.#sources.set(key, made);
        return [this.#event("AGENT_STARTED", made, { agentId: made.agentId, task: text(e.description) })];
      }
      case "TEXT_MESSAGE_START":
        this.#texts.set(text(e.messageId), "");
        return [];
      case "TEXT_MESSAGE_CONTENT": {
        const id = text(e.messageId);
        this.#texts.set(id, (this.#texts.get(id) ?? "") + text(e.delta));
        return [this.#event("REASONING", source, { delta: text(e.delta) })];
      }
      case "TEXT_MESSAGE_END": {
        const said = this.#texts.get(text(e.messageId)) ?? "";
        this.#texts.delete(text(e.messageId));
        return [this.#event("REASONING", source, { text: said, finishReason: "stop", toolCalls: [] }, true)];
      }
      case "REASONING_MESSAGE_CONTENT":
        return [this.#event("REASONING", source, { thinkingDelta: text(e.delta) })];
      case "TOOL_CALL_START": {
        const id = meta.toolCallId ?? text(e.toolCallId);
        this.#args.set(text(e.toolCallId), { name: text(e.toolCallName), text: "" });
        return [this.#event("TOOL_CALL_DELTA", source, { toolCallId: id, name: text(e.toolCallName), argsDelta: "" })];
      }
      case "TOOL_CALL_ARGS": {
        const call = this.#args.get(text(e.toolCallId));
        if (call) call.text += text(e.delta);
        const id = meta.toolCallId ?? text(e.toolCallId);
        return [this.#event("TOOL_CALL_DELTA", source, { toolCallId: id, name: call?.name ?? "", argsDelta: text(e.delta) })];
      }
      case "TOOL_CALL_END": {
        const call = this.#args.get(text(e.toolCallId));
        let args: unknown = call?.text ?? "";
        try {
          args = JSON.parse(String(args));
        } catch {
          // (arguments that are not JSON stay text)
        }
        const id = meta.toolCallId ?? text(e.toolCallId);
        return [this.#event("TOOL_CALL", source, { toolCallId: id, name: call?.name ?? "", args })];
      }
      case "TOOL_CALL_RESULT": {
        const call = this.#args.get(text(e.toolCallId));
        const id = meta.toolCallId ?? text(e.toolCallId);
        const content = text(e.content);
        return [this.#event("TOOL_RESULT", source, { toolCallId: id, name: call?.name ?? "", content, isError: false })];
      }
      case "SUBAGENT_FINISHED": {
        const outcome = (e.outcome ?? {}) as { type?: string };
        if (outcome.type === "suspended") return [];
        // A structured answer comes as its JSON value: the tree keeps it and its JSON text.
        const answer: AgentResultData = { text: answerText(e.result), usage: NO_USAGE, subtreeUsage: NO_USAGE };
        if (e.result !== undefined && typeof e.result !== "string") answer.structured = e.result;
        return [this.#event("AGENT_RESULT", source, answer, true)];
      }
      case "SUBAGENT_ERROR":
        return [this.#event("AGENT_ERROR", source, { errorType: text(e.code) || "failed", message: text(e.message) }, true)];
      case "CUSTOM": {
        const name = text(e.name);
        const kind = name.startsWith("orchestrator.") ? name.slice("orchestrator.".length) : "";
        if (!OURS.has(kind)) return [];
        return [this.#event(kind as EventType, source, e.value ?? {}, kind === "RUN_FINISHED")];
      }
      case "RUN_FINISHED": {
        const outcome = (e.outcome ?? {}) as { type?: string };
        if (outcome.type === "interrupt") return []; // (a segment ends; the run waits for a person)
        const status = outcome.type === "cancelled" ? "cancelled" : "completed";
        const finished: RunFinishedData = { status };
        if (e.result !== undefined && e.result !== null) finished.result = answerText(e.result);
        if (e.result !== undefined && typeof e.result !== "string") finished.structured = e.result;
        return [this.#event("RUN_FINISHED", null, finished, true)];
      }
      case "RUN_ERROR": {
        const code = text(e.code);
        const status = code === "interrupted" || code === "cancelled" ? code : "failed";
        return [this.#event("RUN_FINISHED", null, { status, error: text(e.message) }, true)];
      }
      default:
        return [];
    }
  }
}

/** The agent tree of a whole AG-UI event stream of our `/ag-ui` door. */
export function treeFromAgui(events: Iterable<AguiEvent>): AgentTree {
  return new AguiTree().applyAll(events);
}

/** An AG-UI result as our answer's text: a string as it is, a structured value as JSON. */
function answerText(result: unknown): string {
  if (result === undefined || result === null) return "";
  return typeof result === "string" ? result : JSON.stringify(result);
}
