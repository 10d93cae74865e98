// The page of the React hook's browser tests (tests/browser/test_react.py): a whole tree
// of cards, one per agent, each re-rendered only when its agent changed; counts of
// renders and the longest gap between two animation frames go in `window.__perf`.

import { StrictMode, memo } from "react";
import { createRoot } from "react-dom/client";

import { connect, type AgentTree } from "@agent-orchestrator/client";
import { useAgentNode, useAgentTree } from "@agent-orchestrator/client/react";

interface Perf {
  appRenders: number;
  cardRenders: Record<string, number>;
  frames: number;
  longestFrame: number;
  started: number;
  ended: number | null;
  status: string | null;
  result: string | null;
  versions: Record<string, number>;
}
declare global {
  interface Window {
    __perf: Perf;
  }
}

const perf: Perf = (window.__perf = {
  appRenders: 0, cardRenders: {}, frames: 0, longestFrame: 0, started: performance.now(),
  ended: null, status: null, result: null, versions: {},
});
let last = performance.now();
function tick(now: number): void {
  perf.frames += 1;
  perf.longestFrame = Math.max(perf.longestFrame, now - last);
  last = now;
  if (perf.ended === null) requestAnimationFrame(tick);
}
requestAnimationFrame(tick);

const query = new URLSearchParams(location.search);
const client = connect(query.get("ws") ?? "ws://127.0.0.1:8765/ws");
const agent = query.get("agent") ?? "planner";

const Card = memo(function Card({ tree, agentKey }: { tree: AgentTree; agentKey: string }) {
  const node = useAgentNode(tree, agentKey);
  perf.cardRenders[agentKey] = (perf.cardRenders[agentKey] ?? 0) + 1;
  if (!node) return null;
  return (
    <li data-status={node.status}>
      {node.name} · {node.status} · {node.activity}
      <ul>
        {node.children.map((key) => (
          <Card key={key} tree={tree} agentKey={key} />
        ))}
      </ul>
    </li>
  );
});

function App() {
  const { tree, status } = useAgentTree(client, { agent, input: "load" });
  perf.appRenders += 1;
  if (tree && status !== "running" && perf.ended === null) {
    perf.ended = performance.now();
    perf.status = status;
    perf.result = tree.result;
    perf.versions = Object.fromEntries([...tree.nodes].map(([key, node]) => [key, node.version]));
  }
  return (
    <div>
      <p id="status">{status}</p>
      {tree?.root && (
        <ul>
          <Card tree={tree} agentKey={tree.root.key} />
        </ul>
      )}
    </div>
  );
}

// `?strict=1`: under StrictMode, which mounts every component twice in development.
const app = query.get("strict") ? (
  <StrictMode>
    <App />
  </StrictMode>
) : (
  <App />
);
createRoot(document.getElementById("app") as HTMLElement).render(app);
