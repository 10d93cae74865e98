// The live tree console: runs list, agent tree, detail pane, timeline.
// Built on the package `@agent-orchestrator/client` (./client/, from js/: docs/js.md):
// its handles follow runs and resume them, its AgentTree is the model drawn here.
import { Chat } from "./chat.js";
import { AgentTree, ROOT } from "./client/index.js";
import { Connection } from "./conn.js";
import { Inbox } from "./inbox.js";
import { renderMarkdown } from "./markdown.js";

const RAW_KEPT = 3000;   // the run's latest events kept whole for the JSON view
// (keeping every parsed event of a 100k-event run made the browser's garbage
// collector pause the page for over 50 ms)

const $ = (id) => document.getElementById(id);
const el = (tag, cls, text) => {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
};

const state = {
  run: null,          // the AgentTree of the selected run
  handle: null,       // the RunHandle that follows it
  recent: [],         // its latest RAW_KEPT events, whole
  selected: null,     // selected agent key
  nodes: new Map(),   // agent key -> tree <li>
  onScreen: new Set(), // keys of the rows in (or near) the view
  collapsed: new Set(),
  runs: [],
  waitingRuns: new Map(),   // runId -> open approvals (the `pending` op, every 3 s)
  specs: [],
  example: "",        // the sample task the input shows (the chosen agent's `example`)
  starting: false,
  frame: 0,
  filter: {},
  detail: "full",
  search: "",
  rawText: false,     // answers and thinking as written, not rendered as Markdown
  ticked: new Set(),  // rows to redraw for the time alone (activity lines: "for N s")
  pressing: false,    // a pointer is down in the detail pane: it is not redrawn
};

const conn = new Connection({ onState });
const inbox = new Inbox(conn, () => {
  if (!state.inboxFrame) state.inboxFrame = requestAnimationFrame(() => { state.inboxFrame = 0; renderInbox(); });
});
const chat = new Chat(conn, {
  root: $("chat"),
  open: (runId) => select(runId),
  started: (ack) => showStarted(ack),
  notice: (message, kind) => notice(message, kind),
  render: (text, node) => node.replaceChildren(textBlock(text, "answer", true)),
});
const timings = {};   // the longest run of each piece of work, in ms (for tests and the curious)
window.__console = { state, conn, timings, chat };

function timed(name, fn) {
  return (...args) => {
    const started = performance.now();
    try { return fn(...args); } finally {
      const took = performance.now() - started;
      if (took > (timings[name] || 0)) timings[name] = took;
    }
  };
}

// -- connection ------------------------------------------------------------------

function onState(s) {
  const label = { open: "connected", connecting: "connecting…", disconnected: "disconnected — retrying", unauthorized: "token needed" }[s];
  $("conn").textContent = s === "open" && conn.readOnly ? "connected · read-only" : label;
  $("conn").className = s;
  document.body.classList.toggle("read-only", conn.readOnly === true);
  $("go").disabled = s !== "open" || state.starting;
  if (s === "unauthorized") askToken();
}

// Asked in the page (a password field and a submit button), not with window.prompt:
// browsers block prompts in cross-origin frames, and password managers can fill a form.
function askToken() {
  $("token-form").classList.remove("hidden");
  $("token-input").focus();
  if (conn.token) notice("the server refused that token: give another", "error");
}

$("token-form").onsubmit = (event) => {
  event.preventDefault();
  const token = $("token-input").value.trim();
  if (!token) return;
  $("token-input").value = "";
  $("token-form").classList.add("hidden");
  conn.token = token;
  conn.connect();
};

// After every (re)connect: the lists again (the run followed resumes by itself).
conn.onOpen = async () => {
  try {
    const [agents] = await Promise.all([conn.request("agents"), refreshRuns(), refreshTriggers(), refreshWebhooks()]);
    state.specs = agents.agents;
    fillAgents();
  } catch (error) { notice(error); }
  if (!state.run) {
    const linked = new URLSearchParams(location.search).get("run");
    if (linked) select(linked);
  }
};

// One line next to the connection badge: what a control did (green) or why it did not
// (red: an error frame, or `kind` "error"); each replaces the last.
function notice(message, kind) {
  const failed = kind === "error" || typeof message !== "string";
  const text = typeof message === "string" ? message : `${message.code || "error"}: ${message.message || ""}`;
  $("notice").textContent = text;
  $("notice").className = failed ? "error" : "ok";
  clearTimeout(notice.timer);
  notice.timer = setTimeout(() => { $("notice").textContent = ""; }, 8000);
}

// -- triggers (docs/triggers.md): the runs that start themselves -------------------

async function refreshTriggers() {
  if (!conn.open) return;
  try { renderTriggers((await conn.request("triggers")).triggers); }
  catch { /* (a server from before triggers answers bad_request: none to show) */ }
}
setInterval(refreshTriggers, 30_000);

function renderTriggers(triggers) {
  for (const id of ["triggers-head", "triggers-list"]) $(id).classList.toggle("hidden", !triggers.length);
  $("triggers-list").replaceChildren(...triggers.map(triggerItem));
}

function triggerItem(t) {
  const item = el("li", "trigger" + (t.paused ? " paused" : ""));
  item.dataset.trigger = t.name;
  const when = (ts) => new Date(ts * 1000).toLocaleString();
  item.append(el("div", "name", t.name), el("div", "meta", `${t.agent} · ${t.schedule}`));
  item.append(el("div", "meta next", t.paused || t.nextAt == null ? "paused" : `next ${when(t.nextAt)}`));
  if (t.lastFiredAt) {
    const last = el("div", "meta last", `last ${when(t.lastFiredAt)}: ${t.lastOutcome || ""}`);
    if (t.lastRun) {
      const open = el("button", "link", "open run");
      open.type = "button";
      open.onclick = () => select(t.lastRun);
      last.append(" ", open);
    }
    item.append(last);
  }
  if (conn.admin && !conn.readOnly) {   // (only an admin's token may act on a trigger)
    const actions = el("div", "actions");
    for (const action of ["fire", t.paused ? "resume" : "pause"]) {
      const button = el("button", "", action === "fire" ? "Fire now" : action === "pause" ? "Pause" : "Resume");
      button.type = "button";
      button.onclick = () => actOnTrigger(action, t.name);
      actions.append(button);
    }
    item.append(actions);
  }
  return item;
}

async function actOnTrigger(action, name) {
  try {
    renderTriggers((await conn.request("triggers", { action, name })).triggers);
    notice(`trigger ${name}: ${action === "fire" ? "fired" : action === "pause" ? "paused" : "resumed"}`);
    if (action === "fire") await refreshRuns();
  } catch (error) { notice(error); }
}

// -- webhooks out (docs/webhooks.md#webhooks-out): dead deliveries, redelivered ------

async function refreshWebhooks() {
  if (!conn.open) return;
  try { renderWebhooks(await conn.request("webhooks")); }
  catch { /* (a server from before webhooks answers bad_request: none to show) */ }
}
setInterval(refreshWebhooks, 10_000);

function renderWebhooks(reply) {
  const shown = Object.keys(reply.webhooks).length > 0 || reply.waiting > 0 || reply.dead.length > 0;
  for (const id of ["webhooks-head", "webhooks-list"]) $(id).classList.toggle("hidden", !shown);
  $("webhooks-count").textContent = `${reply.waiting} waiting · ${reply.dead.length} dead`;
  const items = reply.dead.map(deadItem);
  if (reply.dead.length > 1 && conn.admin && !conn.readOnly) {
    const all = el("button", "", `Redeliver all ${reply.dead.length}`);
    all.type = "button";
    all.onclick = () => redeliver("all");
    const item = el("li", "dead-all");
    item.append(all);
    items.push(item);
  }
  $("webhooks-list").replaceChildren(...items);
}

