// The console's connection: the package's client (`./client/`, built from js/: docs/js.md)
// with what only a page needs — the token, kept in sessionStorage, asked for when the
// server's `/auth` refuses it; a viewer token's read-only mode; the input size limit.
//
// The token goes on the WebSocket URL's query (the server redacts it from its logs),
// never in the page's URL or history. Runs are followed through the package's handles,
// which resume by seq after a dropped socket or a server restart.

import { connect } from "./client/index.js";

const TOKEN_KEY = "orchestrator.token";

export class Connection {
  constructor({ onState }) {
    this.onState = onState;     // "connecting" | "open" | "disconnected" | "unauthorized"
    this.onOpen = null;         // called after every (re)connect
    this.client = null;
    this.readOnly = false;      // `/auth` says: a viewer token (no control may be used)
    this.maxInputBytes = 256 * 1024;   // `/auth` says: the longest task or message the server takes
    this.maxFrameBytes = 1024 * 1024;  // `/auth` says: a request's frame (attachments included)
    this.blobUrls = new Map();         // attachment id -> a blob: URL of its bytes (fetched once)
  }

  // Files chosen in a form, as a request's attachments (base64): refused, saying why,
  // when they would not fit in one frame (server.max_frame_bytes).
  async attachmentsOf(files) {
    const out = [];
    let size = 0;
    for (const file of files) {
      size += Math.ceil(file.size / 3) * 4;
      if (size > this.maxFrameBytes - 64 * 1024) {
        const kb = (n) => `${Math.ceil(n / 1024).toLocaleString()} KB`;
        throw { code: "bad_request", message: `the files are ${kb(size)} as base64: one request takes at most ${kb(this.maxFrameBytes)} (server.max_frame_bytes)` };
      }
      const url = await new Promise((resolve, reject) => {
        const reader = new FileReader();
        reader.onload = () => resolve(reader.result);
        reader.onerror = () => reject(reader.error);
        reader.readAsDataURL(file);
      });
      out.push({ name: file.name, mediaType: file.type || "application/octet-stream", data: String(url).split(",", 2)[1] || "" });
    }
    return out;
  }

  // A blob: URL of an attachment of a run (its bytes asked for once, over the socket).
  async attachmentUrl(runId, attachment) {
    let url = this.blobUrls.get(attachment.id);
    if (!url) {
      const data = await this.client.attachment(runId, attachment.id);
      const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
      url = URL.createObjectURL(new Blob([bytes], { type: attachment.mediaType }));
      this.blobUrls.set(attachment.id, url);
    }
    return url;
  }

  get token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }
  set token(value) {
    if (value) sessionStorage.setItem(TOKEN_KEY, value);
    else sessionStorage.removeItem(TOKEN_KEY);
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
      this.admin = body.admin !== false;        // (no tokens: everyone is)
      if (body.maxInputBytes) this.maxInputBytes = body.maxInputBytes;
      if (body.maxFrameBytes) this.maxFrameBytes = body.maxFrameBytes;
      return !body.authorized;
    } catch {
      return false;   // the server is down: the client's attempts will say so
    }
  }

  async connect() {
    this.onState("connecting");
    if (await this.unauthorized()) {
      this.onState("unauthorized");
      return;
    }
    if (this.client) this.client.close();
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const client = connect(`${scheme}://${location.host}/ws`, { token: this.token || undefined, reconnect: "always" });
    this.client = client;
    client.onState((state) => {
      if (this.client !== client) return;
      if (state === "open") {
        this.onState("open");
        if (this.onOpen) this.onOpen();
      } else if (state === "reconnecting") {
        this.onState("disconnected");
        // A server started again with other tokens: ask for one instead of retrying.
        this.unauthorized().then((refused) => {
          if (refused && this.client === client) {
            client.close();
            this.onState("unauthorized");
          }
        });
      }
    });
  }

  get open() { return this.client !== null && this.client.state === "open"; }

  // Send an op and wait for its reply (an error rejects with the server's code and message).
  request(op, fields = {}) {
    if (!this.client) return Promise.reject({ code: "disconnected", message: "not connected" });
    return this.client.request({ op, ...fields });
  }

  // A run's handle: started, followed, or forked (the package's `RunHandle`).
  run(agent, input, options) { return this.client.run(agent, input, { ...options, events: false }); }
  subscribe(runId, options) { return this.client.subscribe(runId, { ...options, events: false }); }
  fork(runId, options) { return this.client.fork(runId, { ...options, events: false }); }
}
