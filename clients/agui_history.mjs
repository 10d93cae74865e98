// A reloaded page through the official AG-UI client: a new `HttpAgent` on a threadId,
// with no messages, runs once (`runAgent`): the server answers the thread's chat as a
// MESSAGES_SNAPSHOT and starts no run. Prints one JSON line: the agent's messages
// afterwards, or why the client refused the stream.
//
//   node clients/agui_history.mjs URL TOKEN THREAD_ID
import { HttpAgent } from "@ag-ui/client";

const [url, token, threadId] = process.argv.slice(2);
const headers = token ? { Authorization: `Bearer ${token}` } : {};
try {
  const agent = new HttpAgent({ url, headers, threadId });
  await agent.runAgent({ runId: "client-reload" });
  const messages = agent.messages.map((m) => ({
    id: m.id,
    role: m.role,
    content: m.content ?? null,
    toolCalls: (m.toolCalls ?? []).map((c) => c.function.name),
    toolCallId: m.toolCallId ?? null,
  }));
  console.log(JSON.stringify({ ok: true, messages }));
} catch (error) {
  console.log(JSON.stringify({ ok: false, error: String(error?.message ?? error) }));
}
