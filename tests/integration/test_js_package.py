"""The TypeScript package (`js/`, docs/js.md): built with its own `tsc`, its types
checked over a file that uses every event type, packed, and its Node tests (Node's
test runner, Node 22 from npm) run against real `orchestrator serve` processes.

Needs `npm ci --prefix js` (as .ci/run does); skips, saying so, without it."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import trio

from tests.doc_examples import examples
from tests.helpers import REPO
from tests.server_helpers import demo_config, running_server

pytestmark = pytest.mark.trio
JS = REPO / "js"
NODE_BIN = JS / "node_modules" / ".bin"


def need_package() -> None:
    """Fail (in CI) or skip (elsewhere) when the package's tools are not installed."""
    if (NODE_BIN / "tsc").exists() and (NODE_BIN / "node").exists():
        return
    how = "the js package's tools are not installed: run `npm ci --prefix js` (as .ci/run does)"
    if os.environ.get("ORCHESTRATOR_CLIENTS_REQUIRED"):
        pytest.fail(how)
    pytest.skip(how)


async def npm(*argv: str, seconds: float = 600) -> str:
    """An npm script of the package (with Node 22 from its node_modules first on PATH)."""
    env = {
        **os.environ,
        "PATH": f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "ORCHESTRATOR_PYTHON": sys.executable,
    }
    with trio.fail_after(seconds):
        done = await trio.run_process(
            ["npm", *argv], cwd=JS, env=env, capture_stdout=True, capture_stderr=True, check=False
        )
    out = done.stdout.decode() + done.stderr.decode()
    assert done.returncode == 0, out[-6000:]
    return out


async def test_the_package_builds_its_types_hold_and_it_packs_its_build() -> None:
    need_package()
    await npm("run", "build")
    await npm("run", "typecheck")  # (test/types.ts: every event type, and misuses refused)
    packed = json.loads(await npm("pack", "--dry-run", "--json", "--silent"))
    files = {f["path"] for f in packed[0]["files"]}
    for module in ("index", "client", "tree", "schema", "react", "agui"):
        assert f"dist/{module}.js" in files and f"dist/{module}.d.ts" in files, files
    assert not any(f.startswith(("src/", "test/", "node_modules/")) for f in files)
    manifest = json.loads((JS / "package.json").read_text())
    pyproject = (REPO / "pyproject.toml").read_text()
    assert f'version = "{manifest["version"]}"' in pyproject  # versioned with the server


async def test_the_node_tests_pass_against_real_servers() -> None:
    need_package()
    await npm("run", "build")
    out = await npm("test")
    assert "# fail 0" in out, out[-4000:]


@pytest.mark.parametrize("node", ["22", "20"])
async def test_the_docs_node_examples_run_as_written(tmp_path: Path, node: str) -> None:
    """docs/js.md's Node and AG-UI examples, as written (the server's URL put in),
    with Node 22 — and with Node 20 and `--experimental-websocket`, as the doc says
    (issue 57, 21): the package's name resolves to the package itself."""
    need_package()
    command = [str(NODE_BIN / "node")]
    if node == "20":
        system = shutil.which("node")
        found = await trio.run_process([system or "node", "--version"], capture_stdout=True)
        if system is None or not found.stdout.decode().startswith("v20."):
            pytest.skip("Node 20 is not the system's node here (`node --version`)")
        command = [system, "--experimental-websocket"]
    await npm("run", "build")
    ran = []
    config = demo_config(tmp_path, token_delay=0.0, server={"ag_ui": True})
    async with running_server(config) as server:
        http = server.url.removesuffix("/ws").replace("ws://", "http://")
        for i, example in enumerate(e for e in examples("js") if e.run == "node"):
            code = example.text.replace("ws://127.0.0.1:8765/ws", server.url)
            code = code.replace("http://127.0.0.1:8765", http)
            path = JS / "test" / f".doc-example-{i}.mjs"
            path.write_text(code, encoding="utf-8")
            try:
                with trio.fail_after(120):
                    done = await trio.run_process(
                        [*command, str(path)],
                        cwd=JS,
                        capture_stdout=True,
                        capture_stderr=True,
                        check=False,
                    )
            finally:
                path.unlink()
            assert done.returncode == 0, (example.where, done.stderr.decode())
            ran.append(done.stdout.decode().splitlines())
    plain, agui = ran
    assert plain[:2] == ["started ResearcherAgent", "started ResearcherAgent"]
    assert "\ncompleted Here is what the research team found" in "\n".join(plain)
    assert agui[0] == "0 root done" and len(agui) == 5
    assert sorted(agui[1:]) == ["1 ResearcherAgent done"] * 2 + ["2 CriticAgent done"] * 2


async def test_the_console_serves_the_packages_build() -> None:
    """The console's `static/client/` is the package's build (`npm run console`)."""
    need_package()
    await npm("run", "build")
    static = REPO / "orchestrator" / "server" / "static" / "client"
    for name in ("index.js", "client.js", "tree.js"):
        built = (JS / "dist" / name).read_text(encoding="utf-8")
        assert (static / name).read_text(encoding="utf-8") == built, (
            f"static/client/{name} is stale: npm run console --prefix js"
        )


async def test_the_packed_tarball_installs_and_its_three_entry_points_load(tmp_path: Path) -> None:
    """`npm pack` gives a working tarball: installed into an empty project (no
    network: the package has no runtime dependency), `.`, `/react` and `/agui` load."""
    need_package()
    await npm("run", "build")
    await npm("pack", "--pack-destination", str(tmp_path))
    version = json.loads((JS / "package.json").read_text())["version"]
    tarball = tmp_path / f"agent-orchestrator-client-{version}.tgz"
    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text('{"name": "app", "private": true, "type": "module"}')
    env = {**os.environ, "PATH": f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    installed = await trio.run_process(
        ["npm", "install", "--no-audit", "--no-fund", "--offline", str(tarball)],
        cwd=app,
        env=env,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr.decode()
    (app / "node_modules" / "react").symlink_to(JS / "node_modules" / "react")  # (its peer)
    probe = (
        'import * as core from "@agent-orchestrator/client";'
        'import * as react from "@agent-orchestrator/client/react";'
        'import * as agui from "@agent-orchestrator/client/agui";'
        "console.log(JSON.stringify([typeof core.connect, typeof core.AgentTree,"
        " typeof react.useAgentTree, typeof agui.treeFromAgui]));"
    )
    loaded = await trio.run_process(
        [str(NODE_BIN / "node"), "--input-type=module", "-e", probe],
        cwd=app,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert loaded.returncode == 0, loaded.stderr.decode()
    assert json.loads(loaded.stdout) == ["function"] * 4
