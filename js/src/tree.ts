// A run's agent tree, built from its events as they come, changed in place.
//
// `apply(event)` updates the agents the event touches and notes them as changed; a
// listener (`subscribe`) hears once per batch which agents changed. Each node has a
// `version` that grows when it changes, and `dirty` keeps the keys changed until a
// view that draws them clears it, so a view can redraw only what changed.
// Statuses are final only from the events: an agent without a terminal event when
// RUN_FINISHED arrives takes the run's status (interrupted, cancelled, …), so no node
// says "running" for ever. No I/O: tested with plain event lists.

import type {
  AgentEvent,
  ApprovalRequestedData,
  AttachmentInfo,
  EventType,
  Source,
  UsageData,
} from "./schema.js";

/** The key of the root agent (its events have no source). */
export const ROOT = "root";

/** The event types `AgentTree.apply` reads, and those it leaves aside (a tool's
 * progress; a resume's notice). tests/unit/test_payloads.py checks every type is in
 * one of them. */
export const HANDLES: readonly EventType[] = [
  "RUN_STARTED", "AGENT_STARTED", "REASONING", "TURN_ABANDONED", "TOOL_CALL_DELTA",
  "TOOL_CALL", "TOOL_RESULT", "USER_MESSAGE", "COMPACTION_STARTED", "COMPACTION_FINISHED",
  "APPROVAL_REQUESTED", "APPROVAL_RESOLVED", "AGENT_RESULT", "AGENT_ERROR", "AGENT_STALLED",
  "MODEL_FALLBACK", "RUN_FINISHED",
];
export const IGNORES: readonly EventType[] = ["TOOL_PROGRESS", "RUN_RESUMED"];

export type AgentStatus = "running" | "done" | "error" | "cancelled" | "interrupted" | "failed";
export type RunStatus = "running" | "completed" | "failed" | "cancelled" | "interrupted";

/** One model turn of an agent. */
export interface Turn {
  text: string;
  thinking: string;
  /** Tool call ids, in the order the turn made them. */
  calls: string[];
  finished: boolean;
  /** Why it was cut off and asked again (`fork`, `restart`, `worker_lost`), or false. */
  abandoned: string | false;
  /** The seq of its first event (a fork from here asks it again). */
  seq: number | null;
  startTs?: number;
  finishReason?: string;
}

/** A call that waits (or waited) for a person. */
export interface Approval {
  id: string;
  name: string;
  args: Record<string, unknown>;
  edit: boolean;
  timeoutAt: number;
  ts: number;
  /** null while it waits; `unanswered` when the run ended first. */
  decision: "approve" | "deny" | "timeout" | "cancelled" | "unanswered" | null;
  by?: string;
  reason?: string | null;
  edited?: boolean;
  endTs?: number;
}

/** One tool call of an agent. */
export interface ToolCall {
  id: string;
  name: string;
  argsText: string;
  args: unknown;
  result: string | undefined;
  isError: boolean;
  startTs: number;
  endTs: number | null;
  server: boolean;
  ready: boolean;
  seq: number | null;
  approval?: Approval;
  /** Images and files its result holds (an MCP tool's image). */
  attachments: AttachmentInfo[];
}

/** A summary that replaced an agent's older conversation. */
export interface Compaction {
  /** The index of the turn it came before. */
  before: number;
  reason: string;
  beforeTokens: number;
  afterTokens: number | null;
  summary: string | null;
  turns: number | null;
  kept?: number;
  ts: number;
  endTs: number | null;
}

