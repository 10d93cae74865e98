// One run as the page knows it: its agents built from events, changed incrementally.
//
// `apply(event)` updates the agents and notes which ones changed (`dirty`), so the
// view touches only those. Statuses are final only from the events: an agent
// without a terminal event when RUN_FINISHED arrives takes the run's status
// (interrupted after a crash, cancelled, …), so no card says "running" for ever.

export const ROOT = "root";
// The event types `RunModel.apply` reads, and those it leaves aside (progress; a
// resume's notice): tests/unit/test_payloads.py checks every type is in one of them.
export const HANDLES = [
  "RUN_STARTED", "AGENT_STARTED", "REASONING", "TURN_ABANDONED", "TOOL_CALL_DELTA",
  "TOOL_CALL", "TOOL_RESULT", "USER_MESSAGE", "COMPACTION_STARTED", "COMPACTION_FINISHED",
  "APPROVAL_REQUESTED", "APPROVAL_RESOLVED", "AGENT_RESULT", "AGENT_ERROR", "AGENT_STALLED",
  "RUN_FINISHED",
];
export const IGNORES = ["TOOL_PROGRESS", "RUN_RESUMED"];
const RAW_KEPT = 3000;   // the run's latest events kept whole for the JSON view
// (keeping every parsed event of a 100k-event run made the browser's garbage
// collector pause the page for over 50 ms)

export class RunModel {
  constructor(runId) {
    this.runId = runId;
    this.agents = new Map();   // key -> agent
    this.lastSeq = 0;
    this.status = "running";
    this.error = null;
    this.result = null;
    this.firstTs = null;
    this.lastTs = null;
    this.shift = 0;            // a fork: seconds between its copied history and its own start
    this.dirty = new Set();
    this.structure = false;    // agents were added (the tree must place them)
    this.bySession = new Map();
    this.eventCount = 0;
    this.recent = [];   // the last RAW_KEPT events, whole
    this.waiting = 0;   // approvals still open in the whole run
    this.stalled = 0;   // agents marked stalled now (AGENT_STALLED; their next event clears it)
    this.forkedFrom = null;   // a fork's {runId, seq} (its RUN_STARTED says)
  }

  agent(source) {
    const key = source ? source.agentKey : ROOT;
    let agent = this.agents.get(key);
    if (!agent) {
      let parent = null;
      if (source) {
        parent = source.depth === 1 ? ROOT : (this.bySession.get(source.parentSessionId) || ROOT);
        if (!this.agents.has(ROOT)) this.agent(null);
        this.bySession.set(source.sessionId, key);
      }
      agent = {
        key, parent, children: [],
        agentId: source ? source.agentId : "", name: source ? source.agentName : "root",
        depth: source ? source.depth : 0, path: source ? source.path : "", taskId: source ? source.taskId : null,
        task: "", status: "running", errorType: null, errorMessage: null, result: null,
        turns: [this.newTurn()], tools: new Map(), messages: [],
        usage: null, subtreeUsage: null, startTs: null, endTs: null, events: 0,
        startSeq: null,
        marks: [],              // [seq, ts, seq, ts, …] of its events (where to fork from)
        approvals: new Map(),   // toolCallId -> approval (open until `decision` is set)
        compactions: [],        // {before: turn index it came before, reason, tokens, summary, …}
        waiting: 0,             // approvals still open
        stalled: null,          // {seconds, tool, ts} while marked stalled
        lastTs: null,           // its last event's time
        tokens: 0,              // tokens its finished turns reported
      };
      this.agents.set(key, agent);
      if (parent) this.agents.get(parent).children.push(key);
      this.structure = true;
    }
    return agent;
  }

  newTurn(seq = null) { return { text: "", thinking: "", calls: [], finished: false, abandoned: false, seq }; }

  // `seq`: of the event that asks for it (a new turn begins there, if one must).
  currentTurn(agent, seq = null) {
    const turn = agent.turns[agent.turns.length - 1];
    if (turn.finished || turn.abandoned) {
      const next = this.newTurn(seq);
      agent.turns.push(next);
      return next;
    }
    if (turn.seq === null) turn.seq = seq;
    return turn;
  }

  // The seq of the agent's last event at or before `ts` (its first, before it).
  seqAt(agent, ts) {
    const marks = agent.marks;
    let found = marks.length ? marks[0] : null;
    for (let i = 0; i < marks.length && marks[i + 1] <= ts; i += 2) found = marks[i];
    return found;
  }

  // Now, on the run's clock (a fork's leaves out the time between its original and it).
  now() { return Date.now() / 1000 - this.shift; }

