// The attention inbox: what needs a person, across every run the token can see.
//
// - calls waiting for approval (answerable from the inbox);
// - agents that are stalled (AGENT_STALLED; docs/events.md);
// - subtrees that failed while their run goes on (an agent's AGENT_ERROR);
// - runs that ended failed (the `runs` op).
//
// It uses only the public protocol: for each running run (the newest WATCHED of them)
// one subscription at `detail: status` with a `types` filter, so it follows those
// runs live for a few events each; the `pending` op covers the approvals of runs past
// that, and `runs` the failed ones. Entries leave when resolved: an approval answered,
// a stalled agent that moves or ends, a run that ends (its failed subtrees then count
// through the run's own status). A failed run stays until dismissed (kept in this
// browser's localStorage).

const WATCHED = 16;
const TYPES = ["AGENT_ERROR", "AGENT_RESULT", "AGENT_STALLED", "APPROVAL_REQUESTED", "APPROVAL_RESOLVED", "RUN_FINISHED"];
const FAILED_RUNS = 20;       // the latest failed runs listed
const DISMISSED_KEPT = 200;

export class Inbox {
  constructor(conn, onChange) {
    this.conn = conn;
    this.onChange = onChange;
    this.runs = new Map();      // runId -> watched run {handle, agentId, input, approvals, stalled, failed}
    this.pending = [];          // approvals of runs not watched (the `pending` op)
    this.failedRuns = [];       // runs that ended failed
    this.dismissed = new Set(JSON.parse(localStorage.getItem("inbox-dismissed") || "[]"));
    this.covered = 0;           // running runs, watched or not
  }

  // After each refresh of `runs` and `pending` (every 3 s).
  sync(runs, pending) {
    const running = runs.filter((r) => r.status === "running");
    this.covered = running.length;
    const wanted = new Map(running.slice(0, WATCHED).map((r) => [r.runId, r]));
    for (const [runId, run] of this.runs) {
      if (!wanted.has(runId)) this.drop(runId, run);
    }
    for (const [runId, r] of wanted) {
      if (!this.runs.has(runId)) this.watch(r);
    }
    this.pending = pending.filter((a) => !this.runs.has(a.runId));
    this.failedRuns = runs.filter((r) => r.status === "failed").slice(0, FAILED_RUNS);
    this.onChange();
  }

  // Follow a running run for the few events the inbox reads (resumed by the package
  // after a dropped connection).
  watch(r) {
    const run = { handle: null, agentId: r.agentId, input: r.input || "", approvals: new Map(), stalled: new Map(), failed: new Map() };
    this.runs.set(r.runId, run);
    const onEvents = (batch) => {
      if (this.runs.get(r.runId) !== run) return;
      for (const e of batch) this.apply(r.runId, run, e);
      this.onChange();
    };
    this.conn.subscribe(r.runId, { detail: "status", filter: { types: TYPES }, onEvents })
      .then((handle) => {
        if (this.runs.get(r.runId) !== run) { handle.close(); return; }
        run.handle = handle;
        handle.done.then(() => {   // the next `runs` says how it ended
          if (this.runs.get(r.runId) === run) this.runs.delete(r.runId);
          this.onChange();
        }, () => {});
      })
      .catch(() => { if (this.runs.get(r.runId) === run) this.runs.delete(r.runId); });
  }

  drop(runId, run) {
    this.runs.delete(runId);
    if (run.handle) run.handle.close();
  }

  apply(runId, run, e) {
    const key = e.source ? e.source.agentKey : "root";
    const who = { key, agent: e.source ? e.source.agentName : run.agentId, path: e.source ? e.source.path : "" };
    const d = e.data || {};
    switch (e.type) {
      case "APPROVAL_REQUESTED":
        run.approvals.set(`${key}#${d.toolCallId}`, { ...who, toolCallId: d.toolCallId, tool: d.name, args: d.args, ts: e.ts });
        break;
      case "APPROVAL_RESOLVED": run.approvals.delete(`${key}#${d.toolCallId}`); break;
      case "AGENT_STALLED":
        if (d.stalled) run.stalled.set(key, { ...who, seconds: d.silentSeconds, tool: d.tool || null, ts: e.ts });
        else run.stalled.delete(key);
        break;
      case "AGENT_RESULT": run.stalled.delete(key); break;
      case "AGENT_ERROR":
        run.stalled.delete(key);
        if (key !== "root" && d.errorType !== "cancelled") {
          run.failed.set(key, { ...who, errorType: d.errorType, message: d.message || "", ts: e.ts });
        }
        break;
      case "RUN_FINISHED": run.approvals.clear(); run.stalled.clear(); run.failed.clear(); break;
      default: break;
    }
  }

  dismiss(id) {
    this.dismissed.add(id);
    const kept = [...this.dismissed].slice(-DISMISSED_KEPT);
    localStorage.setItem("inbox-dismissed", JSON.stringify(kept));
    this.onChange();
  }

  // Every entry, newest first: {id, kind, runId, agentKey, agent, path, run, text, ts,
  // approval?, dismissable?}.
  entries() {
    const out = [];
    const add = (entry) => { if (!this.dismissed.has(entry.id)) out.push(entry); };
    for (const [runId, run] of this.runs) {
      const about = `${run.agentId}: ${run.input}`;
      for (const a of run.approvals.values()) {
        add({ id: `approval:${runId}:${a.key}#${a.toolCallId}`, kind: "approval", runId, agentKey: a.key, agent: a.agent, path: a.path,
          run: about, text: `${a.tool} waits for approval`, ts: a.ts, approval: { toolCallId: a.toolCallId, tool: a.tool, args: a.args } });
      }
      for (const s of run.stalled.values()) {
        add({ id: `stalled:${runId}:${s.key}`, kind: "stalled", runId, agentKey: s.key, agent: s.agent, path: s.path,
          run: about, text: `stalled${s.tool ? ` in ${s.tool}` : ""}: silent for ${Math.round(s.seconds)} s`, ts: s.ts });
      }
      for (const f of run.failed.values()) {
        add({ id: `failed:${runId}:${f.key}`, kind: "failed", runId, agentKey: f.key, agent: f.agent, path: f.path,
          run: about, text: `failed (${f.errorType}): ${f.message}`, ts: f.ts, dismissable: true });
      }
    }
    for (const a of this.pending) {
      const key = a.agentKey ?? "root";
      add({ id: `approval:${a.runId}:${key}#${a.toolCallId}`, kind: "approval", runId: a.runId, agentKey: key, agent: a.agentId, path: a.path,
        run: a.runId, text: `${a.name} waits for approval`, ts: a.requestedAt, approval: { toolCallId: a.toolCallId, tool: a.name, args: a.args } });
    }
    for (const r of this.failedRuns) {
      add({ id: `run-failed:${r.runId}`, kind: "run-failed", runId: r.runId, agentKey: "root", agent: r.agentId, path: "",
        run: `${r.agentId}: ${r.input || ""}`, text: "run failed", ts: r.finishedAt || r.createdAt, dismissable: true });
    }
    return out.sort((a, b) => (b.ts || 0) - (a.ts || 0));
  }
}