/** One agent instance of the tree (the root included). */
export class AgentNode {
  readonly key: string;
  readonly parent: string | null;
  readonly children: string[] = [];
  agentId: string;
  name: string;
  readonly depth: number;
  readonly path: string;
  readonly taskId: string | null;
  task = "";
  status: AgentStatus = "running";
  errorType: string | null = null;
  errorMessage: string | null = null;
  /** Its final answer (AGENT_RESULT; the root's: RUN_FINISHED's result). */
  text: string | null = null;
  /** The validated JSON value of its answer, when it has an output schema (AGENT_RESULT's
   * `structured`; `text` is then that value as JSON); undefined for any other. */
  structured: unknown = undefined;
  /** The model key that answered its last turn (another than its own after a fallback). */
  model: string | null = null;
  /** Its model switches (MODEL_FALLBACK), in order. */
  fallbacks: { from: string; to: string; reason: string; error: string; ts: number }[] = [];
  /** Tokens its finished turns reported, per model key. */
  tokensByModel: Record<string, number> = {};
  turns: Turn[] = [newTurn()];
  tools = new Map<string, ToolCall>();
  messages: { text: string; from: string; ts: number; attachments: AttachmentInfo[] }[] = [];
  /** Images and files given with its task (the root's: with the run's input). */
  attachments: AttachmentInfo[] = [];
  usage: UsageData | null = null;
  subtreeUsage: UsageData | null = null;
  startTs: number | null = null;
  startSeq: number | null = null;
  endTs: number | null = null;
  events = 0;
  /** [seq, ts, seq, ts, …] of its events (where to fork from). */
  marks: number[] = [];
  approvals = new Map<string, Approval>();
  compactions: Compaction[] = [];
  /** Calls still waiting for a person. */
  waiting = 0;
  stalled: { seconds: number; tool: string | null; ts: number } | null = null;
  lastTs: number | null = null;
  /** Tokens its finished turns reported. */
  tokens = 0;
  /** Grows each time the node changes (a view redraws it when it differs). */
  version = 0;
  readonly #tree: AgentTree;

  constructor(tree: AgentTree, key: string, parent: string | null, source: Source | null) {
    this.#tree = tree;
    this.key = key;
    this.parent = parent;
    this.agentId = source ? source.agentId : "";
    this.name = source ? source.agentName : "root";
    this.depth = source ? source.depth : 0;
    this.path = source ? source.path : "";
    this.taskId = source?.taskId ?? null;
  }

  /** The calls that wait for a person now. */
  get pending(): Approval[] {
    return [...this.approvals.values()].filter((a) => a.decision === null);
  }

  /** What it does now, in a few words (from its events alone; "" once it ended). */
  get activity(): string {
    return this.#tree.activity(this, Date.now() / 1000 - this.#tree.shift);
  }

  /** The text it streamed, its turns cut off and asked again left out. */
  get streamed(): string {
    return this.turns.filter((t) => !t.abandoned).map((t) => t.text).filter(Boolean).join("\n\n");
  }

  /** Its child nodes, in the order they started. */
  get childNodes(): AgentNode[] {
    return this.children.map((k) => this.#tree.get(k)).filter((n): n is AgentNode => !!n);
  }
}

function newTurn(seq: number | null = null): Turn {
  return { text: "", thinking: "", calls: [], finished: false, abandoned: false, seq };
}

/** Hears a batch's changed agents, and whether agents were added (to place). */
export type TreeListener = (changed: ReadonlySet<string>, added: boolean) => void;

/** A run's live agent tree (`apply` its events, in seq order; repeats are ignored). */
export class AgentTree {
  readonly nodes = new Map<string, AgentNode>();
  runId: string | null;
  lastSeq = 0;
  status: RunStatus = "running";
  error: string | null = null;
  result: string | null = null;
  firstTs: number | null = null;
  lastTs: number | null = null;
  /** A fork: seconds between its copied history and its own start (left out of its times). */
  shift = 0;
  /** Agents changed and not drawn yet: a view that draws per frame deletes what it
   * drew (at most one key per agent). */
  dirty = new Set<string>();
  /** Agents were added and not placed yet (a view sets it back to false). */
  structure = false;
  eventCount = 0;
  /** Calls waiting for a person in the whole run. */
  waiting = 0;
  /** Agents marked stalled now. */
  stalled = 0;
  /** A fork's origin (its RUN_STARTED says). */
  forkedFrom: { runId: string; seq: number } | null = null;
  readonly #bySession = new Map<string, string>();
  readonly #listeners = new Set<TreeListener>();
  #changed = new Set<string>();
  #added = false;

  constructor(runId: string | null = null) {
    this.runId = runId;
  }

  /** The root agent (made on the first event). */
  get root(): AgentNode | undefined {
    return this.nodes.get(ROOT);
  }

  /** An agent by its agentKey (`ROOT` for the root). */
  get(agentKey: string): AgentNode | undefined {
    return this.nodes.get(agentKey);
  }