  apply(e) {
    if (e.seq <= this.lastSeq) return;   // never twice (resume overlaps are dropped)
    // A fork goes on long after the history it copied: its durations and timeline are
    // its own time, the gap between the copy's last event and its start left out.
    if (e.type === "RUN_RESUMED" && e.data && e.data.reason === "fork" && this.lastTs !== null) {
      this.shift = Math.max(0, e.ts - this.lastTs);
    }
    if (this.shift) e = { ...e, ts: e.ts - this.shift };
    this.lastSeq = e.seq;
    this.eventCount += 1;
    if (this.firstTs === null) this.firstTs = e.ts;
    this.lastTs = e.ts;
    const agent = this.agent(e.source);
    if (agent.startTs === null) { agent.startTs = e.ts; agent.startSeq = e.seq; }
    if (agent.stalled && e.type !== "AGENT_STALLED") { agent.stalled = null; this.stalled -= 1; }
    if (e.type !== "AGENT_STALLED") agent.lastTs = e.ts;
    agent.events += 1;
    agent.marks.push(e.seq, e.ts);
    this.recent.push(e);
    if (this.recent.length > RAW_KEPT * 1.5) this.recent.splice(0, this.recent.length - RAW_KEPT);
    this.dirty.add(agent.key);
    const d = e.data || {};
    switch (e.type) {
      case "RUN_STARTED":
        agent.agentId = d.agentId || ""; agent.name = d.agentId || "root"; agent.task = d.input || "";
        this.forkedFrom = d.forkedFrom || null;
        break;
      case "AGENT_STARTED": agent.task = d.task || ""; break;
      case "REASONING": {
        const turn = this.currentTurn(agent, e.seq);
        if (d.delta !== undefined) turn.text += d.delta;
        else if (d.thinkingDelta !== undefined) turn.thinking += d.thinkingDelta;
        if (turn.startTs === undefined) turn.startTs = e.ts;
        if (e.last) {
          if (d.text !== undefined) turn.text = d.text;
          turn.finished = true;
          turn.finishReason = d.finishReason;
          if (d.usage) agent.tokens += (d.usage.inputTokens || 0) + (d.usage.outputTokens || 0);
        }
        break;
      }
      case "AGENT_STALLED":
        if (d.stalled && !agent.stalled && agent.status === "running") {
          agent.stalled = { seconds: d.silentSeconds, tool: d.tool || null, ts: e.ts };
          this.stalled += 1;
        }
        break;
      case "TURN_ABANDONED": this.currentTurn(agent).abandoned = d.reason || "worker_lost"; break;
      case "TOOL_CALL_DELTA": {
        const call = this.call(agent, d.toolCallId, d.name, e.ts, e.seq);
        call.argsText += d.argsDelta || "";
        break;
      }
      case "TOOL_CALL": {
        const call = this.call(agent, d.toolCallId, d.name, e.ts, e.seq);
        call.args = d.args; call.server = !!d.server; call.ready = true;
        break;
      }
      case "TOOL_RESULT": {
        const call = this.call(agent, d.toolCallId, d.name, e.ts);
        call.result = d.content; call.isError = !!d.isError; call.endTs = e.ts;
        break;
      }
      case "USER_MESSAGE": agent.messages.push({ text: d.text, from: d.from, ts: e.ts }); break;
      case "COMPACTION_STARTED": {
        const last = agent.turns[agent.turns.length - 1];   // it comes before the next turn
        const before = last.finished || last.abandoned ? agent.turns.length : agent.turns.length - 1;
        agent.compactions.push({ before, reason: d.reason, beforeTokens: d.beforeTokens, afterTokens: null, summary: null, turns: null, ts: e.ts, endTs: null });
        break;
      }
      case "COMPACTION_FINISHED": {
        const c = agent.compactions[agent.compactions.length - 1];
        if (c && c.summary === null) Object.assign(c, { afterTokens: d.afterTokens, summary: d.summary, turns: d.summarizedTurns, kept: d.keptMessages, endTs: e.ts });
        break;
      }
      case "APPROVAL_REQUESTED": {
        const call = this.call(agent, d.toolCallId, d.name, e.ts);
        call.approval = { id: d.toolCallId, name: d.name, args: d.args, edit: !!d.edit, timeoutAt: d.timeoutAt, ts: e.ts, decision: null };
        if (!agent.approvals.has(d.toolCallId)) { agent.waiting += 1; this.waiting += 1; }
        agent.approvals.set(d.toolCallId, call.approval);
        break;
      }
      case "APPROVAL_RESOLVED": {
        const approval = agent.approvals.get(d.toolCallId);
        if (approval && approval.decision === null) { agent.waiting -= 1; this.waiting -= 1; }
        if (approval) Object.assign(approval, { decision: d.decision, by: d.by, reason: d.reason ?? null, edited: !!d.edited, endTs: e.ts });
        break;
      }
      case "AGENT_RESULT":
        agent.status = "done"; agent.result = d.text; agent.usage = d.usage; agent.subtreeUsage = d.subtreeUsage; agent.endTs = e.ts;
        break;
      case "AGENT_ERROR":
        agent.status = d.errorType === "cancelled" ? "cancelled" : "error";
        agent.errorType = d.errorType; agent.errorMessage = d.message;
        agent.usage = d.usage || agent.usage; agent.subtreeUsage = d.subtreeUsage || agent.subtreeUsage; agent.endTs = e.ts;
        break;
      case "RUN_FINISHED": this.finish(d.status, d, e.ts); break;
      default: break;
    }
  }

