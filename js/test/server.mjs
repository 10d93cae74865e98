// A real `orchestrator serve` for the package's tests: the repository's demo agents
// (and any extra ones), on a free port, started again on the same port when asked.

import { spawn, execFile } from "node:child_process";
import { mkdtempSync, writeFileSync, readdirSync, copyFileSync, mkdirSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const PYTHON = process.env.ORCHESTRATOR_PYTHON || join(REPO, ".venv", "bin", "python");

/** A free TCP port on loopback. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.on("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

/** Write a config (JSON is YAML) with the demo agents and `agents` (id → spec). */
export function writeConfig({ agents = {}, storage = "memory://", server = {}, extra = {} } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "orchestrator-js-"));
  const sub = join(dir, "subagents");
  mkdirSync(sub);
  const demo = join(REPO, "configs", "subagents");
  for (const name of readdirSync(demo)) if (name.endsWith(".yaml")) copyFileSync(join(demo, name), join(sub, name));
  for (const [id, spec] of Object.entries(agents)) writeFileSync(join(sub, `${id}.yaml`), JSON.stringify(spec));
  mkdirSync(join(dir, "workspace"));
  const config = {
    server: { host: "127.0.0.1", port: 0, ...server },
    storage,
    models: { default: { provider: "scripted" } },
    subagents_dir: "subagents",
    limits: { max_depth: 4 },
    ...extra,
  };
  writeFileSync(join(dir, "server.yaml"), JSON.stringify(config));
  return dir;
}

/** `orchestrator serve` on `dir`'s config: {url, port, stop(signal), restart()}. */
export async function serve(dir, port) {
  port = port ?? (await freePort());
  const start = () =>
    new Promise((resolve, reject) => {
      const proc = spawn(PYTHON, ["-m", "orchestrator", "serve", "--config", join(dir, "server.yaml"), "--port", String(port)], {
        cwd: REPO,
        env: { ...process.env, PYTHONPATH: REPO },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let out = "";
      let err = "";
      const timer = setTimeout(() => reject(new Error(`the server did not start: ${err}`)), 30_000);
      proc.stderr.on("data", (chunk) => (err += chunk));
      proc.stdout.on("data", (chunk) => {
        out += chunk;
        if (out.includes("listening on ")) {
          clearTimeout(timer);
          resolve(proc);
        }
      });
      proc.on("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`the server exited (${code}): ${err}`));
      });
    });
  let proc = await start();
  const stop = (signal = "SIGTERM") =>
    new Promise((resolve) => {
      if (proc.exitCode !== null || proc.signalCode !== null) return resolve();
      proc.once("exit", () => resolve());
      proc.kill(signal);
    });
  return {
    url: `ws://127.0.0.1:${port}/ws`,
    port,
    dir,
    stop,
    async restart(signal = "SIGTERM") {
      await stop(signal);
      proc = await start();
    },
  };
}

/** What the Python client's tree view (`orchestrator/core/tree.py`) makes of a run:
 * its nodes depth-first as [depth, agentId, status, result]. */
export function pythonTree(url, runId) {
  const code = `
import json, sys, trio
from orchestrator.client import Client
from orchestrator.core.tree import TreeView
async def main():
    view = TreeView()
    async with Client.connect(sys.argv[1]) as client:
        async with client.follow(sys.argv[2]) as events:
            async for event in events:
                view.apply(event)
    print(json.dumps([[n.depth, n.agent_id, n.status, n.result] for n in view.walk()]))
trio.run(main)
`;
  return new Promise((resolve, reject) => {
    execFile(PYTHON, ["-c", code, url, runId], { cwd: REPO, env: { ...process.env, PYTHONPATH: REPO } }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${error.message}: ${stderr}`));
      else resolve(JSON.parse(stdout));
    });
  });
}