  /** Hear once per applied batch which agents changed. Returns the unsubscribe. */
  subscribe(listener: TreeListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Apply a batch of events (in seq order), then tell the listeners once. */
  applyAll(events: Iterable<AgentEvent>): void {
    for (const event of events) this.apply(event);
    this.notify();
  }

  /** Tell the listeners which agents changed since the last call (if any did). */
  notify(): void {
    if (this.#changed.size === 0 && !this.#added) return;
    const changed = this.#changed;
    const added = this.#added;
    this.#changed = new Set();
    this.#added = false;
    for (const listener of this.#listeners) listener(changed, added);
  }

  /** The run ended (`status`) without its RUN_FINISHED here (a filter left it out):
   * what RUN_FINISHED does to the agents still running. */
  end(status: RunStatus): void {
    if (this.status !== "running") return;
    this.#finish(status, null, null, this.lastTs ?? Date.now() / 1000);
    this.notify();
  }

  #touch(node: AgentNode): void {
    node.version += 1;
    this.dirty.add(node.key);
    this.#changed.add(node.key);
  }

  /** The node of `source` (made, with its parents placed, on its first event). */
  node(source: Source | null): AgentNode {
    const key = source ? source.agentKey : ROOT;
    let node = this.nodes.get(key);
    if (node) return node;
    let parent: string | null = null;
    if (source) {
      if (!this.nodes.has(ROOT)) this.node(null);
      parent = source.depth === 1 ? ROOT : (this.#bySession.get(source.parentSessionId) ?? ROOT);
      this.#bySession.set(source.sessionId, key);
    }
    node = new AgentNode(this, key, parent, source);
    this.nodes.set(key, node);
    const above = parent ? this.nodes.get(parent) : undefined;
    if (above) {  // (its parent's view lists it: the parent changed too)
      above.children.push(key);
      this.#touch(above);
    }
    this.structure = true;
    this.#added = true;
    return node;
  }

  /** Apply one event (an event at or below `lastSeq` is a repeat: ignored). */
  apply(event: AgentEvent): void {
    if (event.seq <= this.lastSeq) return;
    if (this.runId === null) this.runId = event.runId;
    // A fork goes on long after the history it copied: its times are its own.
    if (event.type === "RUN_RESUMED" && event.data.reason === "fork" && this.lastTs !== null) {
      this.shift = Math.max(0, event.ts - this.lastTs);
    }
    const ts = event.ts - this.shift;
    this.lastSeq = event.seq;
    this.eventCount += 1;
    if (this.firstTs === null) this.firstTs = ts;
    this.lastTs = ts;
    const node = this.node(event.source);
    if (node.startTs === null) {
      node.startTs = ts;
      node.startSeq = event.seq;
    }
    if (node.stalled && event.type !== "AGENT_STALLED") {
      node.stalled = null;
      this.stalled -= 1;
    }
    if (event.type !== "AGENT_STALLED") node.lastTs = ts;
    node.events += 1;
    node.marks.push(event.seq, ts);
    this.#touch(node);
    this.#read(node, event, ts);
  }

  #read(node: AgentNode, e: AgentEvent, ts: number): void {
    switch (e.type) {
      case "RUN_STARTED":
        node.agentId = e.data.agentId;
        node.name = e.data.agentId || "root";
        node.task = e.data.input;
        node.attachments = e.data.attachments ?? [];
        this.forkedFrom = e.data.forkedFrom ?? null;
        break;
      case "AGENT_STARTED":
        node.task = e.data.task;
        node.attachments = e.data.attachments ?? [];
        break;
      case "REASONING": {
        const turn = this.#turn(node, e.seq);
        const d = e.data;
        if ("delta" in d) turn.text += d.delta;
        else if ("thinkingDelta" in d) turn.thinking += d.thinkingDelta;
        if (turn.startTs === undefined) turn.startTs = ts;
        if (e.last && "finishReason" in d) {
          turn.text = d.text;
          turn.finished = true;
          turn.finishReason = d.finishReason;
          if (d.model) node.model = d.model;
          if (d.usage) {
            const used = d.usage.inputTokens + d.usage.outputTokens;
            node.tokens += used;
            if (d.model) node.tokensByModel[d.model] = (node.tokensByModel[d.model] ?? 0) + used;
          }
        } else if (e.last) turn.finished = true;
        break;
      }
      case "AGENT_STALLED":
        if (e.data.stalled && !node.stalled && node.status === "running") {
          node.stalled = { seconds: e.data.silentSeconds, tool: e.data.tool ?? null, ts };
          this.stalled += 1;
        }
        break;
      case "MODEL_FALLBACK":
        node.fallbacks.push({ ...e.data, ts });
        node.model = e.data.to;
        break;
      case "TURN_ABANDONED":
        this.#turn(node).abandoned = e.data.reason || "worker_lost";
        break;
      case "TOOL_CALL_DELTA":
        this.#call(node, e.data.toolCallId, e.data.name, ts, e.seq).argsText += e.data.argsDelta;
        break;
      case "TOOL_CALL": {
        const call = this.#call(node, e.data.toolCallId, e.data.name, ts, e.seq);
        call.args = e.data.args;
        call.server = !!e.data.server;
        call.ready = true;
        break;
      }
      case "TOOL_RESULT": {
        const call = this.#call(node, e.data.toolCallId, e.data.name, ts);
        call.result = e.data.content;
        call.attachments = e.data.attachments ?? [];
        call.isError = !!e.data.isError;
        call.endTs = ts;
        break;
      }
      case "USER_MESSAGE":
        node.messages.push({ text: e.data.text, from: e.data.from, ts, attachments: e.data.attachments ?? [] });
        break;
      case "COMPACTION_STARTED": {
        const last = node.turns[node.turns.length - 1];
        const before = last.finished || last.abandoned ? node.turns.length : node.turns.length - 1;
        node.compactions.push({
          before, reason: e.data.reason, beforeTokens: e.data.beforeTokens, afterTokens: null,
          summary: null, turns: null, ts, endTs: null,
        });
        break;
      }
      case "COMPACTION_FINISHED": {
        const c = node.compactions[node.compactions.length - 1];
        if (c && c.summary === null) {
          Object.assign(c, {
            afterTokens: e.data.afterTokens, summary: e.data.summary,
            turns: e.data.summarizedTurns, kept: e.data.keptMessages, endTs: ts,
          });
        }
        break;
      }
      case "APPROVAL_REQUESTED":
        this.#asked(node, e.data, ts, e.seq);
        break;
      case "APPROVAL_RESOLVED": {
        const approval = node.approvals.get(e.data.toolCallId);
        if (approval && approval.decision === null) {
          node.waiting -= 1;
          this.waiting -= 1;
        }
        if (approval) {
          Object.assign(approval, {
            decision: e.data.decision, by: e.data.by, reason: e.data.reason ?? null,
            edited: !!e.data.edited, endTs: ts,
          });
        }
        break;
      }
      case "AGENT_RESULT":
        node.status = "done";
        node.text = e.data.text;
        if ("structured" in e.data) node.structured = e.data.structured;
        node.usage = e.data.usage;
        node.subtreeUsage = e.data.subtreeUsage;
        node.endTs = ts;
        break;
      case "AGENT_ERROR":
        node.status = e.data.errorType === "cancelled" ? "cancelled" : "error";
        node.errorType = e.data.errorType;
        node.errorMessage = e.data.message;
        node.usage = e.data.usage ?? node.usage;
        node.subtreeUsage = e.data.subtreeUsage ?? node.subtreeUsage;
        node.endTs = ts;
        break;
      case "RUN_FINISHED":
        this.#finish(e.data.status, e.data.error ?? null, e.data.result ?? null, ts);
        if (e.data.usage) node.subtreeUsage = e.data.usage;
        if ("structured" in e.data) node.structured = e.data.structured;
        break;
      default:
        break;
    }
  }

  #asked(node: AgentNode, d: ApprovalRequestedData, ts: number, seq: number): void {
    const call = this.#call(node, d.toolCallId, d.name, ts, seq);
    const approval: Approval = {
      id: d.toolCallId, name: d.name, args: d.args, edit: !!d.edit, timeoutAt: d.timeoutAt,
      ts, decision: null,
    };
    call.approval = approval;
    if (!node.approvals.has(d.toolCallId)) {
      node.waiting += 1;
      this.waiting += 1;
    }
    node.approvals.set(d.toolCallId, approval);
  }

  // The turn an event belongs to (a new one begins at `seq` after a finished one).
  #turn(node: AgentNode, seq: number | null = null): Turn {
    const turn = node.turns[node.turns.length - 1];
    if (turn.finished || turn.abandoned) {
      const next = newTurn(seq);
      node.turns.push(next);
      return next;
    }
    if (turn.seq === null) turn.seq = seq;
    return turn;
  }

