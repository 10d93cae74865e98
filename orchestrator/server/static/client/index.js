// @agent-orchestrator/client: watch and steer live agent trees (docs/js.md).
export { Client, OrchestratorError, RunHandle, connect, wsUrl, } from "./client.js";
export { AgentNode, AgentTree, HANDLES, IGNORES, ROOT } from "./tree.js";
