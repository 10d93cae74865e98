"""AG-UI in a thread, as a browser chat app uses it (issue 57): a page on its own
origin may call `/ag-ui` (CORS, for `server.allowed_origins` only); `enqueue` answers a
stream that waits for its run; `steer` and the snapshots give the thread's real
conversation, tool calls and results included, with stable ids; and a reloaded page
reads a thread's history without starting a run (docs/integrations.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.helpers import REPO
from tests.integration.test_agui import base, events_of, run_input
from tests.integration.test_approvals_server import agent
from tests.integration.test_official_clients import need
from tests.memory_server import autojump, memory_server
from tests.server_helpers import demo_config, running_server

pytest.importorskip("ag_ui.core", reason="AG-UI needs the `agui` extra: pip install -e '.[dev]'")

TOKENS = [
    {"name": "ann", "token": "a-secret", "role": "user"},
    {"name": "vic", "token": "v-secret", "role": "viewer"},
]
AUTH = {"Authorization": "Bearer a-secret"}
APP_ORIGIN = "http://127.0.0.1:5173"
SLOW = {
    "slow": agent(
        [{"say": "working on {input} " + "and more " * 15 + "done with {input}"}],
        [],
        token_delay=0.05,
    )
}


def config(tmp_path: Path) -> Any:
    server = {"ag_ui": True, "tokens": TOKENS, "allowed_origins": [APP_ORIGIN]}
    return demo_config(tmp_path, server=server, extra_agents=SLOW)


async def post(
    http: httpx.AsyncClient, url: str, body: dict[str, Any]
) -> tuple[httpx.Response, list[Any]]:
    """One AG-UI request: its answer and its events."""
    async with http.stream("POST", url, json=body, headers=AUTH) as response:
        if response.status_code != 200:
            await response.aread()
            return response, []
        return response, [event async for event in events_of(response)]


def snapshot(events: list[Any]) -> list[dict[str, Any]]:
    (found,) = [e for e in events if e.type == "MESSAGES_SNAPSHOT"]
    return [m.model_dump(mode="json", by_alias=True, exclude_none=True) for m in found.messages]


@autojump
async def test_a_page_of_an_allowed_origin_may_call_ag_ui_and_others_may_not(
    tmp_path: Path,
) -> None:
    """Defect 6: the preflight is answered, the answer carries the page's origin (never
    `*`), and an origin that is not allowed is refused as before."""
    async with memory_server(config(tmp_path)) as server, httpx.AsyncClient(timeout=30) as http:
        url = f"{base(server)}/ag-ui/critic"
        asked = {
            "Origin": APP_ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        }
        preflight = await http.options(url, headers=asked)
        assert preflight.status_code == 204, preflight.text
        assert preflight.headers["access-control-allow-origin"] == APP_ORIGIN
        assert "POST" in preflight.headers["access-control-allow-methods"]
        allowed_headers = preflight.headers["access-control-allow-headers"].lower()
        assert "authorization" in allowed_headers and "content-type" in allowed_headers
        answered = await http.post(url, json=run_input("x"), headers={**AUTH, "Origin": APP_ORIGIN})
        assert answered.status_code == 200
        assert answered.headers["access-control-allow-origin"] == APP_ORIGIN
        assert "x-orchestrator-run-id" in answered.headers["access-control-expose-headers"]
        refused = await http.post(url, json=run_input("x"), headers={"Origin": APP_ORIGIN})
        assert refused.status_code == 401  # (its page may read why)
        assert refused.headers["access-control-allow-origin"] == APP_ORIGIN
        evil = {**asked, "Origin": "http://evil.test"}
        assert (await http.options(url, headers=evil)).status_code == 403
        other = await http.post(
            url, json=run_input("x"), headers={**AUTH, "Origin": evil["Origin"]}
        )
        assert other.status_code == 403
        assert "access-control-allow-origin" not in other.headers


@autojump
async def test_enqueue_streams_the_queued_run_once_it_starts(tmp_path: Path) -> None:
    """Defect 7: a second input while the first runs, `enqueue`: a 200 stream of its run,
    which starts after the first and goes on from it."""
    async with memory_server(config(tmp_path)) as server, httpx.AsyncClient(timeout=60) as http:
        url = f"{base(server)}/ag-ui/slow"
        results: dict[str, list[Any]] = {}

        async def send(name: str, body: dict[str, Any]) -> None:
            response, events = await post(http, url, body)
            assert response.status_code == 200, response.text
            results[name] = events

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, "first", run_input("SLOW one", threadId="q-thread"))
            await trio.sleep(0.5)
            second = run_input(
                "second", threadId="q-thread", forwardedProps={"multitask": "enqueue"}
            )
            nursery.start_soon(send, "second", second)
    for name in ("first", "second"):
        kinds = [e.type for e in results[name]]
        assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED", (name, kinds)
    chat = [(m["role"], m.get("content", "")) for m in snapshot(results["second"])]
    assert chat[0] == ("user", "SLOW one")
    assert chat[1][0] == "assistant" and chat[1][1].endswith("done with SLOW one")
    assert chat[2] == ("user", "second")


@autojump
async def test_steer_snapshots_the_threads_real_conversation(tmp_path: Path) -> None:
    """Defect 8: `steer` into a running run: the snapshot is the thread's chat (the
    running run's input, then the steered message), not the steered message under the
    running input's id."""
    async with memory_server(config(tmp_path)) as server, httpx.AsyncClient(timeout=60) as http:
        url = f"{base(server)}/ag-ui/slow"
        first, _ = await post(http, url, run_input("hello", threadId="s-thread"))
        assert first.status_code == 200
        steered: list[Any] = []

        async def running() -> None:
            await post(http, url, run_input("SLOW one", threadId="s-thread"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(running)
            await trio.sleep(0.5)
            body = run_input("second via steer", threadId="s-thread", runId="client-steer")
            body["forwardedProps"] = {"multitask": "steer"}
            response, steered = await post(http, url, body)
            assert response.status_code == 200
    chat = snapshot(steered)
    assert [(m["role"], m.get("content", "")[:8]) for m in chat] == [
        ("user", "hello"),
        ("assistant", "working "),
        ("user", "SLOW one"),
        ("user", "second v"),
    ]
    assert len({m["id"] for m in chat}) == len(chat)
    assert chat[2]["id"] == "s-thread:2"  # the running input keeps its own id


@autojump
async def test_snapshots_hold_tool_calls_and_results_with_stable_ids(tmp_path: Path) -> None:
    """Defect 9: the planner's agent_spawn calls and their results are in the next
    turn's snapshot, as AG-UI assistant tool calls and tool messages, and each message
    keeps its id from one snapshot to the next. Defect 10: a reloaded page reads the
    same chat without starting a run (POST with no messages, or GET)."""
    async with memory_server(config(tmp_path)) as server, httpx.AsyncClient(timeout=60) as http:
        url = f"{base(server)}/ag-ui/planner"
        await post(http, url, run_input("trio", threadId="t-thread"))
        _, second = await post(http, url, run_input("and asyncio?", threadId="t-thread"))
        _, third = await post(http, url, run_input("thanks", threadId="t-thread"))
        runs_before = len(server.app.journal.records())
        history, loaded = await post(http, url, run_input("", threadId="t-thread", messages=[]))
        got = await http.get(url, params={"threadId": "t-thread"}, headers=AUTH)
        nobody = await http.get(url, params={"threadId": "never"}, headers=AUTH)
        assert len(server.app.journal.records()) == runs_before  # no run started
    chat = snapshot(second)
    roles = [m["role"] for m in chat]
    assert roles == ["user", "assistant", "tool", "tool", "assistant", "user"], roles
    calls = chat[1]["toolCalls"]
    assert [c["function"]["name"] for c in calls] == ["agent_spawn", "agent_spawn"]
    assert {m["toolCallId"] for m in chat[2:4]} == {c["id"] for c in calls}
    assert all(m["content"] for m in chat[2:4])
    assert [m["id"] for m in chat] == [f"t-thread:{n}" for n in range(6)]
    later = snapshot(third)
    assert later[: len(chat)] == chat  # the same messages, the same ids
    assert history.status_code == 200
    assert [e.type for e in loaded] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    whole = snapshot(loaded)
    assert whole[: len(later)] == later  # then the last run's own turns
    assert whole[-1]["role"] == "assistant" and "thanks" in whole[-1]["content"]
    assert got.status_code == 200 and got.json() == {"threadId": "t-thread", "messages": whole}
    assert nobody.json() == {"threadId": "never", "messages": []}


async def test_the_official_client_loads_a_threads_history_after_a_reload(
    tmp_path: Path,
) -> None:
    """Defect 10 with @ag-ui/client: a fresh `HttpAgent` on the thread, no messages,
    `runAgent()`: it holds the thread's chat, tool calls and results included."""
    need("@ag-ui/client")
    async with running_server(config(tmp_path)) as server, httpx.AsyncClient(timeout=60) as http:
        url = f"{base(server)}/ag-ui/planner"
        await post(http, url, run_input("trio", threadId="r-thread"))
        runs = len(server.app.journal.records())
        done = await trio.run_process(
            ["node", str(REPO / "clients" / "agui_history.mjs"), url, "a-secret", "r-thread"],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        assert len(server.app.journal.records()) == runs
    outcome = json.loads(done.stdout.decode().splitlines()[-1])
    assert outcome["ok"], (outcome, done.stderr.decode()[-2000:])
    got = outcome["messages"]
    assert [m["role"] for m in got] == ["user", "assistant", "tool", "tool", "assistant"]
    assert got[0]["content"] == "trio" and got[1]["toolCalls"] == ["agent_spawn"] * 2
    assert [m["id"] for m in got] == [f"r-thread:{n}" for n in range(5)]


@pytest.mark.parametrize("multitask", ["enqueue", "steer"])
async def test_the_official_client_sends_a_second_input_while_the_first_runs(
    tmp_path: Path, multitask: str
) -> None:
    """Defects 7 and 8 with @ag-ui/client: a second input while the first runs, with
    `enqueue` (its own run after the first) or `steer` (into the first): the client
    takes both streams, and the second's messages are the thread's real chat."""
    need("@ag-ui/client")
    async with running_server(config(tmp_path)) as server:
        url = f"{base(server)}/ag-ui/slow"
        done = await trio.run_process(
            ["node", str(REPO / "clients" / "agui_multitask.mjs"), url, "a-secret",
             f"{multitask}-thread", "SLOW one", "second", multitask, "500"],
            capture_stdout=True, capture_stderr=True, check=False,
        )  # fmt: skip
    outcome = json.loads(done.stdout.decode().splitlines()[-1])
    assert outcome["ok"], (outcome, done.stderr.decode()[-2000:])
    said = [(m["role"], (m["content"] or "")[:10]) for m in outcome["second"]]
    if multitask == "enqueue":  # the first exchange, then its own
        assert said[:3] == [("user", "SLOW one"), ("assistant", "working on"), ("user", "second")]
        assert said[3][0] == "assistant" and len(said) == 4, said
    else:  # the running run's input kept, the steered message after it
        assert said[:2] == [("user", "SLOW one"), ("user", "second")], said
