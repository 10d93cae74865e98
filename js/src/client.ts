// The WebSocket client: requests with ids, run handles, and automatic resume.
//
// One socket per client. A dropped socket (a network blip, a server restart) is
// opened again with backoff, and every open run handle subscribes again from the last
// seq it got, with its filter and detail: the server sends exactly the events after
// that seq, and a repeat is dropped here anyway, so a handle sees each event once, in
// order. Requests sent while the socket is down wait for it; a request whose socket
// dropped after it went out rejects with `disconnected` (it may have been applied).

import type {
  Ack,
  AgentEvent,
  AgentInfo,
  AttachmentIn,
  ApprovalInfo,
  ErrorCode,
  FilterSpec,
  RunInfo,
  ServerFrame,
  ThreadInfo,
  TriggerInfo,
  WebhooksReply,
} from "./schema.js";
import { AgentTree, type RunStatus } from "./tree.js";

/** An error the server answered (`code` as it says), or `disconnected`/`closed` here. */
export class OrchestratorError extends Error {
  readonly code: ErrorCode | "disconnected" | "closed";
  constructor(code: ErrorCode | "disconnected" | "closed", message: string) {
    super(message);
    this.name = "OrchestratorError";
    this.code = code;
  }
}

export type Detail = "full" | "blocks" | "status";
export type Multitask = "reject" | "steer" | "enqueue" | "interrupt" | "rollback";
export type ConnectionState = "connecting" | "open" | "reconnecting" | "closed";

export interface ConnectOptions {
  /** A bearer token (sent as `?token=`, which the server keeps out of its logs). */
  token?: string;
  /** Open the socket again after a drop and resume every run (default true). A first
   * connection that fails is not tried again (its requests reject at once) unless
   * `"always"`: a page that waits for its server. */
  reconnect?: boolean | "always";
  /** The longest wait between two attempts, in ms (default 8000). */
  maxBackoffMs?: number;
  /** A WebSocket class (default: the global one: browsers, Node 22). */
  WebSocket?: WebSocketClass;
}

export interface FeedOptions {
  filter?: FilterSpec;
  detail?: Detail;
  /** Keep the events for iterating the handle (default true; false: the tree, `done`
   * and `onEvents` only, so a long run costs no memory for events nobody reads). */
  events?: boolean;
  /** Hear each batch of events from the first (as `handle.onEvents`, set before any came). */
  onEvents?: (events: readonly AgentEvent[]) => void;
}

export interface RunOptions extends FeedOptions {
  threadId?: string;
  multitask?: Multitask;
  /** (a thread's run) Go on from this agent of an earlier run of the thread. */
  agentKey?: string;
  fromRun?: string;
  /** The JSON Schema the root's answer must match: the root node's `structured` and the
   * `done` result's `structured` hold it (docs/structured.md). */
  outputSchema?: Record<string, unknown>;
  /** Images and files for the root: `{name, mediaType, data}` (base64) or `{name,
   * mediaType, url}` (docs/structured.md#attachments). */
  attachments?: AttachmentIn[];
}

export interface SubscribeOptions extends FeedOptions {
  /** Only the events after this seq (default 0: from the start). */
  afterSeq?: number;
}

export interface ForkOptions extends FeedOptions {
  atSeq: number;
  agentKey?: string;
  message?: string;
  replay?: boolean;
}

export interface ApproveOptions {
  toolCallId: string;
  decision: "approve" | "deny";
  /** The calling agent's key (null: the root), needed when two agents have the id. */
  agentKey?: string | null;
  reason?: string;
  args?: Record<string, unknown>;
}

/** How a run ended (`done`): the end frame, with RUN_FINISHED's result or error. */
export interface RunEnd {
  runId: string;
  status: string;
  result?: string;
  /** The root's validated answer, when the run asked for an output schema. */
  structured?: unknown;
  error?: string;
}

