"""Remote subagents: a tree that spans two real servers — the remote one an
`orchestrator serve` process — streams the remote subtree live into the parent's
tree, tagged as if it ran here; a refused token and a killed remote become error
tool results and nothing hangs; cancelling the child cancels the run there."""

from __future__ import annotations

import functools
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from websockets.trio.client import connect

from tests.integration.test_server_lifecycle import start_serve_process
from tests.server_helpers import demo_config, read_until_end, recv, replay, request, running_server


@asynccontextmanager
async def remote_server(
    root: Path, *, token_delay: float = 0.002, tokens: list[dict[str, Any]] | None = None
) -> AsyncIterator[tuple[trio.Process, str]]:
    """The demo agents on an `orchestrator serve` process; its process and URL."""
    prepare(root, token_delay, tokens or [])
    async with trio.open_nursery() as nursery:
        proc, url = await start_serve_process(nursery, root / "server.yaml")
        try:
            yield proc, url
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGKILL)


def prepare(root: Path, token_delay: float, tokens: list[dict[str, Any]]) -> None:
    root.mkdir()
    demo_config(root, token_delay=token_delay, server={"tokens": tokens})


def local_agents(url: str, **remote: Any) -> dict[str, dict[str, Any]]:
    return {
        "far_planner": {
            "description": "the planner of the other team",
            "remote": {"url": url, "agent": "planner", **remote},
        },
        "boss": {
            "description": "asks the other team",
            "instructions": "lead",
            "tools": ["agent_spawn"],
            "script": {
                "turns": [
                    {
                        "say": "Asking them.",
                        "calls": [
                            {
                                "name": "agent_spawn",
                                "args": {"agent_id": "far_planner", "task": "compare trio"},
                            }
                        ],
                    },
                    {"say": "They said: {results}"},
                ]
            },
        },
    }


def second_config(root: Path, agents: dict[str, dict[str, Any]]) -> Any:
    root.mkdir()
    return demo_config(root, extra_agents=agents)


async def until_forwarded(ws: Any) -> list[dict[str, Any]]:
    """Events of the watched run until the first one forwarded from the remote run."""
    seen: list[dict[str, Any]] = []
    while not any(e["source"] and "remote" in e["source"] for e in seen):
        seen += (await recv(ws)).get("events", [])
    return seen


async def run_boss(url: str) -> list[dict[str, Any]]:
    async with connect(url, max_size=None) as ws:
        ack = await request(ws, op="run", id=1, agent="boss", input="go")
        events, _ = await read_until_end(ws, ack["sub"])
    return events


async def test_a_remote_subtree_streams_into_the_tree_as_if_it_ran_here(tmp_path: Path) -> None:
    async with remote_server(tmp_path / "far") as (_, far_url):
        config = demo_config(tmp_path, extra_agents=local_agents(far_url))
        async with running_server(config) as server:
            events = await run_boss(server.url)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))  # gap-free here
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED" and finished["data"]["status"] == "completed"
    assert "They said: Here is what the research team found" in finished["data"]["result"]
    (child,) = [e for e in events if e["type"] == "AGENT_STARTED" and e["source"]["depth"] == 1]
    source = child["source"]
    assert source["agentId"] == "far_planner" and child["data"]["remote"]["agent"] == "planner"
    forwarded = [e for e in events if e["source"] and "remote" in e["source"]]
    assert forwarded, "the remote run's events came through"
    remote_run = forwarded[0]["source"]["remote"]["runId"]
    assert {e["source"]["remote"]["runId"] for e in forwarded} == {remote_run}
    remote_seqs = [e["source"]["remote"]["seq"] for e in forwarded]
    assert remote_seqs == sorted(remote_seqs)  # in the remote run's order
    # The remote root is the child; its descendants continue depth and path below it.
    deeper = [e for e in forwarded if e["source"]["depth"] > 1]
    assert deeper and all(e["source"]["path"].startswith(source["path"] + "/") for e in deeper)
    assert {e["source"]["depth"] for e in deeper} == {2, 3}  # researchers, then critics
    ends = [e for e in events if e["type"] in ("AGENT_RESULT", "AGENT_ERROR")]
    assert [e for e in ends if e["source"] and e["source"]["agentKey"] == source["agentKey"]]
    # The whole remote tree's usage counts in the spawning agent's subtree.
    root_end = next(e for e in ends if e["source"] is None)
    assert (
        root_end["data"]["subtreeUsage"]["outputTokens"] > root_end["data"]["usage"]["outputTokens"]
    )


