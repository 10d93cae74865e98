// @agent-orchestrator/client: watch and steer live agent trees (docs/js.md).

export {
  Client,
  OrchestratorError,
  RunHandle,
  connect,
  wsUrl,
} from "./client.js";
export type {
  ApproveOptions,
  ConnectOptions,
  ConnectionState,
  Detail,
  FeedOptions,
  ForkOptions,
  Multitask,
  RunEnd,
  RunOptions,
  SubscribeOptions,
} from "./client.js";
export { AgentNode, AgentTree, HANDLES, IGNORES, ROOT } from "./tree.js";
export type {
  AgentStatus,
  Approval,
  Compaction,
  RunStatus,
  ToolCall,
  TreeListener,
  Turn,
} from "./tree.js";
export type * from "./schema.js";