function deadItem(d) {
  const item = el("li", "dead");
  item.dataset.delivery = d.id;
  item.append(el("div", "name", `${d.type} → ${d.webhook}`));
  item.append(el("div", "meta", `${d.attempts} attempts · ${d.lastError || ""}`));
  const open = el("button", "link", `run ${d.runId} · seq ${d.seq}`);
  open.type = "button";
  open.onclick = () => select(d.runId);
  const where = el("div", "meta");
  where.append(open);
  item.append(where);
  if (conn.admin && !conn.readOnly) {   // (only an admin's token may redeliver)
    const again = el("button", "", "Redeliver");
    again.type = "button";
    again.onclick = () => redeliver(d.id);
    const actions = el("div", "actions");
    actions.append(again);
    item.append(actions);
  }
  return item;
}

async function redeliver(id) {
  try {
    const reply = await conn.request("webhooks", id === "all" ? { action: "redeliver" } : { action: "redeliver", deliveryId: id });
    renderWebhooks(reply);
    notice(`redelivered ${reply.redelivered}`);
  } catch (error) { notice(error); }
}

// -- runs --------------------------------------------------------------------------

async function refreshRuns() {
  if (!conn.open) return;
  const [reply, pending] = await Promise.all([
    conn.request("runs", { limit: 100 }),
    conn.request("pending", { limit: 10000 }).catch(() => ({ approvals: [] })),
  ]);
  state.runs = reply.runs;
  followThread();
  state.waitingRuns = new Map();
  for (const a of pending.approvals) state.waitingRuns.set(a.runId, (state.waitingRuns.get(a.runId) || 0) + 1);
  renderRuns();
  inbox.sync(reply.runs, pending.approvals);
}

// -- the attention inbox (inbox.js) ---------------------------------------------------

const BASE_TITLE = document.title;
const KIND_LABEL = { approval: "approval", stalled: "stalled", failed: "failed", "run-failed": "run failed" };

function renderInbox() {
  const entries = inbox.entries();
  const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.entry : null;
  const list = $("inbox");
  list.replaceChildren(...entries.map((entry) => inboxItem(entry)));
  $("inbox-empty").classList.toggle("hidden", entries.length > 0);
  const count = entries.length;
  $("inbox-count").textContent = count ? `(${count})` : "";
  $("inbox-badge").textContent = `${count} need${count === 1 ? "s" : ""} you`;
  $("inbox-badge").classList.toggle("hidden", count === 0);
  document.title = count ? `(${count}) ${BASE_TITLE}` : BASE_TITLE;
  if (inbox.covered > inbox.runs.size) {
    $("inbox-empty").classList.remove("hidden");
    $("inbox-empty").textContent = `Following the newest ${inbox.runs.size} of ${inbox.covered} running runs (approvals of all).`;
  } else $("inbox-empty").textContent = "Nothing needs you now.";
  if (focused) {
    const again = list.querySelector(`[data-entry="${CSS.escape(focused)}"]`);
    if (again) again.focus();
  }
}

$("inbox-badge").onclick = () => { const first = $("inbox").firstElementChild; if (first) first.focus(); };

function inboxItem(entry) {
  const li = el("li", `inbox-item ${entry.kind}`);
  li.tabIndex = 0;
  li.dataset.entry = entry.id;
  const head = el("div", "meta");
  head.append(el("span", `badge ${entry.kind === "approval" ? "waiting" : entry.kind === "stalled" ? "stalled" : "error"}`, KIND_LABEL[entry.kind]),
    el("span", "who", entry.agent || ""), el("span", "", new Date((entry.ts || 0) * 1000).toLocaleTimeString()));
  const text = el("div", "what", entry.text);
  const about = el("div", "about", entry.run);
  about.title = entry.path || entry.run;
  li.append(head, text, about);
  if (entry.approval && !conn.readOnly) {
    const buttons = el("div", "answer");
    for (const [label, decision] of [["Approve", "approve"], ["Deny", "deny"]]) {
      const b = el("button", decision === "approve" ? "primary" : "", label);
      b.type = "button";
      b.onclick = (e) => { e.stopPropagation(); answerEntry(entry, decision); };
      buttons.append(b);
    }
    li.append(buttons);
  }
  if (entry.dismissable) {
    const x = el("button", "dismiss", "×");
    x.type = "button";
    x.title = "dismiss";
    x.setAttribute("aria-label", "dismiss");
    x.onclick = (e) => { e.stopPropagation(); inbox.dismiss(entry.id); };
    li.append(x);
  }
  li.onclick = () => openEntry(entry);
  li.onkeydown = (e) => inboxKey(e, entry);
  return li;
}

function inboxKey(event, entry) {
  const items = [...$("inbox").children];
  const at = items.indexOf(event.currentTarget);
  if (event.key === "ArrowDown" && items[at + 1]) items[at + 1].focus();
  else if (event.key === "ArrowUp" && items[at - 1]) items[at - 1].focus();
  else if (event.key === "Enter") openEntry(entry);
  else if ((event.key === "a" || event.key === "d") && entry.approval && !conn.readOnly) {
    answerEntry(entry, event.key === "a" ? "approve" : "deny");
  } else return;
  event.preventDefault();
}

async function answerEntry(entry, decision) {
  try {
    await conn.request("approve", {
      runId: entry.runId, toolCallId: entry.approval.toolCallId,
      agentKey: entry.agentKey === ROOT ? null : entry.agentKey, decision,
    });
    notice(`${decision === "approve" ? "approved" : "denied"}: ${entry.approval.tool}`);
    refreshRuns().catch(() => {});
  } catch (error) { notice(error); }
}

// Opens the entry's run and selects its agent (once the tree has it).
function openEntry(entry) {
  state.pendingSelect = entry.agentKey;
  if (state.run && state.run.runId === entry.runId) showPendingSelect();
  else select(entry.runId);
}

function showPendingSelect() {
  const key = state.pendingSelect;
  const run = state.run;
  if (!key || !run || !state.nodes.has(key)) return;
  state.pendingSelect = null;
  for (let a = run.nodes.get(key); a && a.parent; a = run.nodes.get(a.parent)) {
    if (state.collapsed.has(a.parent)) collapse(a.parent);
  }
  selectAgent(key);
  state.nodes.get(key).scrollIntoView({ block: "nearest" });
}
setInterval(() => { refreshRuns().catch(() => {}); }, 3000);

// The chat follows the shown run's thread: it is drawn again when a run of that thread
// starts or ends (the `runs` list, every 3 s), and appears once the shown run is listed.
function followThread() {
  const shown = state.run && state.runs.find((r) => r.runId === state.run.runId);
  if (!shown) return;
  if (shown.threadId !== chat.threadId) { chat.show(shown); return; }
  const mine = state.runs.filter((r) => r.threadId === chat.threadId);
  const known = new Map(chat.runs.map((r) => [r.runId, r.status]));
  if (mine.some((r) => known.get(r.runId) !== r.status)) chat.refresh();
}