interface WebSocketLike {
  readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  onopen: ((ev: unknown) => void) | null;
  onclose: ((ev: unknown) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
}
type WebSocketClass = new (url: string) => WebSocketLike;

interface Waiter {
  resolve(frame: ServerFrame): void;
  reject(error: OrchestratorError): void;
  sent: boolean;
  message: Record<string, unknown>;
  /** The handle whose feed the request opens: its ack attaches it at once (the feed's
   * first frames may be read before the request's caller resumes). */
  handle?: RunHandle;
}

/** The `/ws` URL of `url` (`http(s)://` becomes `ws(s)://`; no path: `/ws`). */
export function wsUrl(url: string, token?: string): string {
  const u = new URL(url);
  if (u.protocol === "http:") u.protocol = "ws:";
  else if (u.protocol === "https:") u.protocol = "wss:";
  if (u.pathname === "" || u.pathname === "/") u.pathname = "/ws";
  if (token) u.searchParams.set("token", token);
  return u.toString();
}

/** A client of one server (`connect`). */
export class Client {
  state: ConnectionState = "connecting";
  /** Times the socket was opened again after a drop. */
  reconnects = 0;
  readonly #url: string;
  readonly #options: ConnectOptions;
  readonly #WebSocket: WebSocketClass;
  #ws: WebSocketLike | null = null;
  #nextId = 1;
  #backoff = 250;
  readonly #waiting = new Map<number, Waiter>();
  readonly #handles = new Map<string, RunHandle>();
  readonly #stateListeners = new Set<(state: ConnectionState) => void>();
  #timer: ReturnType<typeof setTimeout> | null = null;

  constructor(url: string, options: ConnectOptions = {}) {
    this.#url = wsUrl(url, options.token);
    this.#options = options;
    const found = options.WebSocket ?? (globalThis as { WebSocket?: WebSocketClass }).WebSocket;
    if (!found) throw new Error("no WebSocket here: pass one as `WebSocket` (Node 22 has it)");
    this.#WebSocket = found;
    this.#open();
  }

  /** Hear every change of the connection's state. Returns the unsubscribe. */
  onState(listener: (state: ConnectionState) => void): () => void {
    this.#stateListeners.add(listener);
    return () => this.#stateListeners.delete(listener);
  }

  /** Start a run of `agent` on `input` and follow it from its first event (`agent`
   * null: a thread's next run, of its thread's agent). */
  async run(agent: string | null, input: string, options: RunOptions = {}): Promise<RunHandle> {
    const { filter, detail, threadId, multitask, agentKey, fromRun, outputSchema } = options;
    const { attachments } = options;
    const { onEvents } = options;
    const handle = new RunHandle(this, "", { filter, detail, onEvents }, 0, options.events !== false);
    await this.request({
      op: "run", agent: agent ?? undefined, input, stream: true, filter, detail, threadId, multitask,
      agentKey, fromRun, outputSchema, attachments,
    }, handle);
    return handle;
  }

  /** Follow a run (from its start, or after `afterSeq`): its past events, then live. */
  async subscribe(runId: string, options: SubscribeOptions = {}): Promise<RunHandle> {
    const { filter, detail, afterSeq, onEvents } = options;
    const feed = { filter, detail, onEvents };
    const handle = new RunHandle(this, runId, feed, afterSeq ?? 0, options.events !== false);
    await this.request(
      { op: "subscribe", runId, afterSeq: afterSeq ?? 0, filter, detail }, handle,
    );
    return handle;
  }

  /** Start a fork of a run at `atSeq` (docs/fork.md) and follow it. */
  async fork(runId: string, options: ForkOptions): Promise<RunHandle> {
    const { filter, detail, atSeq, agentKey, message, replay, onEvents } = options;
    const handle = new RunHandle(this, "", { filter, detail, onEvents }, 0, options.events !== false);
    await this.request(
      { op: "fork", runId, atSeq, agentKey, message, replay, stream: true, filter, detail },
      handle,
    );
    return handle;
  }

