// Two inputs to one thread through the official AG-UI client, the second while the
// first still runs: each `HttpAgent` runs its turn (`runAgent`), the second with
// `forwardedProps: {multitask}` (`enqueue` or `steer`), sent DELAY ms after the first.
// Prints one JSON line: each agent's messages afterwards, or why the client refused.
//
//   node clients/agui_multitask.mjs URL TOKEN THREAD_ID FIRST SECOND MULTITASK DELAY
import { HttpAgent } from "@ag-ui/client";

const [url, token, threadId, first, second, multitask, delay] = process.argv.slice(2);
const headers = token ? { Authorization: `Bearer ${token}` } : {};
const shown = (agent) => agent.messages.map((m) => ({ id: m.id, role: m.role, content: m.content ?? null }));
try {
  const one = new HttpAgent({ url, headers, threadId, initialMessages: [{ id: "a", role: "user", content: first }] });
  const two = new HttpAgent({ url, headers, threadId, initialMessages: [{ id: "b", role: "user", content: second }] });
  const running = one.runAgent({ runId: "client-one" });
  await new Promise((resolve) => setTimeout(resolve, Number(delay)));
  await two.runAgent({ runId: "client-two", forwardedProps: { multitask } });
  await running;
  console.log(JSON.stringify({ ok: true, first: shown(one), second: shown(two) }));
} catch (error) {
  console.log(JSON.stringify({ ok: false, error: String(error?.message ?? error) }));
}