// Runs newest first; the runs of a thread with more than one are kept together under
// it (oldest first), where its newest run would be.
function groupedRuns() {
  const count = new Map();
  for (const r of state.runs) if (r.threadId) count.set(r.threadId, (count.get(r.threadId) || 0) + 1);
  const rows = [], placed = new Set();
  for (const r of state.runs) {
    if (!r.threadId || count.get(r.threadId) < 2) { rows.push({ run: r }); continue; }
    if (placed.has(r.threadId)) continue;
    placed.add(r.threadId);
    const runs = state.runs.filter((x) => x.threadId === r.threadId).reverse();
    rows.push({ thread: r.threadId, runs });
    for (const x of runs) rows.push({ run: x, inThread: true });
  }
  return rows;
}

function threadRow(row) {
  const li = el("li", "thread-head");
  li.dataset.thread = row.thread;
  li.append(el("span", "task", row.runs[0].input || row.runs[0].agentId));
  const meta = el("span", "meta");
  meta.append(el("span", "badge thread", `${row.runs.length} messages`));
  li.append(meta);
  li.title = `thread ${row.thread}`;
  li.onclick = () => select(row.runs[row.runs.length - 1].runId);
  return li;
}

function renderRuns() {
  const list = $("runs-list");
  list.replaceChildren(...groupedRuns().map((row) => {
    if (row.thread) return threadRow(row);
    const r = row.run;
    const li = el("li", state.run && state.run.runId === r.runId ? "on" : "");
    if (row.inThread) li.classList.add("in-thread");
    li.tabIndex = 0;
    li.dataset.run = r.runId;
    const task = el("span", "task", r.input || r.agentId);
    task.title = r.input || "";
    const meta = el("span", "meta");
    const started = new Date(r.createdAt * 1000);
    const took = r.finishedAt ? `${(r.finishedAt - r.createdAt).toFixed(1)} s` : "";
    meta.append(el("span", `badge ${r.status}`, r.status), el("span", "", r.agentId),
      el("span", "", started.toLocaleTimeString()), el("span", "", took));
    const live = state.run && state.run.runId === r.runId && state.run.lastSeq > 0;
    const waiting = live ? state.run.waiting : state.waitingRuns.get(r.runId) || 0;
    if (waiting > 0 && r.status === "running") {
      const mark = el("span", "badge waiting", `${waiting} waiting`);
      mark.title = "tool calls waiting for approval";
      meta.prepend(mark);
    }
    if (r.forkedFrom) {
      const fork = el("span", "badge fork", `fork @ ${r.forkedFrom.seq}`);
      fork.title = `forked from ${r.forkedFrom.runId} at seq ${r.forkedFrom.seq}`;
      meta.prepend(fork);
    }
    li.append(task, meta);
    li.onclick = () => select(r.runId);
    li.onkeydown = (e) => { if (e.key === "Enter") select(r.runId); };
    return li;
  }));
}

function select(runId) {
  if (state.run && state.run.runId === runId) return;
  const url = new URL(location.href);
  url.searchParams.set("run", runId);
  history.replaceState(null, "", url);
  follow(runId);
  renderRuns();
  chat.show(state.runs.find((r) => r.runId === runId) || null);
}

function resetRun(model) {
  if (state.handle) state.handle.close();   // (the run goes on; this page stops following it)
  state.handle = null;
  state.run = model;
  state.recent = [];
  state.selected = null;
  state.nodes.clear();
  state.onScreen.clear();
  rowWatcher.disconnect();
  $("tree").replaceChildren();
  $("detail").replaceChildren(el("div", "empty", "Select an agent to see everything it did."));
  $("tree-empty").classList.add("hidden");
  $("run-bar").classList.remove("hidden");
  $("filters").classList.remove("hidden");
  $("run-id").textContent = model.runId;
  $("run-fork").classList.add("hidden");
  state.forking = null;
  schedule();
}

// The run header says where a fork came from (a click opens that run).
function showLineage(run) {
  const button = $("run-fork");
  const from = run.forkedFrom;
  button.classList.toggle("hidden", !from);
  if (!from) return;
  const text = `fork of ${from.runId} @ seq ${from.seq}`;
  if (button.textContent !== text) button.textContent = text;
  button.onclick = () => select(from.runId);
}

// A run this page started (`run`, `fork`, the chat): shown at once, from its first event.
function showStarted(handle, recent = []) {
  const url = new URL(location.href);
  url.searchParams.set("run", handle.runId);
  history.replaceState(null, "", url);
  resetRun(handle.tree);
  attach(handle, recent);
  chat.show({ runId: handle.runId, threadId: handle.threadId });
  refreshRuns();
}

// The options of a feed of the selected run: the filters, and `recent`, where its events
// are kept for the JSON view from the first batch (the latest RAW_KEPT).
function feed() {
  const recent = [];
  const options = {
    detail: state.detail,
    recent,
    onEvents: (batch) => {
      recent.push(...batch);
      if (recent.length > RAW_KEPT * 1.5) recent.splice(0, recent.length - RAW_KEPT);
    },
  };
  if (Object.keys(state.filter).length) options.filter = state.filter;
  return options;
}

// Follow a run from its start (a new tree: the filters may have changed).
async function follow(runId) {
  const model = new AgentTree(runId);
  resetRun(model);
  const options = feed();
  try {
    const handle = await conn.subscribe(runId, options);
    if (state.run !== model) { handle.close(); return; }   // another run was picked meanwhile
    attach(handle, options.recent);
  } catch (error) { if (state.run === model) notice(error); }
}

function attach(handle, recent) {
  state.handle = handle;
  state.run = handle.tree;
  state.recent = recent;
  handle.tree.subscribe(() => schedule());
  handle.onGap((gap) => notice(`events ${gap.fromSeq}–${gap.toSeq} were removed by the retention policy`, "error"));
  handle.done.then(() => {
    if (state.handle !== handle) return;
    schedule();
    refreshRuns();
    chat.refresh();
  }, (error) => { if (state.handle === handle && error.code !== "closed") notice(error); });
  schedule();
}

// -- starting and controlling runs -----------------------------------------------------

// The first time, the first agent with a sample task (its YAML `example`) is chosen and
// its task filled in, so Run works on a fresh page; picking another agent swaps in its
// example, unless the person has written a task of their own.
function fillAgents() {
  const select = $("agent");
  const current = select.value;
  select.replaceChildren(...state.specs.map((s) => {
    const option = el("option", "", s.name && s.name !== s.id ? `${s.name} (${s.id})` : s.id);
    option.value = s.id;
    option.title = s.description || "";
    return option;
  }));
  const first = state.specs.find((s) => s.example) || state.specs[0];
  select.value = current && state.specs.some((s) => s.id === current) ? current : (first ? first.id : "");
  showAgent();
}

function showAgent() {
  const select = $("agent"), input = $("input");
  const spec = state.specs.find((s) => s.id === select.value) || {};
  select.title = spec.description || "";
  const shown = input.value.trim();
  if (!shown || shown === state.example) input.value = spec.example || "";
  state.example = spec.example || "";
}
$("agent").onchange = () => showAgent();

// The paperclip says how many files go with the next run.
function showAttached() {
  const count = $("files").files.length;
  $("files").parentElement.dataset.count = count ? String(count) : "";
}
$("files").onchange = () => showAttached();