  /** The runs this token may see, newest first (`before`: a runId, for the next page). */
  async runs(options: { limit?: number; before?: string } = {}): Promise<RunInfo[]> {
    const reply = await this.request({ op: "runs", ...options });
    return reply.op === "runs" ? reply.runs : [];
  }

  /** The agents a run may start. */
  async agents(): Promise<AgentInfo[]> {
    const reply = await this.request({ op: "agents" });
    return reply.op === "agents" ? reply.agents : [];
  }

  /** The conversations this token may see (`threadId`: one, with its runs). */
  async threads(options: { threadId?: string; limit?: number } = {}): Promise<ThreadInfo[]> {
    const reply = await this.request({ op: "threads", ...options });
    return reply.op === "threads" ? reply.threads : [];
  }

  /** The bytes of an attachment of a run, in base64 (the run must be visible to the
   * token; docs/structured.md#attachments). */
  async attachment(runId: string, attachmentId: string): Promise<string> {
    const reply = await this.request({ op: "attachment", runId, attachmentId });
    return reply.op === "attachment" ? reply.data : "";
  }

  /** The server's triggers (docs/triggers.md); with `action` (`pause`, `resume`,
   * `fire`: an admin's token) on `name` first. */
  async triggers(options: { action?: "list" | "pause" | "resume" | "fire"; name?: string } = {}): Promise<TriggerInfo[]> {
    const reply = await this.request({ op: "triggers", ...options });
    return reply.op === "triggers" ? reply.triggers : [];
  }

  /** The outbox (docs/webhooks.md#webhooks-out): the server's webhooks, how many
   * deliveries wait, the dead ones; with `redeliver` (a delivery's id, or `"all"`: an
   * admin's token) dead ones are sent again first. */
  async webhooks(options: { redeliver?: string } = {}): Promise<WebhooksReply> {
    const asked = options.redeliver === undefined
      ? {}
      : { action: "redeliver", ...(options.redeliver === "all" ? {} : { deliveryId: options.redeliver }) };
    const reply = await this.request({ op: "webhooks", ...asked });
    if (reply.op !== "webhooks") throw new OrchestratorError("bad_request", `unexpected ${reply.op} reply`);
    return reply;
  }

  /** The calls waiting for a person (`runId`: of one run). */
  async pending(options: { runId?: string; limit?: number } = {}): Promise<ApprovalInfo[]> {
    const reply = await this.request({ op: "pending", ...options });
    return reply.op === "pending" ? reply.approvals : [];
  }

