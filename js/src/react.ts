// React bindings: `useAgentTree` follows a run (or starts one) and re-renders at most
// once per animation frame however fast events come; `useAgentNode` re-renders one
// agent's card only when that agent changed (its node's `version`).

import { useCallback, useEffect, useRef, useState, useSyncExternalStore } from "react";

import type {
  ApproveOptions,
  Client,
  OrchestratorError,
  RunHandle,
  RunOptions,
  SubscribeOptions,
} from "./client.js";
import type { AgentEvent } from "./schema.js";
import type { AgentNode, AgentTree, RunStatus } from "./tree.js";

/** What to follow: a runId, an existing run with options, or a run to start. */
export type RunTarget =
  | string
  | ({ runId: string } & SubscribeOptions)
  | ({ agent: string; input: string } & RunOptions);

export interface AgentTreeOptions {
  /** How many of the latest events `events` holds (default 1000). */
  keepEvents?: number;
}

export interface AgentTreeState {
  /** The live tree (null until the server acknowledged the run). */
  tree: AgentTree | null;
  handle: RunHandle | null;
  /** The latest events (at most `keepEvents`), oldest first. */
  events: readonly AgentEvent[];
  status: "connecting" | RunStatus | "error";
  error: OrchestratorError | null;
  approve(options: ApproveOptions): Promise<void>;
  cancel(options?: { agentKey?: string; reason?: string }): Promise<void>;
  send(message: string, options?: { agentKey?: string }): Promise<void>;
}

// -- one redraw per frame ---------------------------------------------------------

const nextFrame: (callback: () => void) => void =
  typeof requestAnimationFrame === "function"
    ? (callback) => requestAnimationFrame(() => callback())
    : (callback) => setTimeout(callback, 16);

/** A tree's changes, told to React once per animation frame. */
class Frames {
  version = 0;
  events: readonly AgentEvent[] = [];
  readonly #listeners = new Set<() => void>();
  #scheduled = false;
  #recent: AgentEvent[] = [];
  #keep = 1000;
  #eventsChanged = false;

  constructor(handle: RunHandle) {
    handle.tree.subscribe(() => this.#schedule());
    handle.onEvents((batch) => {
      this.#recent.push(...batch);
      if (this.#recent.length > this.#keep * 1.5) this.#recent.splice(0, this.#recent.length - this.#keep);
      this.#eventsChanged = true;
      this.#schedule();
    });
    handle.done.then(() => this.#schedule(), () => this.#schedule());
  }

  keep(count: number): void {
    this.#keep = Math.max(this.#keep, count);
  }

  subscribe = (listener: () => void): (() => void) => {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  };

  snapshot = (): number => this.version;

  #schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    nextFrame(() => {
      this.#scheduled = false;
      this.version += 1;
      if (this.#eventsChanged) {
        this.#eventsChanged = false;
        this.events = this.#recent.slice(-this.#keep);
      }
      for (const listener of this.#listeners) listener();
    });
  }
}

const framesOf = new WeakMap<RunHandle, Frames>();
const treeHandles = new WeakMap<AgentTree, RunHandle>();

function frames(handle: RunHandle): Frames {
  let found = framesOf.get(handle);
  if (!found) {
    found = new Frames(handle);
    framesOf.set(handle, found);
    treeHandles.set(handle.tree, handle);
  }
  return found;
}

const noSubscribe = (): (() => void) => () => {};
const zero = (): number => 0;

// -- the hooks --------------------------------------------------------------------

interface Opened {
  promise: Promise<RunHandle>;
  users: number;
  closing: ReturnType<typeof setTimeout> | null;
}

function open(client: Client, target: RunTarget): Promise<RunHandle> {
  if (typeof target === "string") return client.subscribe(target, { events: false });
  if ("runId" in target) {
    const { runId, ...options } = target;
    return client.subscribe(runId, { ...options, events: false });
  }
  const { agent, input, ...options } = target;
  return client.run(agent, input, { ...options, events: false });
}

/** Follow a run (a runId, or `{runId, …options}`) or start one (`{agent, input,
 * …options}`, started once per mount, also under StrictMode) and re-render with its
 * tree at most once per animation frame. */
export function useAgentTree(
  client: Client | null,
  target: RunTarget | null,
  options: AgentTreeOptions = {},
): AgentTreeState {
  const key = target === null ? null : typeof target === "string" ? target : JSON.stringify(target);
  const opened = useRef(new Map<string, Opened>());
  const [state, setState] = useState<{
    key: string | null;
    handle: RunHandle | null;
    error: OrchestratorError | null;
  }>({ key: null, handle: null, error: null });

  useEffect(() => {
    if (client === null || key === null || target === null) return undefined;
    let entry = opened.current.get(key);
    if (!entry) {
      entry = { promise: open(client, target), users: 0, closing: null };
      opened.current.set(key, entry);
    }
    const mine = entry;
    if (mine.closing !== null) clearTimeout(mine.closing);
    mine.users += 1;
    let live = true;
    mine.promise.then(
      (handle) => live && setState({ key, handle, error: null }),
      (error: OrchestratorError) => live && setState({ key, handle: null, error }),
    );
    return () => {
      live = false;
      mine.users -= 1;
      // (StrictMode mounts twice: a remount within this tick keeps the same run)
      mine.closing = setTimeout(() => {
        if (mine.users > 0) return;
        opened.current.delete(key);
        mine.promise.then((handle) => handle.close(), () => {});
      }, 0);
    };
    // `key` stands for `target`'s value.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [client, key]);

  const handle = state.key === key ? state.handle : null;
  const error = state.key === key ? state.error : null;
  const frame = handle ? frames(handle) : null;
  if (frame) frame.keep(options.keepEvents ?? 1000);
  useSyncExternalStore(frame ? frame.subscribe : noSubscribe, frame ? frame.snapshot : zero, zero);

  const approve = useCallback(
    (o: ApproveOptions) => (handle ? handle.approve(o) : Promise.reject(notYet())),
    [handle],
  );
  const cancel = useCallback(
    (o?: { agentKey?: string; reason?: string }) => (handle ? handle.cancel(o) : Promise.reject(notYet())),
    [handle],
  );
  const send = useCallback(
    (message: string, o?: { agentKey?: string }) =>
      handle ? handle.send(message, o) : Promise.reject(notYet()),
    [handle],
  );
  const tree = handle ? handle.tree : null;
  const status = error ? "error" : tree ? tree.status : "connecting";
  return { tree, handle, events: frame ? frame.events : [], status, error, approve, cancel, send };
}

/** One agent of a tree `useAgentTree` follows, re-rendering only when it changed
 * (checked once per animation frame). */
export function useAgentNode(tree: AgentTree | null, agentKey: string): AgentNode | undefined {
  const handle = tree ? treeHandles.get(tree) : undefined;
  const frame = handle ? frames(handle) : null;
  const version = useCallback(() => (tree?.get(agentKey)?.version ?? -1), [tree, agentKey]);
  useSyncExternalStore(frame ? frame.subscribe : noSubscribe, version, version);
  return tree?.get(agentKey);
}

function notYet(): Error {
  return new Error("the run is not followed yet");
}