$("start").onsubmit = async (event) => {
  event.preventDefault();
  const input = $("input").value.trim();
  if (!input) { notice("write a task first", "error"); $("input").focus(); return; }
  const tooLong = conn.tooLong(input);
  if (tooLong) { notice(tooLong, "error"); return; }
  if (state.starting) return;
  state.starting = true;
  $("go").disabled = true;
  try {
    const options = feed();
    const files = $("files").files;
    if (files.length) options.attachments = await conn.attachmentsOf(files);
    showStarted(await conn.run($("agent").value, input, options), options.recent);
    $("input").value = "";
    $("files").value = "";
    showAttached();
  } catch (error) {
    notice(error);
  } finally {
    state.starting = false;
    $("go").disabled = !conn.open;
  }
};

$("cancel").onclick = async () => {
  if (!state.run) return;
  try { await conn.request("cancel", { runId: state.run.runId }); notice("cancel sent"); }
  catch (error) { notice(error); }
};

$("copy-id").onclick = () => { if (state.run) copy(state.run.runId); };

function copy(text) {
  if (navigator.clipboard) navigator.clipboard.writeText(text).then(() => notice("copied"), () => {});
}

// -- filters ----------------------------------------------------------------------

$("filters").onsubmit = (e) => e.preventDefault();
for (const id of ["f-depth", "f-glob", "f-agents", "f-types", "f-status"]) $(id).onchange = applyFilters;
$("f-search").oninput = () => {
  state.search = $("f-search").value.trim();
  const run = state.run;
  if (!run) return;
  // Every row at once (hidden rows are never on screen, so the frame loop would not
  // reach them): only a class changes.
  for (const [key, li] of state.nodes) {
    const agent = run.nodes.get(key);
    const hidden = Boolean(state.search) && !matches(agent, state.search) && !hasMatch(run, agent);
    li.classList.toggle("hidden", hidden);
  }
};

function applyFilters() {
  const filter = {};
  const depth = $("f-depth").value;
  if (depth !== "") filter.maxDepth = Number(depth);
  const glob = $("f-glob").value.trim();
  if (glob) filter.pathGlob = glob;
  const agentIds = $("f-agents").value.split(",").map((t) => t.trim()).filter(Boolean);
  if (agentIds.length) filter.agentIds = agentIds;
  const types = $("f-types").value.split(",").map((t) => t.trim().toUpperCase()).filter(Boolean);
  if (types.length) filter.types = types;
  state.filter = filter;
  state.detail = $("f-status").checked ? "status" : "full";
  if (state.run) follow(state.run.runId);
}

// Whether `agent` mentions `needle` (its name, task, answer, streamed text, tool calls).
function matches(agent, needle) {
  if (!needle) return true;
  const n = needle.toLowerCase();
  if ((agent.name + " " + agent.task + " " + (agent.text || "")).toLowerCase().includes(n)) return true;
  if (agent.streamed.toLowerCase().includes(n)) return true;
  for (const call of agent.tools.values()) {
    if ((call.name + JSON.stringify(call.args ?? call.argsText) + (call.result || "")).toLowerCase().includes(n)) return true;
  }
  return false;
}

// The agent's events among the run's latest ones (the JSON view).
function rawEvents(agent) {
  return state.recent.filter((e) => (e.source ? e.source.agentKey : ROOT) === agent.key);
}

// -- rendering (once per animation frame, only what changed) ------------------------------

function schedule(all = false) {
  if (all && state.run) for (const key of state.run.nodes.keys()) state.run.dirty.add(key);
  if (!state.frame) state.frame = requestAnimationFrame(render);
}

const FRAME_BUDGET_MS = 8;
// Work per animation frame is bounded: nodes left over wait for the next frame, so a
// tree of hundreds of agents streaming at once never blocks the page for long.

const render = timed("render", renderFrame);
function renderFrame() {
  state.frame = 0;
  const run = state.run;
  if (!run) return;
  const started = performance.now();
  $("run-status").textContent = run.status;
  $("run-status").className = `badge ${run.status}`;
  $("cancel").disabled = run.status !== "running";
  showLineage(run);
  if (run.waiting !== state.shownWaiting) {   // the runs list marks runs that wait
    state.shownWaiting = run.waiting;
    renderRuns();
  }
  if (run.structure) run.structure = !placeNodes(run, started);
  if (state.pendingSelect) showPendingSelect();
  if (state.selected && run.dirty.has(state.selected)) {
    try { renderDetail(run, state.selected); }
    catch (error) {   // one agent's detail that cannot be drawn leaves the rest of the page be
      $("detail").replaceChildren(el("div", "empty", `this agent's detail cannot be shown: ${error}`));
    }
  }
  let drawn = 0;
  for (const key of run.dirty) {
    // At least one row a frame, whatever the rest took: a detail pane slow to draw
    // (a huge answer) must not keep the tree from ever catching up.
    if (drawn > 0 && performance.now() - started > FRAME_BUDGET_MS) break;
    // Not placed yet, or off screen: it stays dirty and is drawn once it shows (every
    // write to an off-screen row would still cost the browser style and layout work).
    if (!state.nodes.has(key) || !state.onScreen.has(key)) continue;
    drawn++;
    updateNode(run, key);
    run.dirty.delete(key);
    state.ticked.delete(key);
  }
  for (const key of state.ticked) {   // rows whose durations moved (the detail pane did not)
    if (performance.now() - started > FRAME_BUDGET_MS) break;
    if (!state.nodes.has(key) || !state.onScreen.has(key)) { state.ticked.delete(key); continue; }
    updateNode(run, key);
    state.ticked.delete(key);
  }
  const now = performance.now();
  const settled = run.status !== "running" && run.dirty.size === 0 && !run.structure;
  if (!state.timelineFrame && (now - (state.timelineAt || 0) > 500 || settled)) {
    // Its own frame: drawing hundreds of lanes must not add to this one.
    state.timelineFrame = requestAnimationFrame(() => {
      state.timelineFrame = 0;
      state.timelineAt = performance.now();
      timed("timeline", renderTimeline)(run);
    });
  }
  if (run.structure || state.ticked.size || [...run.dirty].some((key) => state.onScreen.has(key))) schedule();
}

// Which tree rows are on screen (rows entering the view are redrawn if they changed).
const rowWatcher = new IntersectionObserver((entries) => {
  let shown = false;
  for (const entry of entries) {
    const key = entry.target.parentElement.dataset.key;
    if (entry.isIntersecting) { state.onScreen.add(key); shown = true; }
    else state.onScreen.delete(key);
  }
  if (shown) schedule();
}, { rootMargin: "200px 0px" });

// Places new agents in the tree, parents first (the model's order); returns false when
// the frame's budget ran out first (the rest goes in the next frame).
function placeNodes(run, started) {
  for (const agent of run.nodes.values()) {
    if (state.nodes.has(agent.key)) continue;
    if (performance.now() - started > FRAME_BUDGET_MS) return false;
    const li = el("li", "node");
    li.setAttribute("role", "treeitem");
    li.dataset.key = agent.key;
    const row = el("div", "row");
    row.tabIndex = -1;
    const toggle = el("button", "toggle", "▾");
    toggle.type = "button";
    toggle.setAttribute("aria-label", "collapse");
    toggle.onclick = (e) => { e.stopPropagation(); collapse(agent.key); };
    const name = el("span", "name");
    const stats = el("span", "stats");
    stats.append(el("span", "badge"), el("span"), el("span"));
    const preview = el("div", "preview");
    const activity = el("div", "activity");
    row.append(toggle, name, stats, preview, activity);
    row.onclick = () => selectAgent(agent.key);
    row.onkeydown = (e) => keyNav(e, agent.key);
    const children = el("ul");
    children.setAttribute("role", "group");
    li.append(row, children);
    state.nodes.set(agent.key, li);
    rowWatcher.observe(row);
    const parent = agent.parent ? state.nodes.get(agent.parent) : null;
    (parent ? parent.lastChild : $("tree")).append(li);
    run.dirty.add(agent.key);
    if (agent.parent) run.dirty.add(agent.parent);
  }
  if (!state.selected && run.nodes.has(ROOT)) selectAgent(ROOT, false);
  return true;
}

