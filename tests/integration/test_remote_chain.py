"""A tree across three real `orchestrator serve` processes, A → B → C: the deepest
agent (on C) streams live into the watcher of A, two hops away, tagged as if it ran
there; a call that waits for approval on C is listed and answered on A, a message
sent on A reaches it, a cancel on A stops it on C, and a TCP connection cut between
A and B is resumed with nothing missed or repeated. Filters and resume on A work on
the remote subtree as on a local one."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
from websockets.trio.client import connect

from tests.integration.test_approvals_server import Client
from tests.integration.test_server_lifecycle import start_serve_process
from tests.server_helpers import demo_config, replay


def agent(turns: list[dict[str, Any]], tools: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "description": "test agent",
        "instructions": "test",
        "tools": tools,
        "script": {"turns": turns, "token_delay": 0.005},
        **extra,
    }


def spawn(agent_id: str) -> dict[str, Any]:
    return {"name": "agent_spawn", "args": {"agent_id": agent_id, "task": "t"}}


def remote(url: str, agent_id: str) -> dict[str, Any]:
    return {"description": "on the next server", "remote": {"url": url, "agent": agent_id}}


# C: `deep` writes a file once a person approves, then answers with the latest message.
C_AGENTS = {
    "deep": agent(
        [
            {
                "say": "About to write.",
                "calls": [{"name": "write_file", "args": {"path": "a.txt", "content": "A"}}],
            },
            {"say": "deep: {results} / latest: {input}"},
        ],
        ["write_file"],
        approval=["write_file"],
        approval_edit=True,
    ),
}


def b_agents(c_url: str) -> dict[str, Any]:
    return {
        "c_deep": remote(c_url, "deep"),
        "middle": agent(
            [{"calls": [spawn("c_deep")]}, {"say": "middle: {results}"}], ["agent_spawn"]
        ),
    }


def a_agents(b_url: str) -> dict[str, Any]:
    return {
        "b_middle": remote(b_url, "middle"),
        "boss": agent(
            [{"calls": [spawn("b_middle")]}, {"say": "boss: {results}"}], ["agent_spawn"]
        ),
    }


class Cutter:
    """A TCP relay in front of a server whose connections can be cut (RST) at will."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.streams: list[trio.SocketStream] = []
        self.port = 0

    async def serve(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._relay, listeners)

    async def _relay(self, downstream: trio.SocketStream) -> None:
        upstream = await trio.open_tcp_stream("127.0.0.1", self.target_port)
        self.streams += [downstream, upstream]

        async def pipe(a: trio.SocketStream, b: trio.SocketStream) -> None:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                async for chunk in a:
                    await b.send_all(chunk)
            nursery.cancel_scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pipe, downstream, upstream)
            nursery.start_soon(pipe, upstream, downstream)
        for stream in (downstream, upstream):
            with contextlib.suppress(trio.ClosedResourceError, OSError):
                await stream.aclose()

    def cut(self) -> int:
        """Reset every relayed connection now; how many there were."""
        cut = 0
        for stream in self.streams:
            with contextlib.suppress(OSError):
                stream.socket.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
                stream.socket.shutdown(socket.SHUT_RDWR)
                cut += 1
        self.streams.clear()
        return cut


@asynccontextmanager
async def chain(tmp_path: Path) -> AsyncIterator[tuple[str, str, str, Cutter]]:
    """Servers C, B and A as processes (A reaches B through a `Cutter`): their URLs."""
    async with trio.open_nursery() as nursery:
        procs: list[trio.Process] = []
        try:
            c_url = await server(nursery, procs, tmp_path / "c", C_AGENTS)
            b_url = await server(nursery, procs, tmp_path / "b", b_agents(c_url))
            cutter = Cutter(int(b_url.rsplit(":", 1)[1].split("/")[0]))
            await nursery.start(cutter.serve)
            a_url = await server(
                nursery, procs, tmp_path / "a", a_agents(f"ws://127.0.0.1:{cutter.port}/ws")
            )
            yield a_url, b_url, c_url, cutter
        finally:
            for proc in procs:
                if proc.returncode is None:
                    proc.send_signal(signal.SIGKILL)
            nursery.cancel_scope.cancel()


