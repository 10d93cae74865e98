// The package against a real `orchestrator serve` (node --test; `npm test` builds first).

import assert from "node:assert/strict";
import { createServer, connect as tcp } from "node:net";
import { createServer as createHttpServer } from "node:http";
import { after, before, test } from "node:test";

import { AgentTree, OrchestratorError, connect } from "../dist/index.js";
import { freePort, pythonTree, serve, writeConfig } from "./server.mjs";

const slow = (say, delay = 0.02) => ({
  description: "streams", instructions: "i", script: { token_delay: delay, turns: [{ say }] },
});
const AGENTS = {
  boss: {
    description: "asks for a write and starts a long one",
    instructions: "i",
    tools: ["agent_spawn"],
    script: {
      token_delay: 0.01,
      turns: [
        {
          calls: [
            { name: "agent_spawn", args: { agent_id: "fixer", task: "fix" } },
            { name: "agent_spawn", args: { agent_id: "slowpoke", task: "dawdle" } },
          ],
        },
        { say: "boss: {results}" },
      ],
    },
  },
  fixer: {
    description: "writes once approved",
    instructions: "i",
    tools: ["write_file"],
    approval: ["write_file"],
    script: {
      token_delay: 0.01,
      turns: [
        { calls: [{ name: "write_file", args: { path: "p.txt", content: "new" } }] },
        { say: "fixed" },
      ],
    },
  },
  slowpoke: {
    description: "streams for a long time, and asks a child",
    instructions: "i",
    tools: ["agent_spawn"],
    script: {
      token_delay: 0.05,
      turns: [
        { calls: [{ name: "agent_spawn", args: { agent_id: "crawler", task: "crawl" } }] },
        { say: "never reached" },
      ],
    },
  },
  crawler: slow(Array.from({ length: 400 }, (_, i) => `w${i}`).join(" "), 0.05),
};

let server;
before(async () => {
  server = await serve(writeConfig({ agents: AGENTS }));
});
after(async () => {
  await server?.stop();
});

async function collect(handle) {
  const events = [];
  for await (const event of handle) events.push(event);
  return events;
}

function rows(tree) {
  return [...tree.walk()].map((n) => [n.depth, n.agentId, n.status, n.text]);
}

test("a planner run: every event once, in order; its tree is the Python client's", async () => {
  const client = connect(server.url);
  try {
    const run = await client.run("planner", "compare trio and asyncio");
    assert.match(run.runId, /^run-/);
    const events = await collect(run);
    assert.deepEqual(events.map((e) => e.seq), events.map((_, i) => i + 1));
    const end = await run.done;
    assert.equal(end.status, "completed");
    const finished = events.at(-1);
    assert.equal(finished.type, "RUN_FINISHED");
    assert.equal(run.tree.root.text, finished.data.result);
    assert.equal(end.result, finished.data.result);
    assert.equal(run.tree.nodes.size, 1 + 2 + 2); // planner, 2 researchers, 2 critics
    const python = await pythonTree(server.url, run.runId);
    const ours = rows(run.tree).map(([depth, agentId, status, text]) => [depth, agentId, status, depth === 0 ? null : text]);
    assert.deepEqual(ours, python.map(([depth, agentId, status, result]) => [depth, agentId, status, depth === 0 ? null : result]));
    // The same tree from a second subscription (replayed from the journal).
    const again = await client.subscribe(run.runId, { events: false });
    await again.done;
    assert.deepEqual(rows(again.tree), rows(run.tree));
  } finally {
    client.close();
  }
});

test("a depth filter is applied by the server", async () => {
  const client = connect(server.url);
  try {
    const run = await client.run("planner", "q", { filter: { maxDepth: 1 } });
    const events = await collect(run);
    assert.ok(events.length > 0);
    assert.ok(events.every((e) => e.source === null || e.source.depth <= 1));
    assert.deepEqual([...run.tree.walk()].map((n) => n.depth).sort(), [0, 1, 1]);
    assert.equal((await run.done).status, "completed");
  } finally {
    client.close();
  }
});