function updateNode(run, key) {
  const agent = run.nodes.get(key);
  const li = state.nodes.get(key);
  if (!agent || !li) return;
  const [toggle, name, stats, preview, activity] = li.firstChild.children;
  const [badge, tokensSpan, timeSpan] = stats.children;
  const waiting = agent.status === "running" && agent.waiting > 0;
  const stalled = agent.status === "running" && !waiting && agent.stalled !== null;
  const status = waiting ? "waiting for approval" : stalled ? "stalled"
    : agent.status === "error" ? agent.errorType || "error" : agent.status;
  const tokens = run.tokens(agent);
  const end = agent.endTs ?? (run.status === "running" ? run.now() : run.lastTs);
  const seconds = agent.startTs ? Math.max(0, end - agent.startTs) : 0;
  let last = "";
  for (let i = agent.turns.length - 1; i >= 0 && !last; i--) if (!agent.turns[i].abandoned) last = agent.turns[i].text;
  // Only what changed reaches the DOM (every write may cost a layout).
  const spec = state.specs.find((s) => s.id === agent.agentId);
  // Every card by its name: the root's comes from the agents list (RUN_STARTED has its id).
  const shown = key === ROOT && spec && spec.name ? spec.name : agent.name;
  set(name, "textContent", shown + (agent.taskId ? " (background)" : ""));
  set(name, "title", `${agent.path || agent.name}${spec && spec.model ? ` · model ${spec.model}` : ""}`);
  set(toggle, "disabled", agent.children.length === 0);
  set(badge, "className", `badge ${waiting ? "waiting" : stalled ? "stalled" : agent.status}`);
  set(badge, "textContent", status);
  set(tokensSpan, "textContent", tokens !== null ? `${tokens} tok` : "");
  set(timeSpan, "textContent", `${seconds.toFixed(1)} s`);
  set(preview, "textContent", tail(last || agent.task || ""));
  set(activity, "textContent", activityLine(run, agent, run.now()));
  const hidden = Boolean(state.search) && !matches(agent, state.search) && !hasMatch(run, agent);
  if (li.classList.contains("hidden") !== hidden) li.classList.toggle("hidden", hidden);
}

// The row's one line of what the agent does now; for a collapsed subtree, what its
// descendants do (n running, k waiting, j failed).
function activityLine(run, agent, now) {
  const doing = run.activity(agent, now);
  if (!state.collapsed.has(agent.key) || agent.children.length === 0) return doing;
  const c = run.summary(agent);
  const parts = [];
  if (c.running) parts.push(`${c.running} running`);
  if (c.waiting) parts.push(`${c.waiting} waiting`);
  if (c.stalled) parts.push(`${c.stalled} stalled`);
  if (c.failed) parts.push(`${c.failed} failed`);
  const below = parts.length ? `below: ${parts.join(", ")}` : "below: all ended";
  return doing ? `${doing} · ${below}` : below;
}

// Running agents' activity lines say how long ("in tool X for N s"), so they are
// redrawn once a second even when no event comes; and a collapsed ancestor's
// summary changes with its descendants.
setInterval(() => {
  const run = state.run;
  if (!run || run.status !== "running") return;
  for (const agent of run.nodes.values()) {
    if (agent.status === "running") state.ticked.add(agent.key);
  }
  for (const key of state.collapsed) state.ticked.add(key);
  schedule();
}, 1000);

function set(node, property, value) {
  if (node[property] !== value) node[property] = value;
}

// The end of a text, from a word boundary (what the agent is saying now).
function tail(text, size = 160) {
  const flat = text.length > size * 2 ? text.slice(-size * 2).replace(/\s+/g, " ") : text.replace(/\s+/g, " ");
  if (flat.length <= size) return flat;
  const cut = flat.slice(-size);
  const space = cut.indexOf(" ");
  return "…" + (space >= 0 && space < 40 ? cut.slice(space + 1) : cut);
}

function hasMatch(run, agent) {
  return agent.children.some((k) => { const c = run.nodes.get(k); return c && (matches(c, state.search) || hasMatch(run, c)); });
}

function collapse(key) {
  const li = state.nodes.get(key);
  if (state.collapsed.has(key)) state.collapsed.delete(key); else state.collapsed.add(key);
  li.classList.toggle("collapsed", state.collapsed.has(key));
  li.firstChild.firstChild.textContent = state.collapsed.has(key) ? "▸" : "▾";
  if (state.run) { state.run.dirty.add(key); schedule(); }   // its activity line summarizes now
}

function selectAgent(key, focus = true) {
  const old = state.nodes.get(state.selected);
  if (old) old.classList.remove("selected");
  state.selected = key;
  const li = state.nodes.get(key);
  if (li) {
    li.classList.add("selected");
    if (focus) li.firstChild.focus();
  }
  renderDetail(state.run, key);
}

function keyNav(event, key) {
  const visible = [...$("tree").querySelectorAll(".node")].filter((n) => n.offsetParent !== null);
  const at = visible.findIndex((n) => n.dataset.key === key);
  const go = (i) => { const n = visible[i]; if (n) selectAgent(n.dataset.key); };
  const agent = state.run && state.run.nodes.get(key);
  const open = agent ? [...agent.approvals.values()].find((a) => a.decision === null) : null;
  if (event.key === "ArrowDown") go(at + 1);
  else if (event.key === "ArrowUp") go(at - 1);
  else if (event.key === "Enter") { selectAgent(key, false); $("detail").focus(); }
  else if ((event.key === "a" || event.key === "d") && open && !conn.readOnly && state.run.status === "running") {
    const decision = event.key === "a" ? "approve" : "deny";
    conn.request("approve", { runId: state.run.runId, toolCallId: open.id, agentKey: key === ROOT ? null : key, decision })
      .then(() => notice(`${decision === "approve" ? "approved" : "denied"}: ${open.name}`), notice);
  }
  else if (event.key === "ArrowLeft" && !state.collapsed.has(key)) collapse(key);
  else if (event.key === "ArrowRight" && state.collapsed.has(key)) collapse(key);
  else return;
  event.preventDefault();
}

// -- the detail pane --------------------------------------------------------------------

