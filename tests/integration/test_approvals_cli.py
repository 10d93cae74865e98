"""Approvals from a shell: `orchestrator approve` and `pending` against a real server, and
`orchestrator run` asking on a terminal (a real pty), or answering for scripts."""

from __future__ import annotations

import functools
import json
import os
import pty
import sys
from pathlib import Path

import pyte
import trio
from websockets.trio.client import connect

from tests.helpers import REPO, write_config
from tests.integration.test_approvals_server import AGENTS, Client
from tests.server_helpers import demo_config, read_until_end, running_server

WRITER = {
    "description": "writes",
    "instructions": "w",
    "tools": ["write_file"],
    "approval": ["write_file"],
    "script": {
        "turns": [
            {"calls": [{"name": "write_file", "args": {"path": "x.txt", "content": "X"}}]},
            {"say": "writer: {results}"},
        ]
    },
}


async def orchestrator_cli(*args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    proc = await trio.run_process(
        [sys.executable, "-m", "orchestrator", *args],
        capture_stdout=True,
        capture_stderr=True,
        stdin=b"",
        check=False,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


async def test_pending_and_approve_from_a_shell(tmp_path: Path) -> None:
    config = demo_config(tmp_path, extra_agents=AGENTS)
    async with running_server(config) as server, connect(server.url, max_size=None) as ws:
        client = Client(ws)
        ack = await client.ask(op="run", id="r", agent="top", input="go")
        run_id = ack["runId"]
        (asked,) = await client.until("APPROVAL_REQUESTED")
        call_id = asked["data"]["toolCallId"]
        code, out, err = await orchestrator_cli("pending", "--url", server.url)
        assert (code, err) == (0, "")
        assert out.startswith(f"{run_id}  {call_id}  write_file(")
        assert asked["source"]["agentKey"] in out
        code, out, _ = await orchestrator_cli("pending", run_id, "--json", "--url", server.url)
        (listed,) = json.loads(out)
        assert listed["toolCallId"] == call_id and listed["depth"] == 3
        code, out, err = await orchestrator_cli(
            "approve", run_id, call_id, "--args", '{"path": "y.txt"}', "--url", server.url
        )
        assert code == 1 and "bad_request: args are not valid" in err
        code, out, err = await orchestrator_cli(
            "approve", run_id, call_id, "--deny", "--reason", "from a shell", "--url", server.url
        )
        assert (code, err) == (0, "") and f"denied tool call {call_id} of run {run_id}" in out
        code, out, err = await orchestrator_cli("approve", run_id, call_id, "--url", server.url)
        assert code == 1 and "not_found" in err  # answered, and the run went on to its end
        events, end = await read_until_end(ws, ack["sub"])
    assert end["status"] == "completed"
    resolved = next(e for e in client.events + events if e["type"] == "APPROVAL_RESOLVED")
    assert resolved["data"]["reason"] == "from a shell"
    code, out, _ = await orchestrator_cli("pending", "--url", server.url)
    assert code == 2  # the server is gone


def writer_config(tmp_path: Path) -> Path:
    write_config(tmp_path, {"writer": WRITER}, tools={"root": "ws"})
    (tmp_path / "ws").mkdir()
    return tmp_path / "server.yaml"


async def test_run_answers_for_scripts_and_denies_without_a_terminal(tmp_path: Path) -> None:
    config = str(writer_config(tmp_path))
    code, out, err = await orchestrator_cli("run", "writer", "go", "--config", config, "--json")
    assert code == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    resolved = next(e for e in events if e["type"] == "APPROVAL_RESOLVED")
    assert resolved["data"]["decision"] == "deny"
    assert "stdin is not a terminal" in resolved["data"]["reason"]
    assert not (tmp_path / "ws" / "x.txt").exists()
    code, out, err = await orchestrator_cli(
        "run", "writer", "go", "--config", config, "--json", "--deny-all"
    )
    resolved = next(json.loads(x) for x in out.splitlines() if "APPROVAL_RESOLVED" in x)
    assert resolved["data"]["reason"] == "--deny-all"
    code, out, err = await orchestrator_cli(
        "run", "writer", "go", "--config", config, "--approve-all"
    )
    assert code == 0, err
    assert (tmp_path / "ws" / "x.txt").read_text() == "X"
    code, out, err = await orchestrator_cli(
        "run", "writer", "go", "--config", config, "--approve-all", "--deny-all"
    )
    assert code == 2 and "not allowed with argument" in err


async def test_run_asks_on_a_terminal(tmp_path: Path) -> None:
    config = str(writer_config(tmp_path))
    for answer, written in ((b"y\n", True), (b"too risky\n", False)):
        (tmp_path / "ws" / "x.txt").unlink(missing_ok=True)
        out, code = await run_on_a_pty(
            [sys.executable, "-m", "orchestrator", "run", "writer", "go", "--config", config],
            answer,
        )
        assert code == 0, out
        assert "wants to run write_file" in out and "Approve?" in out
        assert "[y = yes; Enter, n or a reason = no]" in out  # Enter denies: it says so
        assert (tmp_path / "ws" / "x.txt").exists() is written
        screen = on_screen(out)
        # One tree on the screen: the question and its answer, then the tree as it ended
        # (regression: the tree drawn before the question stayed above it).
        tree = next(line for line in screen if "writer" in line and "wants" not in line)
        assert tree.startswith("✓")
        assert not any("waiting for approval" in line for line in screen)
        if not written:
            assert "denied by client: too risky" in out


def on_screen(output: str) -> list[str]:
    """The non-empty lines a terminal shows after `output` (escape codes applied)."""
    screen = pyte.Screen(200, 60)
    pyte.Stream(screen).feed(output)
    return [line.rstrip() for line in screen.display if line.strip()]


async def run_on_a_pty(command: list[str], answer: bytes) -> tuple[str, int]:
    """Run `command` with a pty as its terminal; type `answer` once it asks."""
    leader, follower = pty.openpty()
    seen = b""
    try:
        async with trio.open_nursery() as nursery:
            proc = await nursery.start(
                functools.partial(
                    trio.run_process,
                    command,
                    stdin=follower,
                    stdout=follower,
                    stderr=follower,
                    check=False,
                    env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"},
                )
            )
            os.close(follower)
            follower = -1
            with trio.fail_after(30):
                answered = False
                while True:
                    try:
                        chunk = await trio.to_thread.run_sync(os.read, leader, 4096)
                    except OSError:  # the process closed the terminal
                        break
                    if not chunk:
                        break
                    seen += chunk
                    if not answered and b"Approve?" in seen:
                        os.write(leader, answer)
                        answered = True
            await proc.wait()
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    return seen.decode(errors="replace"), proc.returncode
