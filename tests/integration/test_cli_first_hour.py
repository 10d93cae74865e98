"""The command line's first hour, against a real server (issue 47): Ctrl-C while
following is one line (the run goes on), a task read from stdin, one wording for a
wrong token on every client command, and no per-request log lines by default."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

from tests.helpers import REPO
from tests.integration.test_server_lifecycle import cli
from tests.server_helpers import demo_config, replay, running_server

pytestmark = pytest.mark.trio


WAITER = {  # its call waits for a person: the run cannot end before Ctrl-C, however slow
    "waiter": {
        "description": "writes once approved",
        "instructions": "i",
        "tools": ["write_file"],
        "approval": ["write_file"],
        "script": {
            "turns": [
                {"calls": [{"name": "write_file", "args": {"path": "w.txt", "content": "x"}}]},
                {"say": "written"},
            ]
        },
    }
}


async def test_ctrl_c_while_following_is_one_line_and_the_run_goes_on(tmp_path: Path) -> None:
    config = demo_config(tmp_path, extra_agents=WAITER)
    async with running_server(config) as server:
        start = ["start", "waiter", "go", "--follow", "--json", "--url", server.url]
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "orchestrator", *start],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            # As from a terminal: a suite started in the background (`cmd &` in a script)
            # hands its children SIGINT ignored, and Python then leaves it ignored.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        assert process.stdout is not None and process.stderr is not None
        seen = b""
        while b'"APPROVAL_REQUESTED"' not in seen:  # following, and the run waits
            seen += await process.stdout.receive_some()
        process.send_signal(signal.SIGINT)
        err = b""

        async def drain_stdout(out: trio.abc.ReceiveStream) -> None:
            while await out.receive_some():  # (a full pipe would hold its writes up)
                pass

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain_stdout, process.stdout)
                while chunk := await process.stderr.receive_some():
                    err += chunk
                await process.wait()
        assert process.returncode == 130, err.decode()
        lines = err.decode().strip().splitlines()
        assert lines[-1] == (
            "stopped following; the run goes on (`orchestrator cancel RUN_ID` stops it)"
        )
        assert len(lines) <= 2 and "Traceback" not in err.decode(), lines  # (`started …`)
        await process.stdout.aclose()
        await process.stderr.aclose()
        run_id = seen.split(b'"runId":"')[1].split(b'"')[0].decode()
        approved = await cli("approve", run_id, "call_0", "--url", server.url)
        assert approved.returncode == 0, approved.stderr
        events = await replay(server.url, run_id)  # it went on to its end
        assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["data"]["status"] == "completed"


async def test_a_task_from_stdin_and_one_wording_for_a_wrong_token(tmp_path: Path) -> None:
    tokens = [{"name": "a", "token": "t-a"}]
    config = demo_config(tmp_path, server={"tokens": tokens, "ag_ui": True, "mcp": True})
    async with running_server(config) as server:
        long_task = "x" * 200_000  # (over what an argument may carry)
        started = await trio.run_process(
            [sys.executable, "-m", "orchestrator", "start", "critic", "-", "--url", server.url],
            stdin=long_task.encode(),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), "ORCHESTRATOR_TOKEN": "t-a"},
        )
        assert started.returncode == 0, started.stderr
        run_id = started.stdout.decode().strip()
        events = await replay(server.url, run_id, headers={"Authorization": "Bearer t-a"})
        assert events[0]["data"]["input"] == long_task
        said = set()
        for argv in (["pending"], ["watch", run_id], ["start", "critic", "x"], ["runs"]):
            wrong = await cli(*argv, "--url", server.url, "--token", "wrong")
            assert wrong.returncode == 2, (argv, wrong.stderr)
            line = wrong.stderr.decode().strip().splitlines()[-1]
            said.add(line.replace(server.url, "URL"))
        assert said == {
            "error: HTTP 401 from URL: the token was refused (a valid --token is needed)"
        }, said
        # Without a token, the server says to send one; with a wrong one, that it was
        # refused (issue 57, 20): at every door.
        base = server.url.replace("ws://", "http://").removesuffix("/ws")
        async with httpx.AsyncClient() as http:
            for method, path in (("GET", "/ws"), ("POST", "/ag-ui/critic"), ("POST", "/mcp")):
                body = b"{}" if method == "POST" else None
                none = await http.request(method, f"{base}{path}", content=body)
                bad = await http.request(
                    method, f"{base}{path}", content=body, headers={"Authorization": "Bearer x"}
                )
                assert none.status_code == bad.status_code == 401, (path, none.text, bad.text)
                assert "send Authorization: Bearer" in none.text
                assert "the token was refused" in bad.text


async def test_model_requests_are_logged_only_with_access_log(tmp_path: Path) -> None:
    """`serve` logs no `httpx: HTTP Request: POST …` line per model turn unless asked
    for an access log (`--access-log`)."""
    from websockets.trio.client import connect

    from tests.fakes.provider_server import Reply, serve_fake_openai
    from tests.helpers import write_config
    from tests.integration.test_server_lifecycle import serve_process
    from tests.server_helpers import read_until_end, request

    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, lambda role, messages, body: Reply("hello"))
        model = {"provider": "openai", "base_url": fake.base_url, "model": "m"}
        agents = {"greeter": {"description": "d", "instructions": "i", "tools": []}}
        write_config(tmp_path, agents, models={"default": model})
        logged = {}
        for flags in ((), ("--access-log",)):
            proc, line = await serve_process(nursery, tmp_path / "server.yaml", 0, *flags)
            url = line.split("listening on ")[1].split()[0]
            async with connect(url, max_size=None) as ws:
                ack = await request(ws, op="run", id=1, agent="greeter", input="hi")
                _, end = await read_until_end(ws, ack["sub"])
                assert end["status"] == "completed"
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
            assert proc.stderr is not None
            err = b""
            while chunk := await proc.stderr.receive_some(65536):
                err += chunk
            logged[flags] = err.decode()
        nursery.cancel_scope.cancel()
    assert len(fake.requests) == 2
    assert "HTTP Request: POST" not in logged[()], logged[()]
    assert "HTTP Request: POST" in logged[("--access-log",)]


@pytest.mark.parametrize("command", [["start", "critic", "go", "--follow"], ["runs"]])
async def test_ctrl_c_while_the_command_line_still_imports_is_one_line(
    tmp_path: Path, command: list[str]
) -> None:
    """Issue 57, defect 12: Ctrl-C as soon as the command line runs (importing what
    carries the command out: seen by Python's import log on stderr) says one line and
    exits 130."""
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "orchestrator", *command, "--url", "ws://127.0.0.1:9/ws"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONPROFILEIMPORTTIME": "1"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert process.stderr is not None
    err = b""
    with trio.fail_after(30):
        while not re.search(rb"\|\s+msgspec\n", err):  # main() imports what carries it out
            chunk = await process.stderr.receive_some()
            assert chunk, err.decode()[-2000:]
            err += chunk
        process.send_signal(signal.SIGINT)
        while chunk := await process.stderr.receive_some():
            err += chunk
        await process.wait()
    said = [line for line in err.decode().splitlines() if not line.startswith("import time:")]
    assert "Traceback" not in err.decode(), "\n".join(said)
    assert process.returncode == 130, said
    assert len(said) == 1, said


async def test_serve_says_where_the_console_is(tmp_path: Path) -> None:
    """Issue 57, 15: `serve` prints the console's address after where it listens, and
    the console is there."""
    from tests.integration.test_server_lifecycle import serve_process

    demo_config(tmp_path)
    async with trio.open_nursery() as nursery:
        proc, first = await serve_process(nursery, tmp_path / "server.yaml")
        assert proc.stdout is not None
        out = first.encode()
        with trio.fail_after(20):
            while out.count(b"\n") < 2:
                out += await proc.stdout.receive_some(1000)
        lines = out.decode().splitlines()
        port = lines[0].split("listening on ws://127.0.0.1:")[1].split("/")[0]
        assert lines[1] == f"console: http://127.0.0.1:{port}/"
        async with httpx.AsyncClient() as http:
            page = await http.get(lines[1].removeprefix("console: "))
        assert page.status_code == 200 and "<html" in page.text.lower()
        proc.terminate()