function renderDetail(run, key) {
  const agent = run && run.nodes.get(key);
  const pane = $("detail");
  if (!agent) return;
  // Someone typing a message here: redraw once they leave the field.
  const typing = pane.contains(document.activeElement) && ["INPUT", "TEXTAREA"].includes(document.activeElement.tagName);
  if (typing || state.pressing) {
    state.detailStale = true;
    return;
  }
  state.detailStale = false;
  const selection = saveSelection(pane);
  const keepScroll = pane.parentElement.scrollTop;
  const parts = [];
  const head = el("div", "block");
  const spec = state.specs.find((s) => s.id === agent.agentId);
  const where = `${agent.key === ROOT ? "root agent" : agent.key} · ${agent.agentId} · depth ${agent.depth}`;
  const model = agent.model || (spec && spec.model);
  head.append(el("h3", "", agent.name), el("div", "sub", model ? `${where} · model ${model}` : where));
  for (const f of agent.fallbacks) {   // MODEL_FALLBACK: its model failed a turn, the next took it
    head.append(el("div", "sub fallback", `model ${f.from} → ${f.to} (${f.reason}): ${f.error}`));
  }
  const status = el("div", "sub");
  const waiting = agent.status === "running" && agent.waiting > 0;
  status.append(waiting
    ? el("span", "badge waiting", "waiting for approval")
    : el("span", `badge ${agent.status}`, agent.status === "error" ? agent.errorType || "error" : agent.status));
  if (agent.errorMessage) status.append(" ", el("span", "", agent.errorMessage));
  head.append(status);
  const own = agent.usage, tree = agent.subtreeUsage;
  const fmt = (u) => `${u.inputTokens} in + ${u.outputTokens} out`;
  const took = agent.startTs ? ((agent.endTs ?? run.lastTs) - agent.startTs).toFixed(2) : "0";
  head.append(el("div", "sub", `${took} s` + (own ? ` · own ${fmt(own)} tokens` : "") + (tree ? ` · subtree ${fmt(tree)}` : "")));
  if (agent.startSeq !== null) head.append(forkHere(run, key, agent.startSeq, key === ROOT ? "the run's start" : "when it got its task"));
  head.append(rawToggle(run, key));
  parts.push(head);
  if (state.forking && state.forking.runId === run.runId && state.forking.key === key) parts.push(forkBox(run, key, agent));
  parts.push(section("Task", agent.task, "prose"));
  if (agent.attachments.length) parts.push(attachmentsBox("Attachments", run, agent.attachments));
  if (agent.structured !== undefined) {   // an output schema's answer: its JSON, laid out
    parts.push(section("Answer (structured)", JSON.stringify(agent.structured, null, 2), "json answer"));
  } else if (agent.text) parts.push(section("Answer", agent.text, "prose answer", true));
  agent.turns.forEach((turn, i) => {
    for (const c of agent.compactions) if (c.before === i) parts.push(compactionBox(c, i, run, agent));
    if (!turn.text && !turn.thinking && turn.calls.length === 0) return;
    const box = el("div", "turn" + (turn.abandoned ? " abandoned" : ""));
    const live = run.status === "running" && agent.status === "running";
    const why = { fork: "the fork goes on from before it", restart: "the server restarted", worker_lost: "worker lost" };
    const cut = turn.abandoned ? ` — abandoned (${why[turn.abandoned] || turn.abandoned})` : turn.finished ? "" : live ? " — streaming" : ` — cut off (${agentEnd(run, agent)})`;
    const label = el("div", "label", `turn ${i + 1}${cut}`);
    if (turn.seq !== null) label.append(forkHere(run, key, turn.seq, `turn ${i + 1} (asked again)`));
    box.append(label);
    // A turn is rendered once it settles; while it streams it is plain text.
    const settled = turn.finished || turn.abandoned || !live;
    if (turn.thinking) box.append(textBlock(turn.thinking, "thinking", settled));
    if (turn.text) box.append(textBlock(turn.text, "prose", settled));
    for (const id of turn.calls) {
      const call = agent.tools.get(id);
      const tool = toolBox(call, live ? null : agentEnd(run, agent));
      if (call.seq !== null) tool.firstChild.append(forkHere(run, key, call.seq, `the call to ${call.name}`));
      box.append(tool);
    }
    parts.push(box);
  });
  for (const c of agent.compactions) if (c.before >= agent.turns.length) parts.push(compactionBox(c, c.before, run, agent));
  if (agent.messages.length) {
    const box = el("div", "block");
    box.append(el("div", "label", "Messages sent in"));
    for (const m of agent.messages) {
      box.append(el("div", "msg", `${m.from}: ${m.text}`));
      if (m.attachments.length) box.append(attachmentsBox(null, run, m.attachments));
    }
    parts.push(box);
  }
  if (run.status === "running" && agent.status === "running") {
    for (const approval of agent.approvals.values()) {
      if (approval.decision === null) parts.push(approvalBox(run, key, approval));
    }
    parts.push(stopBox(run, key, agent));
  }
  if (run.status === "running") {   // running agents queue it; idle children run again on it
    const form = el("form");
    form.id = "send-box";
    const input = el("input");
    input.placeholder = `Message to ${agent.name}`;
    input.setAttribute("aria-label", "message");
    const button = el("button", "", "Send");
    form.append(input, button);
    form.onsubmit = async (e) => {
      e.preventDefault();
      const message = input.value.trim();
      if (!message) return;
      const tooLong = conn.tooLong(message, "the message");
      if (tooLong) { notice(tooLong, "error"); return; }
      button.disabled = true;
      try {
        await conn.request("send", { runId: run.runId, agentKey: key === ROOT ? undefined : key, message });
        input.value = "";
        notice("message sent");
      } catch (error) { notice(error); } finally { button.disabled = false; }
    };
    parts.push(form);
  }
  const raw = el("details");
  raw.append(el("summary", "", `raw events (${agent.events}; the run's latest 3000 are kept)`));
  raw.addEventListener("toggle", () => {
    if (raw.open && raw.childElementCount === 1) raw.append(el("pre", "", rawEvents(agent).map((e) => JSON.stringify(e)).join("\n")));
  });
  parts.push(raw);
  pane.replaceChildren(...parts);
  pane.parentElement.scrollTop = keepScroll;
  restoreSelection(pane, selection);
}

// "Fork from here": a new run from this run as it stood at `seq` (docs/fork.md). The
// button opens the fork box (a message for this agent, the replay choice) at the top
// of the pane.
function forkHere(run, key, seq, what) {
  const button = el("button", "fork-here", "Fork from here");
  button.type = "button";
  button.title = `fork the run at seq ${seq}: ${what}`;
  button.dataset.seq = String(seq);
  button.onclick = () => openFork(run, key, seq, what);
  return button;
}

function openFork(run, key, seq, what) {
  state.forking = { runId: run.runId, key, seq, what };
  if (state.selected !== key) selectAgent(key, false);
  renderDetail(run, key);
  const box = $("fork-box");
  if (box) { box.scrollIntoView({ block: "nearest" }); box.querySelector("textarea").focus(); }
}

function forkBox(run, key, agent) {
  const at = state.forking;
  const form = el("form", "fork");
  form.id = "fork-box";
  form.dataset.seq = String(at.seq);
  form.append(el("div", "sub", `Fork this run at seq ${at.seq} — ${at.what}. The original is not changed.`));
  const message = el("textarea");
  message.rows = 2;
  message.placeholder = `A message for ${agent.name} at that moment (optional)`;
  message.setAttribute("aria-label", "message at the fork");
  const replayBox = el("label", "replay");
  const replay = el("input");
  replay.type = "checkbox";
  replay.checked = true;
  replayBox.append(replay, " replay what did not change (no model calls for it)");
  const go = el("button", "primary", "Fork");
  const cancel = el("button", "", "Cancel");
  cancel.type = "button";
  cancel.onclick = () => { state.forking = null; renderDetail(run, key); };
  const row = el("div", "row");
  row.append(replayBox, go, cancel);
  form.append(message, row);
  form.onsubmit = async (e) => {
    e.preventDefault();
    const options = { ...feed(), atSeq: at.seq, replay: replay.checked };
    const text = message.value.trim();
    if (text) { options.message = text; if (key !== ROOT) options.agentKey = key; }
    go.disabled = true;
    try {
      showStarted(await conn.fork(run.runId, options), options.recent);
      notice(`forked at seq ${at.seq}`);
    } catch (error) { notice(error); go.disabled = false; }
  };
  return form;
}

