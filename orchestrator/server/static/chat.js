// A thread as a chat (docs/threads.md, docs/console.md): the selected run's thread, each
// exchange its input and its answer (the `threads` op with a threadId), a click opening
// that run's tree, and a message box under the last answer that sends the thread's next
// input (`run` with threadId) — with the `multitask` choice while a run of it still runs.
// Uses only the public protocol.

const MULTITASK = [
  ["steer", "say it to the running run"],
  ["enqueue", "send it after the running run"],
  ["interrupt", "stop the running run, then go on"],
  ["rollback", "discard the running run, go on from before it"],
];

export class Chat {
  constructor(conn, { root, open, started, notice, render }) {
    this.conn = conn;
    this.root = root;          // the <section> the chat is drawn in
    this.open = open;          // open(runId): show that run's tree
    this.started = started;    // started(handle): a run this chat started
    this.notice = notice;
    this.render = render;      // render(text, element): an answer, as the detail pane shows it
    this.threadId = null;
    this.files = [];           // the files chosen for the next message (`box`)
    this.runId = null;         // the run whose tree is shown
    this.runs = [];            // the thread's runs, oldest first, each with its answer
    this.loading = 0;
    this.sending = false;
  }

  // The run `run` (a `runs` entry, or null) is shown: its thread's chat, if it has one.
  async show(run) {
    this.runId = run ? run.runId : null;
    const threadId = run ? run.threadId || null : null;
    if (threadId !== this.threadId) {
      this.threadId = threadId;
      this.runs = [];
      this.files = [];         // (chosen for another conversation)
      this.draw();
    }
    if (threadId) await this.refresh();
    else this.draw();
  }

  // The thread's runs and answers again (a run of it started or ended).
  async refresh() {
    const threadId = this.threadId;
    if (!threadId || !this.conn.open) return;
    const asked = ++this.loading;
    try {
      const reply = await this.conn.request("threads", { threadId });
      if (asked !== this.loading || threadId !== this.threadId) return;   // a newer one wins
      this.runs = reply.threads.length ? reply.threads[0].detail || [] : [];
    } catch (error) {
      if (error.code !== "not_found") this.notice(error);
      this.runs = [];
    }
    this.draw();
  }

  get running() {
    return this.runs.find((r) => r.status === "running" || r.status === "queued") || null;
  }

  draw() {
    const root = this.root;
    root.classList.toggle("hidden", !this.threadId);
    if (!this.threadId) { root.replaceChildren(); return; }
    const kept = root.querySelector("#chat-input");
    const typed = kept ? kept.value : "";
    const focused = kept && document.activeElement === kept;
    const title = el("h2", "", "Conversation ");
    title.append(el("span", "count", `${this.runs.length} ${this.runs.length === 1 ? "exchange" : "exchanges"}`));
    const list = el("ol", "chat-log");
    list.setAttribute("aria-label", "conversation");
    for (const run of this.runs) list.append(this.exchange(run));
    root.replaceChildren(title, list, this.box(typed));
    if (focused) root.querySelector("#chat-input").focus();
  }

  exchange(run) {
    const item = el("li", run.runId === this.runId ? "exchange on" : "exchange");
    item.dataset.run = run.runId;
    const asked = el("div", "said user", run.input);
    const answer = el("div", "said agent");
    if (run.answer) this.render(run.answer, answer);
    else answer.append(el("span", `badge ${run.status}`, run.status === "completed" ? "no answer" : run.status));
    const open = el("button", "link", run.runId === this.runId ? "tree shown" : "open its tree");
    open.type = "button";
    open.title = `run ${run.runId} (${run.agentId})`;
    open.onclick = () => this.open(run.runId);
    item.append(asked, answer, open);
    return item;
  }

  box(typed) {
    const form = el("form", "chat-box");
    form.id = "chat-form";
    form.autocomplete = "off";
    const input = el("input");
    input.id = "chat-input";
    input.setAttribute("aria-label", "message");
    input.placeholder = "Say more — Enter sends it to this conversation";
    input.value = typed;
    const send = el("button", "primary", "Send");
    send.type = "submit";
    send.disabled = this.sending || !this.conn.open;
    form.append(input);
    const attach = el("label", "attach", "📎");
    attach.title = "attach images or files to the message";
    const files = el("input");
    files.type = "file";
    files.multiple = true;
    files.id = "chat-files";
    files.setAttribute("aria-label", "attach files");
    // The files chosen are kept here, not in the input: the box is drawn again as the
    // conversation moves, and a new input would have lost them.
    const shown = () => { attach.dataset.count = this.files.length ? String(this.files.length) : ""; };
    files.onchange = () => { this.files = [...files.files]; shown(); };
    shown();
    attach.append(files);
    form.append(attach);
    const running = this.running;
    if (running) {
      const choice = el("select");
      choice.id = "chat-multitask";
      choice.setAttribute("aria-label", "while a run of this conversation runs");
      for (const [value, label] of MULTITASK) {
        const option = el("option", "", label);
        option.value = value;
        choice.append(option);
      }
      form.append(choice);
    }
    form.append(send);
    form.onsubmit = (event) => { event.preventDefault(); this.send(); };
    return form;
  }

  async send() {
    const input = this.root.querySelector("#chat-input");
    const text = input.value.trim();
    if (!text || this.sending || !this.threadId) return;
    const tooLong = this.conn.tooLong(text, "the message");
    if (tooLong) { this.notice(tooLong, "error"); return; }
    const options = { threadId: this.threadId };
    const choice = this.root.querySelector("#chat-multitask");
    if (choice) options.multitask = choice.value;
    this.sending = true;
    try {
      if (this.files.length) options.attachments = await this.conn.attachmentsOf(this.files);
      const handle = await this.conn.run(null, text, options);   // (the thread's agent)
      input.value = "";
      this.files = [];
      this.started(handle);
    } catch (error) {
      this.notice(error);
    } finally {
      this.sending = false;
      this.refresh();
    }
  }
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}