  /** Close the socket; every open handle ends with `closed`. */
  close(): void {
    this.#setState("closed");
    if (this.#timer !== null) clearTimeout(this.#timer);
    const ws = this.#ws;
    this.#ws = null;
    ws?.close(1000);
    this.#failWaiting(new OrchestratorError("closed", "the client was closed"), true);
    for (const handle of this.#handles.values()) handle._fail(new OrchestratorError("closed", "the client was closed"));
    this.#handles.clear();
  }

  /** Send an op and wait for its reply (an error frame rejects with its code). */
  request(message: Record<string, unknown>, handle?: RunHandle): Promise<ServerFrame> {
    if (this.state === "closed") {
      return Promise.reject(new OrchestratorError("closed", "the client was closed"));
    }
    const id = this.#nextId++;
    const clean = Object.fromEntries(Object.entries(message).filter(([, v]) => v !== undefined));
    return new Promise<ServerFrame>((resolve, reject) => {
      const waiter: Waiter = { resolve, reject, sent: false, message: { ...clean, id }, handle };
      this.#waiting.set(id, waiter);
      this.#flush();
    });
  }

  /** (internal) Stop following a run here. */
  _forget(handle: RunHandle): void {
    if (handle.sub) {
      this.#handles.delete(handle.sub);
      if (this.state === "open") this.request({ op: "unsubscribe", sub: handle.sub }).catch(() => {});
    }
  }

  #attach(handle: RunHandle, ack: Ack): void {
    if (ack.runId) {
      handle.runId = ack.runId;
      handle.tree.runId = ack.runId;
    }
    if (ack.threadId) handle.threadId = ack.threadId;
    handle.sub = ack.sub ?? null;
    if (handle.sub) this.#handles.set(handle.sub, handle);
  }

  #open(): void {
    const ws = new this.#WebSocket(this.#url);
    this.#ws = ws;
    ws.onopen = () => {
      if (this.#ws !== ws) return;
      const again = this.state === "reconnecting";
      this.#backoff = 250;
      this.#setState("open");
      if (again) {
        this.reconnects += 1;
        this.#resubscribe();
      }
      this.#flush();
    };
    ws.onmessage = (message) => {
      if (this.#ws === ws) this.#frame(JSON.parse(String(message.data)) as ServerFrame);
    };
    // A refused handshake may fire only `error` (Node's WebSocket stays CONNECTING).
    ws.onerror = () => {
      if (this.#ws !== ws || ws.readyState === 1) return;
      this.#ws = null;
      try {
        ws.close();
      } catch {
        // (already closing)
      }
      this.#dropped();
    };
    ws.onclose = () => {
      if (this.#ws !== ws) return;
      this.#ws = null;
      this.#dropped();
    };
  }

  #dropped(): void {
    const neverOpened = this.state === "connecting";
    const lost = neverOpened
      ? new OrchestratorError("disconnected", `could not connect to ${this.#url.split("?")[0]}`)
      : new OrchestratorError("disconnected", "the connection was lost");
    this.#failWaiting(lost, false);
    const again = this.#options.reconnect ?? true;
    if (again === false || (neverOpened && again !== "always")) {
      this.#setState("closed");
      const give = (error: OrchestratorError): void => {
        for (const handle of this.#handles.values()) handle._fail(error);
        this.#handles.clear();
        this.#failWaiting(error, true);
      };
      if (neverOpened) this.#refusal().then((refused) => give(refused ?? lost), () => give(lost));
      else give(lost);
      return;
    }
    if (this.state !== "closed") this.#setState("reconnecting");
    const delay = this.#backoff;
    this.#backoff = Math.min(this.#backoff * 2, this.#options.maxBackoffMs ?? 8000);
    this.#timer = setTimeout(() => {
      this.#timer = null;
      if (this.state !== "closed") this.#open();
    }, delay);
  }

  // Requests that went out on a dropped socket fail (they may have been applied);
  // with `all`, those still waiting to go out fail too.
  // Why a first connection failed, when the server says it is the token (`/auth`:
  // a WebSocket does not show the HTTP status of a refused handshake).
  async #refusal(): Promise<OrchestratorError | null> {
    if (typeof fetch !== "function") return null;
    const u = new URL(this.#url);
    const token = u.searchParams.get("token");
    u.protocol = u.protocol === "wss:" ? "https:" : "http:";
    u.pathname = "/auth";
    u.search = "";
    const headers: Record<string, string> = token ? { Authorization: `Bearer ${token}` } : {};
    const response = await fetch(u, { headers });
    const body = (await response.json()) as { authorized?: boolean };
    if (body.authorized !== false) return null;
    const message = token ? "the server refused this token" : "the server needs a token";
    return new OrchestratorError("unauthorized", message);
  }

  #failWaiting(error: OrchestratorError, all: boolean): void {
    for (const [id, waiter] of this.#waiting) {
      if (waiter.sent || all) {
        this.#waiting.delete(id);
        waiter.reject(error);
      }
    }
  }

  #flush(): void {
    const ws = this.#ws;
    if (ws === null || this.state !== "open") return;
    for (const waiter of this.#waiting.values()) {
      if (waiter.sent) continue;
      waiter.sent = true;
      ws.send(JSON.stringify(waiter.message));
    }
  }