// Where the agent's conversation was compacted: before which turn, why, the tokens before
// and after, and the summary that replaced the older part (what the agent now remembers).
function compactionBox(c, turn, run, agent) {
  const box = el("div", "compaction");
  const why = c.reason === "prompt_too_long" ? "the provider said the prompt is too long" : "past its threshold";
  let state;
  if (c.summary !== null) state = `${c.beforeTokens} → ${c.afterTokens} tokens · ${c.turns} earlier turns summarized, ${c.kept} messages kept`;
  else if (run.status === "running" && agent.status === "running") state = `${c.beforeTokens} tokens · summarizing…`;
  else state = `${c.beforeTokens} tokens · did not finish (${agentEnd(run, agent)})`;
  box.append(el("div", "label", `⟲ compacted before turn ${turn + 1} (${why}) · ${state}`));
  if (c.summary !== null) box.append(el("div", "prose summary", c.summary));
  return box;
}

// A selection inside the pane, as child-index paths from the pane: the redraw builds
// the same structure (streamed text only grows), so it can be put back where it was.
function saveSelection(root) {
  const s = document.getSelection();
  if (!s || s.isCollapsed || !root.contains(s.anchorNode) || !root.contains(s.focusNode)) return null;
  const path = (node) => {
    const out = [];
    for (; node && node !== root; node = node.parentNode) out.unshift([...node.parentNode.childNodes].indexOf(node));
    return out;
  };
  return { anchor: path(s.anchorNode), anchorOffset: s.anchorOffset, focus: path(s.focusNode), focusOffset: s.focusOffset };
}

function restoreSelection(root, saved) {
  if (!saved) return;
  const at = (path) => path.reduce((node, i) => (node ? node.childNodes[i] : null), root);
  const anchor = at(saved.anchor), focus = at(saved.focus);
  const fits = (node, offset) => node && offset <= (node.nodeType === 3 ? node.length : node.childNodes.length);
  if (fits(anchor, saved.anchorOffset) && fits(focus, saved.focusOffset)) {
    document.getSelection().setBaseAndExtent(anchor, saved.anchorOffset, focus, saved.focusOffset);
  }
}

// Images and files given to an agent (or returned by a tool): a thumbnail of each
// image and a download link, their bytes fetched over the socket once shown.
function attachmentsBox(title, run, attachments) {
  const box = el("div", "block attachments");
  if (title) box.append(el("div", "label", title));
  for (const a of attachments) {
    const item = el("div", "attachment");
    const link = el("a", "", `${a.name} (${a.mediaType}, ${a.size.toLocaleString()} bytes)`);
    link.download = a.name;
    link.href = "#";
    const image = a.mediaType.startsWith("image/") ? el("img", "thumb") : null;
    if (image) { image.alt = a.name; item.append(image); }
    item.append(link);
    conn.attachmentUrl(run.runId, a).then((url) => {
      link.href = url;
      if (image) image.src = url;
    }).catch((error) => { item.title = error.message || String(error); item.classList.add("missing"); });
    box.append(item);
  }
  return box;
}

function section(title, text, cls, markdown = false) {
  const box = el("div", "block");
  const label = el("div", "label");
  const button = el("button", "copy", "copy");
  button.type = "button";
  button.onclick = () => copy(text || "");
  label.append(el("span", "", title), button);
  box.append(label, markdown ? textBlock(text || "", cls, true) : el("div", cls, text || ""));
  return box;
}

// A model's text: rendered as sanitized Markdown once it has settled (markdown.js),
// as written while it streams or when the raw-text toggle is on.
function textBlock(text, cls, settled) {
  if (!settled || state.rawText) return el("div", cls, text);
  const box = el("div", `${cls} markdown`);
  box.append(renderMarkdown(text, copy));
  return box;
}

function rawToggle(run, key) {
  const label = el("label", "raw-toggle");
  const box = el("input");
  box.type = "checkbox";
  box.checked = state.rawText;
  box.onchange = () => { state.rawText = box.checked; box.blur(); renderDetail(run, key); };
  label.append(box, " raw text");
  label.title = "show answers and thinking as written instead of rendered as Markdown";
  return label;
}

// Stop this agent and its subtree (the root: the whole run), with an optional reason.
function stopBox(run, key, agent) {
  const form = el("form");
  form.id = "stop-box";
  const input = el("input");
  input.placeholder = "reason (optional)";
  input.setAttribute("aria-label", "reason");
  const button = el("button", "", key === ROOT ? "Stop run" : `Stop ${agent.name}`);
  button.title = key === ROOT ? "cancel the whole run" : "cancel this agent and everything it started; the run goes on";
  form.append(input, button);
  form.onsubmit = async (e) => {
    e.preventDefault();
    const reason = input.value.trim() || undefined;
    button.disabled = true;
    try {
      await conn.request("cancel", { runId: run.runId, agentKey: key === ROOT ? undefined : key, reason });
      input.value = "";
      notice("stop sent");
    } catch (error) { notice(error); button.disabled = false; }
  };
  return form;
}

// A waiting tool call: its name and arguments (editable where the agent allows it),
// Approve / Deny with a reason. The decision comes back as APPROVAL_RESOLVED, in every
// open console.
function approvalBox(run, key, approval) {
  const form = el("form", "approval");
  form.id = `approval-${approval.id}`;
  form.dataset.call = approval.id;
  const left = Math.max(0, Math.round(approval.timeoutAt - Date.now() / 1000));
  const until = left > 120 ? `${Math.round(left / 60)} min` : `${left} s`;
  form.append(el("div", "label", `waiting for approval · ${approval.name} · answer within ${until} (unanswered, it is refused)`));
  const args = el(approval.edit ? "textarea" : "pre", "args");
  const text = JSON.stringify(approval.args, null, 2);
  if (approval.edit) {
    args.value = text;
    args.rows = Math.min(12, text.split("\n").length + 1);
    args.setAttribute("aria-label", "arguments (editable)");
  } else args.textContent = text;
  const reason = el("input");
  reason.placeholder = "reason (optional)";
  reason.setAttribute("aria-label", "reason");
  const approve = el("button", "primary", "Approve");
  approve.value = "approve";
  const deny = el("button", "", "Deny");
  deny.value = "deny";
  const row = el("div", "row");
  row.append(reason, approve, deny);
  form.append(args, row);
  form.onsubmit = async (e) => {
    e.preventDefault();
    const decision = e.submitter && e.submitter.value === "deny" ? "deny" : "approve";
    // The agent says whose call it is: two agents of a run may both say `call_0`.
    const fields = { runId: run.runId, toolCallId: approval.id, agentKey: key === ROOT ? null : key, decision };
    if (reason.value.trim()) fields.reason = reason.value.trim();
    if (approval.edit && decision === "approve" && args.value.trim() !== text.trim()) {
      try { fields.args = JSON.parse(args.value); } catch { notice("the arguments are not valid JSON", "error"); return; }
    }
    approve.disabled = deny.disabled = true;
    try {
      await conn.request("approve", fields);
      notice(decision === "approve" ? "approved" : "denied");
    } catch (error) { notice(error); approve.disabled = deny.disabled = false; }
  };
  return form;
}

