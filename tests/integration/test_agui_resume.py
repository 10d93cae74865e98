"""AG-UI segments of one run (docs/integrations.md, "AG-UI"): calls that wait for a
person end a segment with RUN_FINISHED `outcome: "interrupt"`; `resume[]` answers
them — several at once, a deny with a reason, edited args — and the same decision
through `/ws` wins if it came first; a client that dropped reconnects after the last
seq it saw and gets exactly the rest, across a server restart."""

from __future__ import annotations

import signal
from contextlib import aclosing
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from websockets.trio.client import connect

from tests.integration.test_server_lifecycle import start_serve_process
from tests.memory_server import autojump, memory_server
from tests.server_helpers import demo_config, replay, request

pytest.importorskip("ag_ui.core", reason="AG-UI needs the `agui` extra: pip install -e '.[dev]'")

from tests.integration.test_agui import events_of, run_input

TOKENS = [{"name": "ann", "token": "a-secret", "role": "user"}]
AUTH = {"Authorization": "Bearer a-secret"}


def writer(path: str) -> dict[str, Any]:
    """A child whose write_file waits for approval (edits allowed)."""
    call = {"name": "write_file", "args": {"path": path, "content": path.upper()}}
    return {
        "description": f"writes {path}",
        "instructions": "w",
        "tools": ["write_file", "read_file"],
        "approval": ["write_file"],
        "approval_edit": True,
        "script": {"turns": [{"calls": [call]}, {"say": "wrote: {results}"}]},
    }


AGENTS: dict[str, dict[str, Any]] = {
    "pair": {
        "description": "two writers at once",
        "instructions": "p",
        "tools": ["agent_spawn"],
        "script": {
            "turns": [
                {
                    "say": "Two writers.",
                    "calls": [
                        {"name": "agent_spawn", "args": {"agent_id": "writer_a", "task": "a"}},
                        {"name": "agent_spawn", "args": {"agent_id": "writer_b", "task": "b"}},
                    ],
                },
                {"say": "Both: {results}"},
            ]
        },
    },
    # Both writes are `call_0`: the scripted model numbers each agent's calls from 0
    # (regression: the desk knew a run's waiting calls by id alone, and the second
    # replaced the first, which could then only time out).
    "writer_a": writer("a.txt"),
    "writer_b": writer("b.txt"),
}


def base(server: Any) -> str:
    return f"http://{server.host}:{server.port}"


async def segment(http: httpx.AsyncClient, url: str, body: dict[str, Any]) -> list[Any]:
    """One AG-UI request's events, to the end of its stream."""
    async with http.stream("POST", url, json=body, headers=AUTH) as response:
        assert response.status_code == 200, await response.aread()
        return [event async for event in events_of(response)]


@autojump
async def test_two_interrupts_answered_in_one_resume_each_run_once(tmp_path: Path) -> None:
    config = demo_config(tmp_path, server={"ag_ui": True, "tokens": TOKENS}, extra_agents=AGENTS)
    async with memory_server(config) as server, httpx.AsyncClient(timeout=30) as http:
        url = f"{base(server)}/ag-ui/pair"
        first = await segment(http, url, run_input("go"))
        last = first[-1]
        assert last.type == "RUN_FINISHED" and last.outcome.type == "interrupt"
        interrupts = sorted(last.outcome.interrupts, key=lambda i: i.metadata["name"])
        assert len(interrupts) == 2
        by_path = {i.metadata["path"].rsplit("/", 1)[-1]: i for i in interrupts}
        assert set(by_path) == {"writer_a", "writer_b"}
        for item in interrupts:
            assert item.reason == "tool_approval" and item.metadata["name"] == "write_file"
            assert item.subagent_run_id == item.metadata["agentKey"]
            assert item.response_schema["properties"]["args"] == {"type": "object"}
        # The children above the calls end this segment suspended, owning their calls.
        suspended = [e for e in first if e.type == "SUBAGENT_FINISHED"]
        assert {e.outcome.type for e in suspended} == {"suspended"}
        assert sorted(i for e in suspended for i in e.outcome.interrupt_ids or []) == sorted(
            i.id for i in interrupts
        )
        run_id = first[0].metadata["runId"]

        resume = [
            {
                "interruptId": by_path["writer_a"].id,
                "status": "resolved",
                "payload": {"approved": True, "args": {"path": "a.txt", "content": "edited"}},
            },
            {
                "interruptId": by_path["writer_b"].id,
                "status": "resolved",
                "payload": {"approved": False, "reason": "not b"},
            },
        ]
        second = await segment(
            http, url, run_input("", runId="client-run-2", messages=[], resume=resume)
        )
        async with connect(server.url, additional_headers=AUTH) as ws:
            everything = await replay(server.url, run_id, headers=AUTH)
            (listed,) = (await request(ws, op="runs", id=1))["runs"]

    assert second[0].type == "RUN_STARTED" and second[0].run_id == "client-run-2"
    assert second[0].metadata["seq"] == last.metadata["seq"]
    told = next(e for e in second if e.type == "CUSTOM" and e.name == "orchestrator.RESUME")
    assert [a["accepted"] for a in told.value["answers"]] == [True, True]
    assert second[-1].type == "RUN_FINISHED" and second[-1].outcome.type == "success"
    assert listed["status"] == "completed"
    # Each call ran once as answered: a's with the edited args, b's denied with its reason.
    assert (tmp_path / "workspace" / "a.txt").read_text() == "edited"
    assert not (tmp_path / "workspace" / "b.txt").exists()
    resolved = [e for e in everything if e["type"] == "APPROVAL_RESOLVED"]
    assert sorted(r["data"]["decision"] for r in resolved) == ["approve", "deny"]
    assert all(r["data"]["by"] == "ann" for r in resolved)
    denied = next(r for r in resolved if r["data"]["decision"] == "deny")
    assert denied["data"]["reason"] == "not b"
    asks = [e for e in everything if e["type"] == "APPROVAL_REQUESTED"]
    assert [a["data"]["toolCallId"] for a in asks] == ["call_0", "call_0"]
    for asked in asks:  # each call got one result: it ran (or was refused) once
        results = [
            e
            for e in everything
            if e["type"] == "TOOL_RESULT"
            and e["source"] == asked["source"]
            and e["data"]["toolCallId"] == asked["data"]["toolCallId"]
        ]
        assert len(results) == 1
    # The second segment goes on where the first ended: nothing twice, in order, to the end.
    cursor = last.metadata["seq"]
    assert max(e.metadata["seq"] for e in first) == cursor
    later = [e.metadata["seq"] for e in second if e.metadata["seq"] != cursor]
    assert later == sorted(later) and later[0] > cursor
    assert second[-1].metadata["seq"] == everything[-1]["seq"]


