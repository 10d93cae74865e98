// The AG-UI adapter: what `@ag-ui/client` receives from our `/ag-ui` door, as a tree,
// is the tree the WebSocket client builds of the same run.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { HttpAgent } from "@ag-ui/client";

import { connect } from "../dist/index.js";
import { treeFromAgui } from "../dist/agui.js";
import { serve, writeConfig } from "./server.mjs";

let server;
before(async () => {
  server = await serve(writeConfig({ server: { ag_ui: true } }));
});
after(async () => {
  await server?.stop();
});

const rows = (tree) =>
  [...tree.walk()].map((n) => JSON.stringify([n.depth, n.agentId || "planner", n.status, n.text, n.task])).sort();

test("a planner run through @ag-ui/client makes the WebSocket client's tree", async () => {
  const url = server.url.replace("ws://", "http://").replace("/ws", "/ag-ui/planner");
  const agent = new HttpAgent({ url, initialMessages: [{ id: "m", role: "user", content: "compare trio and asyncio" }] });
  const events = [];
  await agent.runAgent({ runId: "ag-ui-run" }, { onEvent: ({ event }) => { events.push(event); } });
  const tree = treeFromAgui(events);
  assert.equal(tree.status, "completed");
  assert.equal(tree.nodes.size, 5);
  const runId = events[0].metadata.runId;
  const client = connect(server.url);
  try {
    const run = await client.subscribe(runId, { events: false });
    await run.done;
    assert.deepEqual(rows(tree), rows(run.tree));
    assert.equal(tree.root.text, run.tree.root.text);
    // The tool calls of each agent, by the ids of the run's own events.
    for (const node of run.tree.walk()) {
      assert.deepEqual([...tree.get(node.key).tools.keys()].sort(), [...node.tools.keys()].sort());
    }
  } finally {
    client.close();
  }
});