async def test_a_refused_token_and_a_killed_remote_are_error_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = [{"name": "them", "token": "right", "role": "user"}]
    async with remote_server(tmp_path / "far", tokens=tokens, token_delay=0.05) as (proc, url):
        config = demo_config(tmp_path, extra_agents=local_agents(url))
        async with running_server(config) as server:
            refused = await run_boss(server.url)  # no token configured: refused there
        agents = local_agents(url, token_env="FAR_TOKEN", timeout_seconds=2)
        config = second_config(tmp_path / "b", agents)
        monkeypatch.setenv("FAR_TOKEN", "right")
        async with running_server(config) as server, connect(server.url, max_size=None) as ws:
            ack = await request(ws, op="run", id=1, agent="boss", input="go")
            seen = await until_forwarded(ws)
            proc.send_signal(signal.SIGKILL)  # the remote dies mid-run
            with trio.fail_after(30):
                rest, _ = await read_until_end(ws, ack["sub"])
    result = next(e for e in refused if e["type"] == "TOOL_RESULT")
    assert result["data"]["isError"] and "unauthorized" in result["data"]["content"]
    assert refused[-1]["data"]["status"] == "completed"  # the parent went on
    killed = seen + rest
    result = next(e for e in killed if e["type"] == "TOOL_RESULT" and e["source"] is None)
    assert result["data"]["isError"] and "remote agent 'far_planner'" in result["data"]["content"]
    child_end = [
        e
        for e in killed
        if e["type"] == "AGENT_ERROR" and e["source"] and e["source"]["depth"] == 1
    ]
    assert len(child_end) == 1  # the child ended once, here
    assert killed[-1]["data"]["status"] == "completed"


async def test_cancelling_the_remote_child_cancels_the_run_there(tmp_path: Path) -> None:
    async with remote_server(tmp_path / "far", token_delay=0.05) as (_, far_url):
        config = demo_config(tmp_path, extra_agents=local_agents(far_url))
        async with running_server(config) as server, connect(server.url, max_size=None) as ws:
            ack = await request(ws, op="run", id=1, agent="boss", input="go")
            seen = await until_forwarded(ws)
            child = next(e for e in seen if e["type"] == "AGENT_STARTED")["source"]["agentKey"]
            remote_run = next(e for e in seen if e["source"] and "remote" in e["source"])
            cancel = {"runId": ack["runId"], "agentKey": child, "reason": "enough"}
            assert (await request(ws, op="cancel", id=2, **cancel))["op"] == "ack"
            rest, _ = await read_until_end(ws, ack["sub"])
        async with connect(far_url) as far:
            with trio.fail_after(10):
                while True:
                    (run,) = (await request(far, op="runs", id=3))["runs"]
                    if run["status"] != "running":
                        break
                    await trio.sleep(0.05)
    assert run["runId"] == remote_run["source"]["remote"]["runId"]
    assert run["status"] == "cancelled"
    result = next(e for e in rest if e["type"] == "TOOL_RESULT" and e["source"] is None)
    assert result["data"]["isError"] and "cancelled" in result["data"]["content"]
    assert rest[-1]["data"]["status"] == "completed"  # the parent went on


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "stopped"])
async def test_after_a_restart_here_the_remote_run_is_followed_again(
    tmp_path: Path, stop: signal.Signals
) -> None:
    from tests.integration.test_restart_resume import check_story

    async with remote_server(tmp_path / "far", token_delay=0.05) as (_, far_url):
        path = local_server_config(tmp_path / "here", far_url)
        async with trio.open_nursery() as nursery:
            proc, url = await start_serve_process(nursery, path)
            async with connect(url, max_size=None) as ws:
                ack = await request(ws, op="run", id=1, agent="boss", input="go")
                await until_forwarded(ws)
            proc.send_signal(stop)  # killed, or stopped to resume its runs at the next start
        async with trio.open_nursery() as nursery:
            proc, url = await start_serve_process(nursery, path)
            try:
                with trio.fail_after(30):
                    async with connect(url, max_size=None) as ws:
                        sub = await request(ws, op="subscribe", id=2, runId=ack["runId"])
                        await read_until_end(ws, sub["sub"])
                everything = await replay(url, ack["runId"])
            finally:
                proc.send_signal(signal.SIGTERM)
        async with connect(far_url) as far:
            (far_run,) = (await request(far, op="runs", id=3))["runs"]
    check_story(everything)  # every agent, here and forwarded, started once and ended once
    assert far_run["status"] == "completed"  # it went on there, and was not started twice
    forwarded = [e for e in everything if e["source"] and "remote" in e["source"]]
    assert {e["source"]["remote"]["runId"] for e in forwarded} == {far_run["runId"]}
    seqs = [e["source"]["remote"]["seq"] for e in forwarded]
    assert seqs == list(range(2, 2 + len(seqs)))  # nothing missed or repeated over the restart
    assert not [e for e in forwarded if e["type"] == "TURN_ABANDONED"]
    result = next(e for e in everything if e["type"] == "TOOL_RESULT" and e["source"] is None)
    assert not result["data"]["isError"], result
    assert "Here is what the research team found" in result["data"]["content"]
    assert everything[-1]["data"]["status"] == "completed"