@autojump
async def test_the_first_answer_wins_across_doors(tmp_path: Path) -> None:
    config = demo_config(tmp_path, server={"ag_ui": True, "tokens": TOKENS}, extra_agents=AGENTS)
    async with memory_server(config) as server, httpx.AsyncClient(timeout=30) as http:
        url = f"{base(server)}/ag-ui/pair"
        first = await segment(http, url, run_input("go"))
        items = {i.metadata["path"].rsplit("/", 1)[-1]: i for i in first[-1].outcome.interrupts}
        item = items["writer_a"]
        run_id, call_id = item.metadata["runId"], item.metadata["toolCallId"]
        async with connect(server.url, additional_headers=AUTH) as ws:
            answer = {"runId": run_id, "toolCallId": call_id, "decision": "deny", "reason": "ws"}
            # Both writers wait on `call_0`: an answer must say whose.
            refused = await request(ws, op="approve", id=1, **answer)
            assert (
                refused["code"] == "bad_request" and "say which with agentKey" in refused["message"]
            )
            answer["agentKey"] = item.metadata["agentKey"]
            assert (await request(ws, op="approve", id=2, **answer))["op"] == "ack"
        resume = [
            {"interruptId": i.id, "status": "resolved", "payload": True} for i in items.values()
        ]
        second = await segment(http, url, run_input("", messages=[], resume=resume))
    told = next(e for e in second if e.type == "CUSTOM" and e.name == "orchestrator.RESUME")
    answers = {a["interruptId"]: a for a in told.value["answers"]}
    refused = answers[item.id]
    assert not refused["accepted"] and refused["code"] == "not_found"
    assert "already answered (deny)" in refused["message"]
    assert answers[items["writer_b"].id]["accepted"]
    resolved = [e for e in first + second if e.type == "CUSTOM" and e.name.endswith("RESOLVED")]
    assert sorted((e.value["decision"], e.value.get("reason")) for e in resolved) == [
        ("approve", None),
        ("deny", "ws"),
    ]
    assert second[-1].type == "RUN_FINISHED" and second[-1].outcome.type == "success"
    assert not (tmp_path / "workspace" / "a.txt").exists()
    assert (tmp_path / "workspace" / "b.txt").read_text() == "B.TXT"