  // Every open handle follows its run again from the last seq it got.
  #resubscribe(): void {
    const handles = [...this.#handles.values()];
    this.#handles.clear();
    for (const handle of handles) {
      handle.resumes += 1;
      this.request({
        op: "subscribe", runId: handle.runId, afterSeq: handle.lastSeq,
        filter: handle.feed.filter, detail: handle.feed.detail,
      }, handle).catch((error: OrchestratorError) => {
        if (error.code !== "disconnected") handle._fail(error);
        else this.#handles.set(`again:${handle.runId}`, handle); // the next open tries again
      });
    }
  }

  #frame(frame: ServerFrame): void {
    if (frame.op === "events" || frame.op === "end" || frame.op === "gap") {
      this.#handles.get(frame.sub)?._frame(frame);
      return;
    }
    const id = typeof frame.id === "number" ? frame.id : null;
    const waiter = id === null ? undefined : this.#waiting.get(id);
    if (id === null || !waiter) return; // (an error frame that answers no request of ours)
    this.#waiting.delete(id);
    if (frame.op === "error") {
      waiter.reject(new OrchestratorError(frame.code, frame.message));
      return;
    }
    if (frame.op === "ack" && waiter.handle) this.#attach(waiter.handle, frame);
    waiter.resolve(frame);
  }

  #setState(state: ConnectionState): void {
    if (this.state === state) return;
    this.state = state;
    for (const listener of this.#stateListeners) listener(state);
  }
}

/** A run being followed: its events (iterate the handle), its live `tree`, its end
 * (`done`), and the controls that act on it. */
export class RunHandle implements AsyncIterable<AgentEvent> {
  runId: string;
  threadId: string | null = null;
  sub: string | null = null;
  readonly tree: AgentTree;
  readonly feed: FeedOptions;
  /** The seq of the last event it got (the resume cursor). */
  lastSeq: number;
  /** Times it followed its run again after the socket dropped. */
  resumes = 0;
  /** Seq ranges the server could no longer replay (`gap` frames). */
  readonly gaps: { fromSeq: number; toSeq: number }[] = [];
  /** Settles with the end frame (and RUN_FINISHED's result or error); rejects when
   * the handle can no longer follow its run (`closed`, or a drop without `reconnect`). */
  readonly done: Promise<RunEnd>;
  readonly #client: Client;
  #ended: RunEnd | null = null;
  #failed: OrchestratorError | null = null;
  #resolve!: (end: RunEnd) => void;
  #reject!: (error: OrchestratorError) => void;
  /** Events for the iterator (null: `events: false`, nothing kept). */
  readonly #queue: AgentEvent[] | null;
  #iterating = false;
  readonly #wakers = new Set<() => void>();
  readonly #listeners = new Set<(events: readonly AgentEvent[]) => void>();
  readonly #gapListeners = new Set<(gap: { fromSeq: number; toSeq: number }) => void>();
  #finished: { result?: string; structured?: unknown; error?: string } = {};