async def server(
    nursery: trio.Nursery, procs: list[trio.Process], root: Path, agents: dict[str, Any]
) -> str:
    await trio.Path(root).mkdir()
    # (B is reached through the Cutter's port: a proxy in front, named as one)
    demo_config(root, extra_agents=agents, server={"allowed_hosts": ["127.0.0.1"]})
    proc, url = await start_serve_process(nursery, root / "server.yaml")
    procs.append(proc)
    return url


def key(event: dict[str, Any]) -> str | None:
    return event["source"]["agentKey"] if event["source"] else None


async def until(client: Client, kind: str) -> dict[str, Any]:
    """Read events until one of type `kind`; that event."""
    with trio.fail_after(30):
        while True:
            found = [e for e in client.events if e["type"] == kind]
            if found:
                return found[0]
            await client._read_one()


async def test_a_tree_across_three_servers_is_steered_from_the_top(tmp_path: Path) -> None:
    async with chain(tmp_path) as (a_url, _, c_url, cutter):
        async with connect(a_url, max_size=None) as ws:
            a = Client(ws)
            ack = await a.ask(op="run", id=1, agent="boss", input="go")
            run_id = ack["runId"]
            asked = await until(a, "APPROVAL_REQUESTED")
            deep = asked["source"]
            # Two hops down, tagged as if it ran here.
            assert deep["depth"] == 2 and deep["agentId"] == "c_deep"
            assert deep["path"].count("/") == 2 and "remote" in deep
            call_id = asked["data"]["toolCallId"]
            (waiting,) = (await a.ask(op="pending", id=2, runId=run_id))["approvals"]
            assert waiting["toolCallId"] == call_id and waiting["agentKey"] == deep["agentKey"]
            assert waiting["depth"] == 2 and waiting["path"] == deep["path"]
            reply = await a.ask(
                op="send", id=3, runId=run_id, agentKey=deep["agentKey"], message="from A"
            )
            assert reply == {"op": "ack", "id": 3}
            assert cutter.cut() >= 2  # the follow of A → B (and its relay) dies here
            bad = await a.ask(
                op="approve", id=4, runId=run_id, toolCallId=call_id, decision="deny", args={}
            )
            assert bad["op"] == "error" and bad["code"] == "bad_request"  # C says so
            reply = await a.ask(
                op="approve", id=5, runId=run_id, toolCallId=call_id, decision="approve"
            )
            assert reply == {"op": "ack", "id": 5}
            again = await a.ask(
                op="approve", id=6, runId=run_id, toolCallId=call_id, decision="approve"
            )
            assert again["code"] == "not_found"
            end = await a.finish()
            events = a.events
        everything = await replay(a_url, run_id)
        below = await replay(a_url, run_id, filter={"pathPrefix": deep["path"]})
        after = await replay(a_url, run_id, after_seq=len(everything) // 2)
        shallow = await replay(a_url, run_id, filter={"maxDepth": 1})
        status = await replay(a_url, run_id, detail="status")
        async with connect(a_url) as ws:
            left = (await Client(ws).ask(op="pending", id=7, runId=run_id))["approvals"]
        async with connect(c_url) as ws:
            (c_run,) = (await Client(ws).ask(op="runs", id=8))["runs"]
    assert end["status"] == "completed" and c_run["status"] == "completed"
    assert events == everything  # live and replayed alike
    assert [e["seq"] for e in everything] == list(range(1, len(everything) + 1))
    result = everything[-1]["data"]["result"]
    assert result.startswith("boss: middle: deep: ") and result.endswith("latest: from A"), result
    (wrote,) = [e for e in everything if e["type"] == "TOOL_RESULT" and key(e) == deep["agentKey"]]
    assert (
        not wrote["data"]["isError"] and (tmp_path / "c" / "workspace" / "a.txt").read_text() == "A"
    )
    # A TCP cut between A and B: resumed by seq, nothing missed, nothing repeated.
    forwarded = [
        e["source"]["remote"]["seq"] for e in everything if e["source"] and "remote" in e["source"]
    ]
    assert forwarded == list(range(2, 2 + len(forwarded)))
    resolved = [e for e in everything if e["type"] == "APPROVAL_RESOLVED"]
    assert [e["data"]["decision"] for e in resolved] == ["approve"]
    assert resolved[0]["source"]["agentKey"] == deep["agentKey"]
    (message,) = [e for e in everything if e["type"] == "USER_MESSAGE"]
    assert message["source"]["agentKey"] == deep["agentKey"] and message["data"]["text"] == "from A"
    assert left == []
    # Filters and resume see the remote subtree as a local one.
    assert below and all(e["source"]["path"].startswith(deep["path"]) for e in below)
    assert below == [
        e for e in everything if e["source"] and e["source"]["path"].startswith(deep["path"])
    ]
    assert after == everything[len(everything) // 2 :]
    assert all(e["source"] is None or e["source"]["depth"] <= 1 for e in shallow)
    deep_status = [e["type"] for e in status if key(e) == deep["agentKey"]]
    assert "REASONING" not in deep_status and "AGENT_STARTED" in deep_status
    assert "APPROVAL_REQUESTED" in deep_status and deep_status[-1] == "AGENT_RESULT"


async def test_a_cancel_from_the_top_stops_the_agent_two_servers_away(tmp_path: Path) -> None:
    async with chain(tmp_path) as (a_url, b_url, c_url, _):
        async with connect(a_url, max_size=None) as ws:
            a = Client(ws)
            ack = await a.ask(op="run", id=1, agent="boss", input="go")
            deep = (await until(a, "APPROVAL_REQUESTED"))["source"]
            cancel = {"runId": ack["runId"], "agentKey": deep["agentKey"], "reason": "enough"}
            assert (await a.ask(op="cancel", id=2, **cancel))["op"] == "ack"
            end = await a.finish()
            events = a.events
        runs = {}
        for name, url in (("b", b_url), ("c", c_url)):
            async with connect(url) as ws:
                (runs[name],) = (await Client(ws).ask(op="runs", id=3))["runs"]
    assert runs["c"]["status"] == "cancelled" and runs["b"]["status"] == "completed"
    assert end["status"] == "completed"
    deep_end = [
        e
        for e in events
        if e["source"]
        and e["source"]["agentKey"] == deep["agentKey"]
        and e["type"] == "AGENT_ERROR"
    ]
    assert len(deep_end) == 1 and "enough" in json.dumps(deep_end[0]["data"])
    middle_got = next(
        e
        for e in events
        if e["type"] == "TOOL_RESULT" and e["source"] and e["source"]["depth"] == 1
    )
    assert middle_got["data"]["isError"] and "cancelled" in middle_got["data"]["content"]


async def test_a_call_waiting_there_is_answered_here_after_a_restart_here(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        procs: list[trio.Process] = []
        try:
            c_url = await server(nursery, procs, tmp_path / "c", C_AGENTS)
            here = tmp_path / "here"
            await trio.Path(here).mkdir()
            demo_config(here, storage="sqlite:///journal.db", extra_agents=b_agents(c_url))
            proc, url = await start_serve_process(nursery, here / "server.yaml")
            async with connect(url, max_size=None) as ws:
                first = Client(ws)
                ack = await first.ask(op="run", id=1, agent="middle", input="go")
                asked = await until(first, "APPROVAL_REQUESTED")
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
            proc, url = await start_serve_process(nursery, here / "server.yaml")
            procs.append(proc)
            async with connect(url, max_size=None) as ws:
                again = Client(ws)
                sub = await again.ask(op="subscribe", id=2, runId=ack["runId"])
                assert sub["op"] == "ack"
                with trio.fail_after(10):
                    # (another process's state: polled; listed once the run follows C again)
                    while not (waiting := await again.ask(op="pending", id=3))["approvals"]:  # noqa: ASYNC110
                        await trio.sleep(0.05)
                call_id = asked["data"]["toolCallId"]
                (item,) = waiting["approvals"]
                assert item["toolCallId"] == call_id and item["agentKey"] == key(asked)
                answer = {"runId": ack["runId"], "toolCallId": call_id, "decision": "approve"}
                assert (await again.ask(op="approve", id=4, **answer))["op"] == "ack"
                end = await again.finish()
            everything = await replay(url, ack["runId"])
        finally:
            for each in procs:
                if each.returncode is None:
                    each.send_signal(signal.SIGKILL)
            nursery.cancel_scope.cancel()
    assert end["status"] == "completed"
    assert everything[-1]["data"]["result"].startswith("middle: deep: wrote 1 characters")
    (resolved,) = [e for e in everything if e["type"] == "APPROVAL_RESOLVED"]
    assert resolved["data"]["decision"] == "approve" and key(resolved) == key(asked)