// How an agent's run ended, for what it left unfinished (no live words once it is over).
function agentEnd(run, agent) {
  if (agent.status !== "running") return agent.status === "error" ? agent.errorType || "error" : agent.status;
  return `run ${run.status}`;
}

// `ended`: null while the agent runs; else how it ended (an unfinished call then says so).
function toolBox(call, ended = null) {
  const box = el("div", "tool" + (call.isError ? " error" : ""));
  const a = call.approval;
  const open = a && a.decision === null;
  const state = call.result !== undefined ? (call.isError ? "error" : "done")
    : ended !== null ? `not finished (${ended})` : open ? "waiting for approval" : "running";
  const decided = a && a.decision !== null && a.decision !== "unanswered"
    ? ` · ${a.decision === "approve" ? "approved" : a.decision === "deny" ? "denied" : a.decision} by ${a.by}${a.edited ? " (edited)" : ""}${a.reason ? `: ${a.reason}` : ""}`
    : "";
  box.append(el("div", "label", `${call.server ? "server tool" : "tool"} · ${call.name} · ${state}${decided}`));
  const args = call.args !== undefined ? JSON.stringify(call.args, null, 2) : call.argsText;
  box.append(el("pre", "args", args || ""));
  if (call.result !== undefined) box.append(el("pre", "result" + (call.isError ? " error" : ""), call.result));
  if (call.attachments.length && state.run) box.append(attachmentsBox(null, state.run, call.attachments));
  return box;
}

$("detail").addEventListener("focusout", () => {
  if (state.detailStale && state.run && !state.pressing) setTimeout(() => renderDetail(state.run, state.selected), 0);
});
// A press in the pane lands on what it began on: no redraw between the pointer going
// down and the click (leaving a field for its button redrew the pane on focusout, and
// the button under the pointer was replaced: the click was lost).
$("detail").addEventListener("pointerdown", () => { state.pressing = true; });
document.addEventListener("pointerup", () => {
  if (!state.pressing) return;
  state.pressing = false;
  setTimeout(() => { if (state.detailStale && state.run) renderDetail(state.run, state.selected); }, 0);
});

// -- the timeline -------------------------------------------------------------------------

// Only the lanes in view are drawn, on a canvas the size of the view: a canvas as
// tall as 585 lanes cost ~50 ms a redraw just to allocate.
function renderTimeline(run) {
  const box = $("timeline");
  let canvas = box.querySelector("canvas");
  if (!canvas) {
    const spacer = el("div", "spacer");
    canvas = document.createElement("canvas");
    canvas.setAttribute("aria-label", "timeline of agents and tool calls");
    canvas.onmousemove = (e) => { canvas.title = timelineLabel(state.run, e) || ""; };
    canvas.onclick = (e) => forkFromTimeline(state.run, e);
    spacer.append(canvas);
    box.append(spacer);
    box.addEventListener("scroll", () => {
      if (!state.timelineFrame && state.run) {
        state.timelineFrame = requestAnimationFrame(() => { state.timelineFrame = 0; renderTimeline(state.run); });
      }
    });
  }
  if (run.firstTs === null) return;
  const agents = [...run.nodes.values()];
  const lane = 14, labelWidth = 150;
  const width = box.clientWidth - 24 || 600;
  const view = Math.min(agents.length * lane + 4, box.clientHeight || 300);
  canvas.parentElement.style.height = `${agents.length * lane + 4}px`;
  const ratio = window.devicePixelRatio || 1;
  const pixelsW = Math.floor(width * ratio), pixelsH = Math.floor(view * ratio);
  if (canvas.width !== pixelsW || canvas.height !== pixelsH) {
    canvas.width = pixelsW;
    canvas.height = pixelsH;
    canvas.style.width = `${width}px`;
    canvas.style.height = `${view}px`;
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, view);
  if (!state.colors) {
    const styles = getComputedStyle(document.documentElement);
    state.colors = ["--muted", "--bar", "--bar-tool", "--bar-wait"].map((name) => styles.getPropertyValue(name));
  }
  const [muted, bar, toolBar, waitBar] = state.colors;
  const end = run.status === "running" ? Math.max(run.lastTs, run.now()) : run.lastTs;
  const span = Math.max(end - run.firstTs, 0.001);
  const x = (t) => labelWidth + ((t - run.firstTs) / span) * (width - labelWidth - 4);
  const first = Math.floor(box.scrollTop / lane);
  const last = Math.min(agents.length, first + Math.ceil(view / lane) + 1);
  ctx.font = "11px system-ui, sans-serif";
  ctx.textBaseline = "middle";
  for (let i = first; i < last; i++) {
    const agent = agents[i];
    const y = i * lane + 2 - box.scrollTop;
    ctx.fillStyle = muted;
    ctx.fillText(`${"· ".repeat(agent.depth)}${agent.name}`.slice(0, 26), 0, y + lane / 2);
    const startTs = agent.startTs ?? run.firstTs;
    ctx.fillStyle = bar;
    ctx.fillRect(x(startTs), y + 1, Math.max(2, x(agent.endTs ?? end) - x(startTs)), lane - 4);
    ctx.fillStyle = toolBar;
    for (const call of agent.tools.values()) {
      ctx.fillRect(x(call.startTs), y + 4, Math.max(2, x(call.endTs ?? end) - x(call.startTs)), lane - 10);
    }
    ctx.fillStyle = waitBar;   // time spent waiting for a person's decision
    for (const a of agent.approvals.values()) {
      ctx.fillRect(x(a.ts), y + 1, Math.max(3, x(a.endTs ?? end) - x(a.ts)), lane - 4);
    }
  }
  state.timelineRows = agents;
  state.timelineSpan = { first: run.firstTs, span, labelWidth, width, lane, scroll: box.scrollTop };
}

// A click on an agent's lane: "Fork from here" at that agent's last event before then.
function forkFromTimeline(run, event) {
  const rows = state.timelineRows, geo = state.timelineSpan;
  if (!run || !rows || !geo || conn.readOnly) return;
  const agent = rows[Math.floor((event.offsetY + geo.scroll - 2) / geo.lane)];
  if (!agent || event.offsetX < geo.labelWidth) return;
  const ts = geo.first + ((event.offsetX - geo.labelWidth) / (geo.width - geo.labelWidth - 4)) * geo.span;
  const seq = run.seqAt(agent, ts);
  if (seq !== null) openFork(run, agent.key, seq, `${agent.name} at ${(ts - geo.first).toFixed(2)} s`);
}

function timelineLabel(run, event) {
  const rows = state.timelineRows, geo = state.timelineSpan;
  if (!rows || !geo) return "";
  const agent = rows[Math.floor((event.offsetY + geo.scroll - 2) / geo.lane)];
  if (!agent) return "";
  const stop = agent.endTs ?? run.lastTs;
  const waiting = agent.waiting > 0 ? `, ${agent.waiting} waiting for approval` : "";
  return `${agent.name}: ${((stop - (agent.startTs ?? geo.first))).toFixed(2)} s, ${agent.tools.size} tool call(s)${waiting}`;
}

// Durations of running agents tick once a second (only theirs are redrawn).
setInterval(() => {
  const run = state.run;
  if (!run || run.status !== "running") return;
  for (const agent of run.nodes.values()) if (agent.status === "running") run.dirty.add(agent.key);
  schedule();
}, 1000);

conn.connect();