  constructor(client: Client, runId: string, feed: FeedOptions, afterSeq = 0, keep = true) {
    this.#client = client;
    this.runId = runId;
    this.feed = feed;
    this.lastSeq = afterSeq;
    this.#queue = keep ? [] : null;
    if (feed.onEvents) this.#listeners.add(feed.onEvents);
    this.tree = new AgentTree(runId || null);
    this.done = new Promise<RunEnd>((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    this.done.catch(() => {}); // (a caller that never awaits it sees no unhandled rejection)
  }

  /** Whether the run has ended (or the handle failed). */
  get ended(): boolean {
    return this.#ended !== null || this.#failed !== null;
  }

  /** Hear each batch of new events (after the tree applied them). Returns the unsubscribe. */
  onEvents(listener: (events: readonly AgentEvent[]) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Hear each seq range the server could no longer replay. Returns the unsubscribe. */
  onGap(listener: (gap: { fromSeq: number; toSeq: number }) => void): () => void {
    this.#gapListeners.add(listener);
    return () => this.#gapListeners.delete(listener);
  }

  /** Answer a call that waits for a person; rejects with the server's code when it
   * cannot (`not_found`: no such waiting call, or it was answered already). */
  async approve(options: ApproveOptions): Promise<void> {
    await this.#client.request({ op: "approve", runId: this.runId, ...options });
  }

  /** Cancel the run, or one agent and its subtree (`agentKey`; the run goes on). */
  async cancel(options: { agentKey?: string; reason?: string } = {}): Promise<void> {
    await this.#client.request({ op: "cancel", runId: this.runId, ...options });
  }

  /** Send a person's message to an agent (default: the root). */
  async send(
    message: string, options: { agentKey?: string; attachments?: AttachmentIn[] } = {},
  ): Promise<void> {
    await this.#client.request({ op: "send", runId: this.runId, message, ...options });
  }

  /** Fork the run at `atSeq` (docs/fork.md): the fork's handle. */
  fork(options: ForkOptions): Promise<RunHandle> {
    const { filter, detail } = this.feed;
    return this.#client.fork(this.runId, { filter, detail, ...options });
  }

  /** Stop following the run (the run goes on); the event iterator ends. */
  close(): void {
    this.#client._forget(this);
    this._fail(new OrchestratorError("closed", "the handle was closed"));
  }

  /** The run's events, in seq order, each once; ends when the run ends. The events
   * that came before the iteration began wait for it. One iteration per handle. */
  [Symbol.asyncIterator](): AsyncIterator<AgentEvent> {
    const queue = this.#queue;
    if (queue === null) throw new Error("this handle keeps no events (`events: false`)");
    if (this.#iterating) throw new Error("a handle's events can be iterated once");
    this.#iterating = true;
    return {
      next: async (): Promise<IteratorResult<AgentEvent>> => {
        for (;;) {
          const event = queue.shift();
          if (event) return { value: event, done: false };
          if (this.#failed && this.#failed.code !== "closed") throw this.#failed;
          if (this.ended) return { value: undefined, done: true };
          await new Promise<void>((wake) => this.#wakers.add(wake));
        }
      },
      return: async (): Promise<IteratorResult<AgentEvent>> => {
        queue.length = 0;
        return { value: undefined, done: true };
      },
    };
  }

  #wakeAll(): void {
    const wakers = [...this.#wakers];
    this.#wakers.clear();
    for (const wake of wakers) wake();
  }

  /** @internal A frame of its feed. */
  _frame(frame: ServerFrame): void {
    if (frame.op === "events") {
      const fresh = frame.events.filter((e) => e.seq > this.lastSeq);
      if (fresh.length === 0) return;
      this.lastSeq = fresh[fresh.length - 1].seq;
      for (const event of fresh) {
        if (event.type === "RUN_FINISHED") {
          this.#finished = { result: event.data.result, error: event.data.error };
          if ("structured" in event.data) this.#finished.structured = event.data.structured;
        }
      }
      this.tree.applyAll(fresh);
      this.#queue?.push(...fresh);
      for (const listener of this.#listeners) listener(fresh);
      this.#wakeAll();
    } else if (frame.op === "gap") {
      const gap = { fromSeq: frame.fromSeq, toSeq: frame.toSeq };
      this.gaps.push(gap);
      this.lastSeq = Math.max(this.lastSeq, frame.toSeq);
      for (const listener of this.#gapListeners) listener(gap);
    } else if (frame.op === "end") {
      if (this.ended) return;
      this.tree.end(frame.status as RunStatus); // (a filter may have left RUN_FINISHED out)
      this.#ended = { runId: frame.runId, status: frame.status, ...this.#finished };
      this.#client._forget(this);
      this.#resolve(this.#ended);
      this.#wakeAll();
    }
  }

  /** @internal It can no longer follow its run. */
  _fail(error: OrchestratorError): void {
    if (this.ended) return;
    this.#failed = error;
    this.#reject(error);
    this.#wakeAll();
  }
}

/** Connect to a server (`ws://HOST:PORT/ws`, or its `http://HOST:PORT`). */
export function connect(url: string, options: ConnectOptions = {}): Client {
  return new Client(url, options);
}