test("an unknown run and a refused op reject with the server's code", async () => {
  const client = connect(server.url);
  try {
    await assert.rejects(client.subscribe("run-nope"), (e) => e instanceof OrchestratorError && e.code === "not_found");
    await assert.rejects(client.run("nobody", "x"), (e) => e instanceof OrchestratorError && e.code === "not_found");
    assert.ok((await client.agents()).some((a) => a.id === "planner"));
  } finally {
    client.close();
  }
});

test("an approval answered and a subtree cancelled through the handle", async () => {
  const client = connect(server.url);
  try {
    const run = await client.run("boss", "go", { events: false });
    const tree = run.tree;
    const fixer = await until(tree, () => [...tree.nodes.values()].find((n) => n.agentId === "fixer" && n.pending.length));
    const call = fixer.pending[0];
    assert.equal(call.name, "write_file");
    assert.match(fixer.activity, /^waiting for approval: write_file/);
    await run.approve({ toolCallId: call.id, agentKey: fixer.key, decision: "approve", reason: "fine" });
    await assert.rejects(
      run.approve({ toolCallId: call.id, agentKey: fixer.key, decision: "deny" }),
      (e) => e instanceof OrchestratorError && e.code === "not_found" && /already answered/.test(e.message),
    );
    const crawler = await until(tree, () => [...tree.nodes.values()].find((n) => n.agentId === "crawler"));
    const slowpoke = tree.get(crawler.parent);
    await run.cancel({ agentKey: slowpoke.key, reason: "enough" });
    const end = await run.done;
    assert.equal(end.status, "completed");
    assert.equal(slowpoke.status, "cancelled");
    assert.equal(crawler.status, "cancelled");
    assert.equal(fixer.status, "done");
    assert.equal(fixer.approvals.get(call.id).decision, "approve");
  } finally {
    client.close();
  }
});

test("a dropped socket resumes from the last seq: no gap, no duplicate", async () => {
  const proxy = await tcpProxy(server.port);
  const client = connect(`ws://127.0.0.1:${proxy.port}/ws`);
  const states = [];
  client.onState((s) => states.push(s));
  try {
    const run = await client.run("planner", "drop me");
    const events = [];
    let dropped = 0;
    for await (const event of run) {
      events.push(event);
      if (events.length % 40 === 0 && dropped < 3) {
        dropped += 1;
        proxy.dropAll();
      }
    }
    assert.equal(dropped, 3);
    assert.deepEqual(events.map((e) => e.seq), events.map((_, i) => i + 1));
    assert.equal(events.at(-1).type, "RUN_FINISHED");
    assert.ok(run.resumes >= 3 && client.reconnects >= 3, `${run.resumes} ${client.reconnects}`);
    assert.ok(states.includes("reconnecting"));
    const replay = await client.subscribe(run.runId, { events: false });
    await replay.done;
    assert.equal(replay.lastSeq, events.length);
  } finally {
    client.close();
    proxy.close();
  }
});

test("a server restart: the run goes on there and the handle resumes with it", async () => {
  const own = await serve(writeConfig({ storage: "sqlite:///journal.db" }));
  const client = connect(own.url);
  try {
    const run = await client.run("planner", "restart me");
    const events = [];
    let restarted = false;
    for await (const event of run) {
      events.push(event);
      if (!restarted && event.type === "AGENT_STARTED") {
        restarted = true;
        await own.restart("SIGTERM");
      }
    }
    assert.deepEqual(events.map((e) => e.seq), events.map((_, i) => i + 1));
    assert.ok(events.some((e) => e.type === "RUN_RESUMED"));
    assert.equal((await run.done).status, "completed");
    assert.ok(run.resumes >= 1);
  } finally {
    client.close();
    await own.stop();
  }
});