@autojump
async def test_bad_resumes_are_refused_saying_why(tmp_path: Path) -> None:
    config = demo_config(tmp_path, server={"ag_ui": True, "tokens": TOKENS}, extra_agents=AGENTS)
    async with memory_server(config) as server, httpx.AsyncClient(timeout=30) as http:
        url = f"{base(server)}/ag-ui/writer_a"
        first = await segment(http, url, run_input("go"))
        (item,) = first[-1].outcome.interrupts
        run_id = item.metadata["runId"]

        async def refused(body: dict[str, Any], path: str = "writer_a") -> tuple[int, str]:
            response = await http.post(f"{base(server)}/ag-ui/{path}", json=body, headers=AUTH)
            return response.status_code, str(response.json()["error"])

        entry = {"interruptId": "made-up", "status": "resolved", "payload": True}
        assert await refused(run_input("", resume=[entry])) == (
            400,
            "resume.0.interruptId: not an interrupt of this server",
        )
        status, text = await refused(run_input("", forwardedProps={"runId": "nope"}))
        assert (status, text) == (404, "no run 'nope'")
        status, text = await refused(run_input("", forwardedProps={"runId": run_id}), "pair")
        assert status == 404 and "POST /ag-ui/writer_a" in text
        props = {"runId": run_id, "afterSeq": 10_000}
        status, text = await refused(run_input("", forwardedProps=props))
        assert status == 400 and "past the run's last event" in text
        # A payload that is not an answer changes nothing: the call still waits.
        bad = [{"interruptId": item.id, "status": "resolved", "payload": {"ok": 1}}]
        second = await segment(http, url, run_input("", resume=bad))
        told = next(e for e in second if e.type == "CUSTOM" and e.name == "orchestrator.RESUME")
        assert told.value["answers"][0]["code"] == "bad_request"
        assert second[-1].outcome.type == "interrupt"
        (again,) = second[-1].outcome.interrupts
        assert again.tool_call_id == item.tool_call_id
        cancel = [{"interruptId": again.id, "status": "cancelled"}]
        third = await segment(http, url, run_input("", resume=cancel))
    assert third[-1].outcome.type == "success"
    resolved = next(e for e in third if e.type == "CUSTOM" and e.name.endswith("RESOLVED"))
    assert resolved.value["decision"] == "deny"
    assert resolved.value["reason"] == "cancelled by the client"


async def test_a_dropped_client_resumes_exactly_by_seq_across_a_restart(tmp_path: Path) -> None:
    config_path = tmp_path / "server.yaml"
    demo_config(
        tmp_path,
        token_delay=0.01,
        storage="sqlite:///journal.db",
        server={"ag_ui": True, "tokens": TOKENS},
    )
    seen: list[Any] = []
    async with trio.open_nursery() as nursery:
        proc, url = await start_serve_process(nursery, config_path)
        http_url = url.replace("ws://", "http://").removesuffix("/ws")
        async with (
            httpx.AsyncClient(timeout=30) as http,
            http.stream(
                "POST", f"{http_url}/ag-ui/planner", json=run_input("q"), headers=AUTH
            ) as response,
        ):
            run_id = response.headers["x-orchestrator-run-id"]
            async with aclosing(events_of(response)) as events:
                async for event in events:
                    seen.append(event)
                    if event.type == "SUBAGENT_FINISHED":
                        break  # the client drops here, mid-run
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            await proc.wait()
    cursor = max(e.metadata["seq"] for e in seen)

    async with trio.open_nursery() as nursery:
        proc, url = await start_serve_process(nursery, config_path)
        http_url = url.replace("ws://", "http://").removesuffix("/ws")
        try:
            async with httpx.AsyncClient(timeout=30) as http:
                body = run_input(
                    "", messages=[], forwardedProps={"runId": run_id, "afterSeq": cursor}
                )
                rest = await segment(http, f"{http_url}/ag-ui/planner", body)
            everything = await replay(url, run_id, headers=AUTH)
        finally:
            proc.send_signal(signal.SIGTERM)
    assert rest[0].type == "RUN_STARTED" and rest[0].metadata["seq"] == cursor
    assert rest[-1].type == "RUN_FINISHED" and rest[-1].outcome.type == "success"
    # Still open at the cursor, re-opened under their ids: the other researcher.
    reopened = [e for e in rest if e.type == "SUBAGENT_STARTED" and e.metadata["seq"] == cursor]
    assert reopened and all(e.subagent_run_id for e in reopened)
    after = [e.metadata["seq"] for e in rest if e.metadata["seq"] > cursor]
    assert after[0] == cursor + 1
    expected = [e["seq"] for e in everything if e["seq"] > cursor]
    assert after == sorted(after) and set(after) <= set(expected) and after[-1] == expected[-1]
    # No gap and nothing twice: the text streamed after the cursor is exactly the run's.
    streamed = "".join(e.delta for e in rest if e.type == "TEXT_MESSAGE_CONTENT")
    journaled = "".join(
        e["data"].get("delta") or ""
        for e in everything
        if e["seq"] > cursor and e["type"] == "REASONING" and not e["last"]
    )
    assert streamed == journaled and streamed
    assert any(e["type"] == "RUN_RESUMED" for e in everything)
