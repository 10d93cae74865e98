// The WebSocket connection: requests with ids, reconnect with backoff, resume by afterSeq.
//
// The token (asked for when the server answers 401) lives in sessionStorage only:
// it goes on the WebSocket URL's query (the server redacts it from its logs), never
// in the page's URL or history.

const TOKEN_KEY = "orchestrator.token";

export class Connection {
  constructor({ onFrame, onState }) {
    this.onFrame = onFrame;     // every server frame that is not a reply to a request
    this.onState = onState;     // "connecting" | "open" | "disconnected" | "unauthorized"
    this.pending = new Map();   // request id -> {resolve, reject}
    this.nextId = 1;
    this.ws = null;
    this.backoff = 500;
    this.onOpen = null;         // called after every (re)connect, before requests flow
    this.closedByUs = false;
    this.readOnly = false;      // `/auth` says: a viewer token (no control may be used)
    this.maxInputBytes = 256 * 1024;   // `/auth` says: the longest task or message the server takes
  }

  get token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }
  set token(value) {
    if (value) sessionStorage.setItem(TOKEN_KEY, value);
    else sessionStorage.removeItem(TOKEN_KEY);
  }

  url() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const query = this.token ? `?token=${encodeURIComponent(this.token)}` : "";
    return `${scheme}://${location.host}/ws${query}`;
  }

  // Why `text` is too long to send as a task or message (null: it is not), with the limit.
  tooLong(text, what = "the task") {
    const size = new TextEncoder().encode(text).length;
    if (size <= this.maxInputBytes) return null;
    const kb = (n) => `${Math.ceil(n / 1024).toLocaleString()} KB`;
    return `${what} is ${kb(size)}: this server takes at most ${kb(this.maxInputBytes)} (limits.max_input_bytes)`;
  }

  // Does the server want a token we do not have (or refuse ours)? `/auth` says.
  async unauthorized() {
    try {
      const headers = this.token ? { Authorization: `Bearer ${this.token}` } : {};
      const response = await fetch("/auth", { headers, cache: "no-store" });
      const body = await response.json();
      this.readOnly = body.readOnly === true;   // a viewer token: watch, change nothing
      if (body.maxInputBytes) this.maxInputBytes = body.maxInputBytes;
      return !body.authorized;
    } catch {
      return false;   // the server is down: the WebSocket attempt will say so
    }
  }

  async connect() {
    this.onState("connecting");
    if (await this.unauthorized()) {
      this.onState("unauthorized");
      return;
    }
    const ws = new WebSocket(this.url());
    this.ws = ws;
    ws.onopen = () => {
      this.backoff = 500;
      this.onState("open");
      if (this.onOpen) this.onOpen();
    };
    ws.onmessage = (message) => {
      const frame = JSON.parse(message.data);
      const waiter = frame.id !== undefined && frame.op !== "events" ? this.pending.get(frame.id) : null;
      if (waiter && (frame.op !== "result")) {
        this.pending.delete(frame.id);
        if (frame.op === "error") waiter.reject(frame);
        else waiter.resolve(frame);
        return;
      }
      this.onFrame(frame);
    };
    ws.onclose = () => {
      if (this.ws !== ws) return;
      for (const waiter of this.pending.values()) waiter.reject({ code: "disconnected", message: "connection lost" });
      this.pending.clear();
      this.ws = null;
      if (this.closedByUs) return;
      this.onState("disconnected");
      const delay = this.backoff;
      this.backoff = Math.min(this.backoff * 2, 8000);
      setTimeout(() => this.connect(), delay);
    };
  }

  get open() { return this.ws !== null && this.ws.readyState === WebSocket.OPEN; }

  // Send an op and wait for its reply (ack, runs, agents, pong, or an error frame).
  request(op, fields = {}) {
    if (!this.open) return Promise.reject({ code: "disconnected", message: "not connected" });
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.ws.send(JSON.stringify({ op, id, ...fields }));
    });
  }
}