test("a tree is built from plain events, each applied once", () => {
  const tree = new AgentTree();
  const src = { agentKey: "agent:a:1", agentId: "a", agentName: "A", sessionId: "s1", parentSessionId: "s0", depth: 1, path: "s0/a" };
  const events = [
    { runId: "r", seq: 1, ts: 1, type: "RUN_STARTED", source: null, last: false, data: { agentId: "p", input: "x" } },
    { runId: "r", seq: 2, ts: 2, type: "AGENT_STARTED", source: src, last: false, data: { agentId: "a", task: "t" } },
    { runId: "r", seq: 3, ts: 3, type: "REASONING", source: src, last: false, data: { delta: "he" } },
    { runId: "r", seq: 3, ts: 3, type: "REASONING", source: src, last: false, data: { delta: "he" } },
    { runId: "r", seq: 4, ts: 4, type: "AGENT_RESULT", source: src, last: true, data: { text: "hi", usage: { inputTokens: 1, outputTokens: 2 }, subtreeUsage: { inputTokens: 1, outputTokens: 2 } } },
    { runId: "r", seq: 5, ts: 5, type: "RUN_FINISHED", source: null, last: true, data: { status: "completed", result: "done" } },
  ];
  const heard = [];
  tree.subscribe((changed) => heard.push([...changed]));
  tree.applyAll(events);
  assert.deepEqual(heard, [["root", "agent:a:1"]]);
  assert.equal(tree.get("agent:a:1").streamed, "he");
  assert.equal(tree.get("agent:a:1").text, "hi");
  assert.equal(tree.root.text, "done");
  assert.equal(tree.status, "completed");
});