  call(agent, id, name, ts, seq = null) {
    let call = agent.tools.get(id);
    if (!call) {
      call = { id, name, argsText: "", args: undefined, result: undefined, isError: false, startTs: ts, endTs: null, server: false, seq };
      agent.tools.set(id, call);
      this.currentTurn(agent, seq).calls.push(id);
    }
    return call;
  }

  finish(status, data, ts) {
    this.status = status || "completed";
    this.waiting = 0;
    this.stalled = 0;
    this.error = data.error || null;
    this.result = data.result ?? null;
    const root = this.agents.get(ROOT);
    if (root && root.status === "running" && this.status === "completed") root.status = "done";
    for (const agent of this.agents.values()) {
      for (const approval of agent.approvals.values()) {   // nobody can answer them now
        if (approval.decision === null) { approval.decision = "unanswered"; approval.endTs = ts; }
      }
      agent.waiting = 0;
      agent.stalled = null;
      if (agent.status !== "running") continue;
      agent.status = this.status === "completed" ? "done" : this.status;   // interrupted, cancelled, failed
      if (this.status === "failed") { agent.status = "error"; agent.errorType = agent.errorType || "failed"; }
      agent.endTs = agent.endTs ?? ts;
      this.dirty.add(agent.key);
    }
  }

  // What the agent does now, in a few words, at `now` (s): from its events alone.
  activity(agent, now) {
    if (agent.status !== "running" || this.status !== "running") return "";
    const since = (ts) => `${Math.max(0, now - ts).toFixed(0)} s`;
    if (agent.stalled) {
      const where = agent.stalled.tool ? ` in ${agent.stalled.tool}` : "";
      return `stalled${where}: no event for ${since(agent.lastTs ?? agent.stalled.ts)}`;
    }
    if (agent.waiting > 0) {
      const names = [...agent.approvals.values()].filter((a) => a.decision === null).map((a) => a.name);
      return `waiting for approval: ${names.join(", ")}`;
    }
    let running = 0, total = 0;
    for (const key of agent.children) {
      const child = this.agents.get(key);
      if (!child) continue;
      total += 1;
      if (child.status === "running") running += 1;
    }
    let open = null;
    for (const call of agent.tools.values()) {
      if (call.ready && call.result === undefined && !call.server) open = call;
    }
    if (open && open.name === "agent_spawn" && running > 0) return `waiting for children ${total - running}/${total}`;
    if (open) return `in tool ${open.name} for ${since(open.startTs)}`;
    if (running > 0) return `waiting for children ${total - running}/${total}`;
    const turn = agent.turns[agent.turns.length - 1];
    if (turn && !turn.finished && !turn.abandoned && (turn.text || turn.thinking)) {
      const streamed = Math.round((turn.text.length + turn.thinking.length) / 4);
      const seconds = Math.max(now - (turn.startTs ?? now), 0.001);
      const what = turn.text ? "streaming text" : "thinking";
      return `${what} · ~${agent.tokens + streamed} tok · ~${Math.round(streamed / seconds)} tok/s`;
    }
    return "waiting for the model";
  }

  // Descendants of `agent` by state (a collapsed subtree's summary).
  summary(agent) {
    const counts = { running: 0, waiting: 0, failed: 0, stalled: 0 };
    const stack = [...agent.children];
    while (stack.length) {
      const child = this.agents.get(stack.pop());
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

  // Tokens of an agent's subtree: its own report when it ended, else the sum so far.
  tokens(agent) {
    const u = agent.subtreeUsage || agent.usage;
    return u ? (u.inputTokens || 0) + (u.outputTokens || 0) : null;
  }

  // The agent's events among the run's latest ones (the JSON view).
  raw(agent) {
    return this.recent.filter((e) => (e.source ? e.source.agentKey : ROOT) === agent.key);
  }

  text(agent) {
    return agent.turns.filter((t) => !t.abandoned).map((t) => t.text).filter(Boolean).join("\n\n");
  }

  matches(agent, needle) {
    if (!needle) return true;
    const n = needle.toLowerCase();
    if ((agent.name + " " + agent.task + " " + (agent.result || "")).toLowerCase().includes(n)) return true;
    if (this.text(agent).toLowerCase().includes(n)) return true;
    for (const call of agent.tools.values()) {
      if ((call.name + JSON.stringify(call.args ?? call.argsText) + (call.result || "")).toLowerCase().includes(n)) return true;
    }
    return false;
  }
}