  #call(node: AgentNode, id: string, name: string, ts: number, seq: number | null = null): ToolCall {
    let call = node.tools.get(id);
    if (!call) {
      call = {
        id, name, argsText: "", args: undefined, result: undefined, isError: false, attachments: [],
        startTs: ts, endTs: null, server: false, ready: false, seq,
      };
      node.tools.set(id, call);
      this.#turn(node, seq).calls.push(id);
    }
    return call;
  }

  #finish(status: RunStatus, error: string | null, result: string | null, ts: number): void {
    this.status = status || "completed";
    this.waiting = 0;
    this.stalled = 0;
    this.error = error;
    this.result = result;
    const root = this.root;
    if (root && result !== null) root.text = result;
    for (const node of this.nodes.values()) {
      for (const approval of node.approvals.values()) {
        if (approval.decision === null) {
          approval.decision = "unanswered";
          approval.endTs = ts;
        }
      }
      node.waiting = 0;
      node.stalled = null;
      if (node.status !== "running") continue;
      if (this.status === "completed") node.status = "done";
      else if (this.status === "failed") {
        node.status = "error";
        node.errorType = node.errorType || "failed";
      } else node.status = this.status;
      node.endTs = node.endTs ?? ts;
      this.#touch(node);
    }
  }

  /** The seq of the agent's last event at or before `ts` (its first, before it). */
  seqAt(node: AgentNode, ts: number): number | null {
    const marks = node.marks;
    let found = marks.length ? marks[0] : null;
    for (let i = 0; i < marks.length && marks[i + 1] <= ts; i += 2) found = marks[i];
    return found;
  }

  /** Now, on the run's clock (a fork's leaves out the time before it). */
  now(): number {
    return Date.now() / 1000 - this.shift;
  }

  /** What `node` does at `now` (s), in a few words: from its events alone. */
  activity(node: AgentNode, now: number): string {
    if (node.status !== "running" || this.status !== "running") return "";
    const since = (ts: number): string => `${Math.max(0, now - ts).toFixed(0)} s`;
    if (node.stalled) {
      const where = node.stalled.tool ? ` in ${node.stalled.tool}` : "";
      return `stalled${where}: no event for ${since(node.lastTs ?? node.stalled.ts)}`;
    }
    if (node.waiting > 0) {
      return `waiting for approval: ${node.pending.map((a) => a.name).join(", ")}`;
    }
    let running = 0;
    let total = 0;
    for (const key of node.children) {
      const child = this.nodes.get(key);
      if (!child) continue;
      total += 1;
      if (child.status === "running") running += 1;
    }
    let open: ToolCall | null = null;
    for (const call of node.tools.values()) {
      if (call.ready && call.result === undefined && !call.server) open = call;
    }
    const children = `waiting for children ${total - running}/${total}`;
    if (open && open.name === "agent_spawn" && running > 0) return children;
    if (open) return `in tool ${open.name} for ${since(open.startTs)}`;
    if (running > 0) return children;
    const turn = node.turns[node.turns.length - 1];
    if (turn && !turn.finished && !turn.abandoned && (turn.text || turn.thinking)) {
      const streamed = Math.round((turn.text.length + turn.thinking.length) / 4);
      const seconds = Math.max(now - (turn.startTs ?? now), 0.001);
      const what = turn.text ? "streaming text" : "thinking";
      return `${what} · ~${node.tokens + streamed} tok · ~${Math.round(streamed / seconds)} tok/s`;
    }
    return "waiting for the model";
  }

  /** The descendants of `node` by state (a collapsed subtree's summary). */
  summary(node: AgentNode): { running: number; waiting: number; failed: number; stalled: number } {
    const counts = { running: 0, waiting: 0, failed: 0, stalled: 0 };
    const stack = [...node.children];
    while (stack.length) {
      const child = this.nodes.get(stack.pop() as string);
      if (!child) continue;
      stack.push(...child.children);
      if (child.status === "error") counts.failed += 1;
      else if (child.status !== "running") continue;
      else if (child.waiting > 0) counts.waiting += 1;
      else if (child.stalled) counts.stalled += 1;
      else counts.running += 1;
    }
    return counts;
  }

  /** Tokens of a node's subtree: its own report when it ended, else null. */
  tokens(node: AgentNode): number | null {
    const u = node.subtreeUsage || node.usage;
    return u ? u.inputTokens + u.outputTokens : null;
  }

  /** Every node, parents before children, in the order they started. */
  *walk(from: AgentNode | undefined = this.root): Generator<AgentNode> {
    if (!from) return;
    yield from;
    for (const key of from.children) {
      const child = this.nodes.get(key);
      if (child) yield* this.walk(child);
    }
  }
}