def local_server_config(root: Path, far_url: str) -> Path:
    root.mkdir()
    demo_config(root, storage="sqlite:///journal.db", extra_agents=local_agents(far_url))
    return root / "server.yaml"


async def test_a_remote_that_never_answers_is_an_error_result_after_its_timeout(
    tmp_path: Path,
) -> None:
    """A server that takes the connection and says nothing (a hung host): the child
    fails after `timeout_seconds`, the parent goes on, nothing hangs."""
    held: list[trio.SocketStream] = []

    async def hold(stream: trio.SocketStream) -> None:
        held.append(stream)
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(
            functools.partial(trio.serve_tcp, hold, 0, host="127.0.0.1")
        )
        port = listener.socket.getsockname()[1]
        agents = local_agents(f"ws://127.0.0.1:{port}/ws", timeout_seconds=1)
        async with running_server(demo_config(tmp_path, extra_agents=agents)) as server:
            with trio.fail_after(15):
                events = await run_boss(server.url)
        nursery.cancel_scope.cancel()
    assert held, "the spawn did reach the silent server"
    result = next(e for e in events if e["type"] == "TOOL_RESULT" and e["source"] is None)
    assert result["data"]["isError"] and "unreachable" in result["data"]["content"]
    assert "no answer within 1 s" in result["data"]["content"]
    assert events[-1]["data"]["status"] == "completed"


async def test_a_fork_does_not_run_a_remote_subtree_again(tmp_path: Path) -> None:
    """docs/fork.md: a remote child still running at the fork point ends in the fork
    (`remote_not_forked`, an error result for its parent, which goes on); one that had
    ended by then stands, and the remote server is not asked."""
    async with remote_server(tmp_path / "far") as (_, far_url):
        config = demo_config(tmp_path, extra_agents=local_agents(far_url))
        async with running_server(config) as server, connect(server.url, max_size=None) as ws:
            events = await run_boss(server.url)
            inside = next(
                e["seq"] for e in events if e["source"] and e["source"].get("depth", 0) > 1
            )
            after = next(
                e["seq"] for e in events if e["type"] == "TOOL_RESULT" and e["source"] is None
            )
            forks = {}
            for at in (inside, after):
                ack = await request(ws, op="fork", id=at, runId=events[0]["runId"], atSeq=at)
                assert ack["op"] == "ack", ack
                forks[at], end = await read_until_end(ws, ack["sub"])
                assert end["status"] == "completed"
    running = forks[inside]
    (result,) = [e for e in running[inside:] if e["type"] == "TOOL_RESULT" and e["source"] is None]
    assert result["data"]["isError"]
    assert "a fork does not run a remote subtree again" in result["data"]["content"]
    (child_end,) = [
        e
        for e in running[inside:]
        if e["type"] == "AGENT_ERROR" and e["source"] and e["source"]["depth"] == 1
    ]
    assert child_end["data"]["errorType"] == "remote_not_forked"
    started = {e["source"]["agentKey"] for e in running if e["type"] == "AGENT_STARTED"}
    ended = [
        e["source"]["agentKey"]
        for e in running
        if e["type"] in ("AGENT_RESULT", "AGENT_ERROR") and e["source"]
    ]
    assert sorted(ended) == sorted(started)  # every agent ends exactly once
    ended_before = forks[after]
    assert ended_before[-1]["data"]["result"] == events[-1]["data"]["result"]
    assert not [e for e in ended_before[after:] if e["source"] and "remote" in e["source"]]