async function until(tree, find, ms = 20_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const found = find();
    if (found) return found;
    if (Date.now() > deadline) throw new Error("not found in time");
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function tcpProxy(target) {
  const sockets = new Set();
  const port = await freePort();
  const proxy = createServer((inbound) => {
    const outbound = tcp(target, "127.0.0.1");
    sockets.add(inbound).add(outbound);
    // The server checks that Host names it: the first chunk (the request head) says so.
    inbound.once("data", (head) => {
      outbound.write(head.toString("latin1").replace(`:${port}`, `:${target}`), "latin1");
      inbound.pipe(outbound);
    });
    outbound.pipe(inbound);
    const gone = () => {
      inbound.destroy();
      outbound.destroy();
      sockets.delete(inbound);
      sockets.delete(outbound);
    };
    inbound.on("error", gone).on("close", gone);
    outbound.on("error", gone).on("close", gone);
  });
  await new Promise((resolve) => proxy.listen(port, "127.0.0.1", resolve));
  return {
    port,
    dropAll() {
      for (const socket of sockets) socket.destroy();
    },
    close() {
      this.dropAll();
      proxy.close();
    },
  };
}

test("a fork through the handle, and a thread's runs through the client", async () => {
  const client = connect(server.url);
  try {
    const first = await client.run("critic", "the first draft", { threadId: "t-js", events: false });
    assert.equal(first.threadId, "t-js");
    await first.done;
    const second = await client.run("critic", "the second draft", { threadId: "t-js", events: false });
    await second.done;
    const [thread] = await client.threads({ threadId: "t-js" });
    assert.deepEqual(thread.runs, [first.runId, second.runId]);
    assert.equal(thread.firstInput, "the first draft");
    const at = Math.floor(second.lastSeq / 2);
    const fork = await second.fork({ atSeq: at, replay: true, events: false });
    assert.notEqual(fork.runId, second.runId);
    const end = await fork.done;
    assert.equal(end.status, "completed");
    assert.deepEqual(fork.tree.forkedFrom, { runId: second.runId, seq: at });
    assert.equal(fork.tree.root.text, second.tree.root.text);
  } finally {
    client.close();
  }
});

test("a client that never connected fails at once; a wrong token is refused", async () => {
  const nowhere = connect(`ws://127.0.0.1:${await freePort()}/ws`);
  await assert.rejects(nowhere.agents(), (e) => e.code === "disconnected" && /could not connect/.test(e.message));
  assert.equal(nowhere.state, "closed");
  const guarded = await serve(writeConfig({ server: { tokens: [{ name: "ann", token: "ann-1" }] } }));
  try {
    const wrong = connect(guarded.url, { token: "nope" });
    await assert.rejects(wrong.agents(), (e) => e.code === "unauthorized" && /refused this token/.test(e.message));
    const none = connect(guarded.url);
    await assert.rejects(none.agents(), (e) => e.code === "unauthorized" && /needs a token/.test(e.message));
    const right = connect(guarded.url, { token: "ann-1" });
    assert.ok((await right.agents()).length > 0);
    right.close();
  } finally {
    await guarded.stop();
  }
});

test("triggers, attachments and a structured answer through the package", async () => {
  const describer = {
    description: "says what it got, as JSON",
    instructions: "i",
    script: { turns: [{ say: '{"got": "{attachments}"}' }] },
  };
  const extra = { triggers: { digest: { agent: "describer", input: "digest", every: "1h" } } };
  const own = await serve(writeConfig({ agents: { describer }, extra }));
  const client = connect(own.url);
  try {
    const [listed] = await client.triggers();
    assert.equal(listed.name, "digest");
    assert.equal(listed.schedule, "every 3600 s");
    const [fired] = await client.triggers({ action: "fire", name: "digest" });
    assert.equal(fired.lastOutcome, "started");

    const data = Buffer.from("hello").toString("base64");
    const schema = { type: "object", properties: { got: { type: "string" } }, required: ["got"] };
    const handle = await client.run("describer", "look", {
      attachments: [{ name: "n.txt", mediaType: "text/plain", data }],
      outputSchema: schema,
    });
    const end = await handle.done;
    assert.equal(end.status, "completed");
    assert.deepEqual(end.structured, { got: "n.txt (text/plain, 5 bytes)" });
    const root = handle.tree.root;
    assert.deepEqual(root.structured, end.structured);
    const [given] = root.attachments;
    assert.equal(given.name, "n.txt");
    assert.equal(Buffer.from(await client.attachment(handle.runId, given.id), "base64").toString(), "hello");
  } finally {
    client.close();
    await own.stop();
  }
});

test("webhooks: a dead delivery listed and redelivered through the package", async () => {
  let up = false;
  const got = [];
  const receiver = createHttpServer((request, response) => {
    request.resume();
    request.on("end", () => {
      got.push(request.headers["webhook-id"]);
      response.writeHead(up ? 204 : 503).end();
    });
  });
  await new Promise((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  process.env.JS_TEST_WEBHOOK_SECRET = "whsec_" + Buffer.alloc(32, 7).toString("base64");
  const extra = {
    webhooks: {
      ci: {
        url: `http://127.0.0.1:${receiver.address().port}/hook`,
        events: ["RUN_FINISHED"],
        secret_env: "JS_TEST_WEBHOOK_SECRET",
      },
    },
    tools: { http_allowed_hosts: ["127.0.0.1"] },
  };
  const own = await serve(writeConfig({ extra: { ...extra, limits: { max_depth: 4, webhooks: { max_attempts: 1 } } } }));
  const client = connect(own.url);
  try {
    const handle = await client.run("researcher", "q");
    await handle.done;
    let listed = await client.webhooks();
    for (let i = 0; i < 200 && listed.dead.length === 0; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      listed = await client.webhooks();
    }
    assert.equal(listed.webhooks.ci.url, `http://127.0.0.1:${receiver.address().port}/…`);
    assert.equal(listed.webhooks.ci.secret, undefined);
    const [dead] = listed.dead;
    assert.equal(dead.type, "RUN_FINISHED");
    assert.equal(dead.runId, handle.runId);
    assert.equal(dead.lastError, "HTTP 503");
    up = true;
    const again = await client.webhooks({ redeliver: dead.id });
    assert.equal(again.redelivered, 1);
    for (let i = 0; i < 200 && got.length < 2; i++) await new Promise((resolve) => setTimeout(resolve, 50));
    assert.deepEqual(got, [dead.id, dead.id]);
  } finally {
    client.close();
    await own.stop();
    receiver.close();
  }
});
