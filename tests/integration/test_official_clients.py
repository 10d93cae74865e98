"""Our doors, driven by the protocols' own clients (pinned in clients/package.json):
what users' clients accept, not only what our tests decode.

`.ci/run` installs them first (`npm ci --prefix clients`) and sets
`ORCHESTRATOR_CLIENTS_REQUIRED=1`, so a missing client fails CI; elsewhere these tests
skip, saying how to install them."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from websockets.trio.client import connect

from tests.helpers import REPO
from tests.server_helpers import demo_config, read_until_end, request, running_server

CLIENTS = REPO / "clients"
TOKEN = "ann-1"
AG_UI = {"ag_ui": True, "tokens": [{"name": "ann", "token": TOKEN}]}
AGENTS: dict[str, dict[str, Any]] = {
    # A tree with a failing child: the client must accept the whole stream.
    "boss": {
        "description": "spawns a child that fails and one that works",
        "instructions": "b",
        "tools": ["agent_spawn", "read_file"],
        "script": {
            "turns": [
                {
                    "say": "Splitting.",
                    "calls": [
                        {"name": "agent_spawn", "args": {"agent_id": "bomb", "task": "x"}},
                        {"name": "agent_spawn", "args": {"agent_id": "critic", "task": "y"}},
                        {"name": "read_file", "args": {"path": "missing.txt"}},
                    ],
                },
                {"say": "Done: {results}"},
            ]
        },
    },
    "bomb": {"description": "fails", "instructions": "f", "script": {"turns": [{"fail": "down"}]}},
}


def need(package: str) -> None:
    """Fail (in CI) or skip (elsewhere) when the client `package` is not installed."""
    if shutil.which("node") is not None and (CLIENTS / "node_modules" / package).is_dir():
        return
    how = f"{package} is not installed: run `npm ci --prefix clients` (as .ci/run does)"
    if os.environ.get("ORCHESTRATOR_CLIENTS_REQUIRED"):
        pytest.fail(how)
    pytest.skip(how)


async def agui_client(
    url: str, task: str, token: str | None = None, options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """What @ag-ui/client's `HttpAgent.runAgent` made of the stream at `url` (resumed
    while it ends with interrupts; `options`: see clients/agui_run.mjs)."""
    extra = [token or "", json.dumps(options)] if options is not None else [token or ""]
    done = await trio.run_process(
        ["node", str(CLIENTS / "agui_run.mjs"), url, task, *extra],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.stdout, done.stderr.decode()
    outcome: dict[str, Any] = json.loads(done.stdout.decode().splitlines()[-1])
    return outcome


async def only_run(url: str) -> dict[str, Any]:
    """The one run the server at `url` has (`runs` op, as TOKEN)."""
    async with connect(url, additional_headers={"Authorization": f"Bearer {TOKEN}"}) as ws:
        (run,) = (await request(ws, op="runs", id=1))["runs"]
    return dict(run)


@pytest.mark.parametrize("agent", ["planner", "researcher", "critic", "boss"])
async def test_the_official_ag_ui_client_accepts_every_run(tmp_path: Path, agent: str) -> None:
    """Regression: `@ag-ui/client` refused the demo planner's run (`Cannot send
    'TOOL_CALL_START': subagentRunId … does not match the tool call 'call_0' opener's
    subagent`): the planner and its researchers all said `call_0`."""
    need("@ag-ui/client")
    config = demo_config(
        tmp_path,
        server=AG_UI,
        extra_agents=AGENTS,
    )
    async with running_server(config) as server:
        url = f"http://127.0.0.1:{server.port}/ag-ui/{agent}"
        outcome = await agui_client(url, "compare trio and asyncio", TOKEN)
        run = await only_run(server.url)
    assert outcome["ok"], outcome["error"]
    types = outcome["types"]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
    assert run["status"] == "completed"
    if agent in ("planner", "boss"):
        assert "SUBAGENT_STARTED" in types and types.count("TOOL_CALL_START") >= 2
    if agent == "boss":
        assert "SUBAGENT_ERROR" in types  # the failing child, in the stream the client took


async def test_the_official_ag_ui_client_answers_interrupts_and_resumes(tmp_path: Path) -> None:
    """Two calls wait for a person at once: the client gets RUN_FINISHED `interrupt`
    with both, answers both in one `resume[]` (one edited, one denied), and accepts the
    stream that finishes the run."""
    need("@ag-ui/client")
    from tests.integration.test_agui_resume import AGENTS as RESUME_AGENTS

    config = demo_config(
        tmp_path,
        server=AG_UI,
        extra_agents=RESUME_AGENTS,
    )
    answers = {"write_file": {"approved": True, "args": {"path": "c.txt", "content": "C"}}}
    async with running_server(config) as server:
        url = f"http://127.0.0.1:{server.port}/ag-ui/pair"
        outcome = await agui_client(url, "two writes", TOKEN, {"answers": answers})
    assert outcome["ok"], outcome["error"]
    first, *rest = outcome["segments"]
    assert first["outcome"] == "interrupt" and len(first["interrupts"]) == 2
    assert rest[-1]["outcome"] == "success"
    assert (tmp_path / "workspace" / "c.txt").read_text() == "C"


async def test_the_official_ag_ui_client_accepts_a_cancelled_run(tmp_path: Path) -> None:
    need("@ag-ui/client")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    config = demo_config(
        tmp_path,
        token_delay=0.02,
        server=AG_UI,
    )
    outcome: dict[str, Any] = {}

    async def run_client(url: str) -> None:
        outcome.update(await agui_client(url, "compare trio and asyncio", TOKEN))

    async with running_server(config) as server, trio.open_nursery() as nursery:
        nursery.start_soon(run_client, f"http://127.0.0.1:{server.port}/ag-ui/planner")
        async with connect(server.url, additional_headers=auth) as ws:
            for _ in range(600):  # the client has started it
                if runs := (await request(ws, op="runs", id=1))["runs"]:
                    break
                await trio.sleep(0.05)
            await trio.sleep(0.3)  # its children are under way
            cancel = await request(ws, op="cancel", id=2, runId=runs[0]["runId"])
            assert cancel["op"] == "ack"
    assert outcome["ok"], outcome["error"]
    assert outcome["segments"][-1]["outcome"] == "cancelled"


async def test_the_official_ag_ui_client_follows_a_remote_subtree_and_reconnects(
    tmp_path: Path,
) -> None:
    """A tree whose child runs on another server, then a reconnect from the middle of
    the finished run (`forwardedProps.runId`/`afterSeq`): both streams accepted."""
    need("@ag-ui/client")
    from tests.integration.test_remote import local_agents, remote_server

    async with remote_server(tmp_path / "far") as (_, far_url):
        (tmp_path / "here").mkdir()
        config = demo_config(
            tmp_path / "here",
            server=AG_UI,
            extra_agents=local_agents(far_url),
        )
        async with running_server(config) as server:
            url = f"http://127.0.0.1:{server.port}/ag-ui/boss"
            whole = await agui_client(url, "ask them", TOKEN)
            run = await only_run(server.url)
            middle = {"runId": run["runId"], "afterSeq": 40}
            again = await agui_client(url, "", TOKEN, {"forwardedProps": middle})
    assert whole["ok"], whole["error"]
    assert whole["types"].count("SUBAGENT_STARTED") >= 3  # far_planner and its researchers
    assert again["ok"], again["error"]
    assert again["types"][0] == "RUN_STARTED" and again["types"][-1] == "RUN_FINISHED"
    assert again["types"].count("RUN_STARTED") == 1
    assert len(again["types"]) < len(whole["types"])


async def test_the_official_a2a_js_client_sends_gets_cancels_subscribes_and_resumes(
    tmp_path: Path,
) -> None:
    """@a2a-js/sdk on /a2a/planner/ (clients/a2a_run.mjs): the card, a streaming send
    whose contextId round-trips, GetTask, SubscribeToTask on a running task — dropped,
    then resumed after its last seq — and on an ended one (refused), CancelTask."""
    need("@a2a-js/sdk")
    config = demo_config(
        tmp_path,
        token_delay=0.02,
        server={"a2a": True, "tokens": [{"name": "ann", "token": TOKEN}]},
    )
    async with running_server(config) as server:
        url = f"http://127.0.0.1:{server.port}/a2a/planner/"
        done = await trio.run_process(
            ["node", str(CLIENTS / "a2a_run.mjs"), url, "compare trio and asyncio", TOKEN],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.stdout, done.stderr.decode()
    got: dict[str, Any] = json.loads(done.stdout.decode().splitlines()[-1])
    assert got["ok"], got["error"]
    completed, canceled = 3, 5  # TaskState
    assert got["card"]["extensions"] == ["urn:agent-orchestrator:a2a:after-seq:v1"]
    stream = got["stream"]
    assert stream["kinds"][0] == "task" and stream["firstContext"] == "ctx-js-1"
    assert stream["lastState"] == completed and stream["answer"]
    assert got["get"] == {"state": completed, "contextId": "ctx-js-1", "answer": stream["answer"]}
    resume = got["resume"]
    assert resume["firstKinds"][0] == "task"
    assert resume["resumedFirst"] == "task" and resume["resumedFirstSeq"] == resume["cursor"]
    assert resume["resumedTaskAnswer"] == resume["answerBefore"]
    later = resume["laterSeqs"]
    assert later == sorted(later) and later[0] > resume["cursor"]
    assert resume["built"] == resume["final"] and resume["finalState"] == completed
    assert got["cancel"]["state"] == canceled
    ended = got["endedSubscribe"]
    assert ended["refused"] and "has ended" in ended["error"]


async def test_the_mcp_conformance_suite_passes_what_applies(tmp_path: Path) -> None:
    """@modelcontextprotocol/conformance against /mcp: every scenario that applies to a
    server of agents passes; the others are listed, with why, in
    clients/mcp-conformance-baseline.yml (the suite fails when a listed one passes)."""
    need("@modelcontextprotocol/conformance")
    bin_dir = CLIENTS / "node_modules" / ".bin"  # its Node 22 first: the suite needs it
    config = demo_config(tmp_path, server={"mcp": True})
    async with running_server(config) as server:
        done = await trio.run_process(
            [
                str(bin_dir / "conformance"),
                "server",
                "--url",
                f"http://127.0.0.1:{server.port}/mcp",
                "--expected-failures",
                str(CLIENTS / "mcp-conformance-baseline.yml"),
                "--output-dir",
                str(tmp_path / "results"),
            ],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"},
        )
    out = done.stdout.decode()
    assert done.returncode == 0, out[-3000:] + done.stderr.decode()[-2000:]
    assert "Baseline check passed" in out
    for scenario in (
        "server-initialize",
        "tools-list",
        "tools-call-error",
        "dns-rebinding-protection",
    ):
        assert f"✓ {scenario}:" in out


async def inspector(tmp_path: Path, *target: str, method: str, **tool: str) -> Any:
    """What the MCP Inspector's CLI (`mcp-inspector --cli`) got from `target`."""
    args = [str(CLIENTS / "node_modules" / ".bin" / "mcp-inspector"), "--cli", *target]
    args += ["--method", method]
    if tool:
        args += [
            "--tool-name",
            tool.pop("name"),
            "--tool-arg",
            *(f"{k}={v}" for k, v in tool.items()),
        ]
    done = await trio.run_process(
        args,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env={**os.environ, "MCP_CATALOG_PATH": str(tmp_path / "catalog.json")},
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("door", ["http", "stdio"])
async def test_the_mcp_inspector_lists_and_calls_the_agents(tmp_path: Path, door: str) -> None:
    """The MCP Inspector's CLI on both doors: /mcp, and `orchestrator mcp` over stdio."""
    need("@modelcontextprotocol/inspector")
    config = demo_config(
        tmp_path, server={"mcp": True, "tokens": [{"name": "ann", "token": TOKEN}]}
    )
    async with running_server(config) as server:
        if door == "http":
            target = [
                f"http://127.0.0.1:{server.port}/mcp",
                "--header",
                f"Authorization: Bearer {TOKEN}",
            ]
        else:
            bridge = [sys.executable, "-m", "orchestrator", "mcp", "--url", server.url]
            target = [*bridge, "--token", TOKEN, "-e", f"PYTHONPATH={REPO}"]
        listed = await inspector(tmp_path, *target, method="tools/list")
        called = await inspector(
            tmp_path, *target, method="tools/call", name="critic", task="a draft"
        )
    names = {tool["name"] for tool in listed["tools"]}
    assert {"planner", "researcher", "critic"} <= names
    assert called["isError"] is False
    assert called["content"][0]["text"].startswith("Two claims need a source")


PHOENIX = CLIENTS / ".phoenix" / "bin" / "phoenix"


def need_phoenix() -> None:
    """Fail (in CI) or skip (elsewhere) when the Phoenix receiver is not installed."""
    if PHOENIX.is_file():
        return
    how = (
        "Arize Phoenix (a real OTLP receiver) is not installed: run `python3 -m venv "
        "clients/.phoenix && clients/.phoenix/bin/pip install -r "
        "clients/phoenix-requirements.txt` (as .ci/run does)"
    )
    if os.environ.get("ORCHESTRATOR_CLIENTS_REQUIRED"):
        pytest.fail(how)
    pytest.skip(how)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_real_otlp_receiver_phoenix_stores_the_agent_tree(tmp_path: Path) -> None:
    """Arize Phoenix, an OpenTelemetry-native receiver, takes our OTLP/HTTP export and
    stores the trace as the agent tree: one trace, every span under its parent, each
    `invoke_agent` named by the agent's display name with its path and depth."""
    need_phoenix()
    from orchestrator.telemetry.trace import trace_id_of
    from tests.integration.test_telemetry import serving, telemetry

    port = free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(tmp_path / "phoenix"),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    base = f"http://127.0.0.1:{port}"
    spans: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery, httpx.AsyncClient(timeout=10) as http:
        phoenix = await nursery.start(
            functools.partial(
                trio.run_process,
                [str(PHOENIX), "serve"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )
        )
        try:
            with trio.fail_after(120):  # its first start migrates its database
                while True:
                    with contextlib.suppress(httpx.HTTPError):
                        if (await http.get(f"{base}/v1/projects")).status_code == 200:
                            break
                    await trio.sleep(0.5)
            async with serving(tmp_path, {"telemetry": telemetry(base)}) as url:
                async with connect(url, max_size=None) as ws:
                    ack = await request(ws, op="run", id=1, agent="mid", input="look deep")
                    events, _ = await read_until_end(ws, ack["sub"])
                with trio.fail_after(30):
                    while len(spans) < 6:
                        got = await http.get(f"{base}/v1/projects/default/spans?limit=100")
                        spans = got.json()["data"]
                        await trio.sleep(0.2)
        finally:
            phoenix.terminate()
    run_id = events[0]["runId"]
    names = sorted(s["name"] for s in spans)
    assert names == sorted(
        [
            "invoke_agent Middle",
            "chat scripted",
            "chat scripted",
            "execute_tool agent_spawn",
            "invoke_agent leaf",
            "chat scripted",
        ]
    )
    trace_ids = {s["context"]["trace_id"] for s in spans}
    assert trace_ids == {f"{trace_id_of(run_id):032x}"}
    by_id = {s["context"]["span_id"]: s for s in spans}
    (root,) = [s for s in spans if s["name"] == "invoke_agent Middle"]
    assert not root.get("parent_id")
    for span in spans:
        if span is not root:
            assert span["parent_id"] in by_id, span["name"]
    (leaf,) = [s for s in spans if s["name"] == "invoke_agent leaf"]
    tool = by_id[leaf["parent_id"]]
    assert tool["name"] == "execute_tool agent_spawn" and by_id[tool["parent_id"]] is root
    assert root["attributes"]["gen_ai.agent.name"] == "Middle"
    assert root["attributes"]["orchestrator.depth"] == 0
    assert leaf["attributes"]["orchestrator.depth"] == 1
    assert leaf["attributes"]["orchestrator.path"].startswith(
        root["attributes"]["orchestrator.path"] + "/"
    )
