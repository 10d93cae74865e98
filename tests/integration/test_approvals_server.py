"""Approvals through the real WebSocket protocol against a real server: a call three
levels down waits while the tree goes on; `approve`, `pending`, who may answer, and
every wrong answer (a clear error frame, nothing changes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from websockets.trio.client import ClientConnection, connect

from tests.memory_server import autojump, memory_server
from tests.server_helpers import demo_config, read_until_end, recv

pytestmark = autojump


def agent(
    turns: list[dict[str, Any]], tools: list[str], *, token_delay: float = 0.0, **extra: Any
) -> dict[str, Any]:
    """A scripted test agent's YAML (`token_delay`: seconds a word)."""
    return {
        "description": "test agent",
        "instructions": "test",
        "tools": tools,
        "script": {"turns": turns, **({"token_delay": token_delay} if token_delay else {})},
        **extra,
    }


def spawn(agent_id: str) -> dict[str, Any]:
    return {"name": "agent_spawn", "args": {"agent_id": agent_id, "task": "t"}}


AGENTS = {
    # top → mid → inner → deep: deep's write_file (depth 3) waits; talker answers meanwhile.
    "top": agent(
        [{"calls": [spawn("mid"), spawn("talker")]}, {"say": "top got: {results}"}],
        ["agent_spawn"],
    ),
    "mid": agent([{"calls": [spawn("inner")]}, {"say": "mid got: {results}"}], ["agent_spawn"]),
    "inner": agent([{"calls": [spawn("deep")]}, {"say": "inner: {results}"}], ["agent_spawn"]),
    "deep": agent(
        [
            {"calls": [{"name": "write_file", "args": {"path": "a.txt", "content": "A"}}]},
            {"say": "deep: {results}"},
        ],
        ["write_file"],
        approval=["write_file"],
        approval_edit=True,
    ),
    "talker": agent([{"say": "one two three four five"}], []),
}
TOKENS = [
    {"name": "ann", "token": "ann-secret", "role": "user"},
    {"name": "bob", "token": "bob-secret", "role": "user"},
    {"name": "eve", "token": "eve-secret", "role": "viewer"},
    {"name": "ops", "token": "ops-secret", "role": "admin"},
]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class Client:
    """A connection that keeps the events it reads while it waits for replies."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self.replies: dict[Any, dict[str, Any]] = {}
        self.end: dict[str, Any] | None = None

    async def ask(self, **op: Any) -> dict[str, Any]:
        await self.ws.send(json.dumps(op))
        while op["id"] not in self.replies:
            await self._read_one()
        return self.replies.pop(op["id"])

    async def finish(self) -> dict[str, Any]:
        """Read to the run's `end`; the end frame."""
        while self.end is None:
            await self._read_one()
        return self.end

    async def until(self, kind: str, count: int = 1) -> list[dict[str, Any]]:
        while len(found := [e for e in self.events if e["type"] == kind]) < count:
            await self._read_one()
        return found

    async def _read_one(self) -> None:
        frame = await recv(self.ws)
        if frame["op"] == "events":
            self.events.extend(frame["events"])
        elif frame["op"] == "end":
            self.end = frame
        elif frame.get("id") is not None:
            self.replies[frame["id"]] = frame


async def test_a_call_three_levels_down_waits_and_is_answered_once(tmp_path: Path) -> None:
    config = demo_config(
        tmp_path, extra_agents=AGENTS, server={"tokens": TOKENS}, limits={"max_depth": 4}
    )
    async with (
        memory_server(config) as server,
        connect(server.url, additional_headers=bearer("ann-secret")) as ann_ws,
        connect(server.url, additional_headers=bearer("bob-secret")) as bob_ws,
        connect(server.url, additional_headers=bearer("eve-secret")) as eve_ws,
    ):
        ann, bob, eve = Client(ann_ws), Client(bob_ws), Client(eve_ws)
        ack = await ann.ask(op="run", id="r", agent="top", input="go")
        run_id = ack["runId"]
        (asked,) = await ann.until("APPROVAL_REQUESTED")
        assert asked["source"]["depth"] == 3 and asked["source"]["agentId"] == "deep"
        assert asked["source"]["path"].endswith("/mid/inner/deep")
        call_id = asked["data"]["toolCallId"]
        # The rest of the tree goes on while the call waits.
        await ann.until("AGENT_RESULT")
        talker_done = [e for e in ann.events if e["type"] == "AGENT_RESULT"]
        assert talker_done[0]["source"]["agentId"] == "talker"

        # Who sees what waits: the owner and a viewer; another user sees nothing.
        listed = await ann.ask(op="pending", id="p1")
        (item,) = listed["approvals"]
        assert listed["more"] is False
        assert item["runId"] == run_id and item["toolCallId"] == call_id
        assert item["agentKey"] == asked["source"]["agentKey"]
        assert item["path"] == asked["source"]["path"] and item["depth"] == 3
        assert item["name"] == "write_file" and item["args"] == {"path": "a.txt", "content": "A"}
        assert item["edit"] is True and item["timeoutAt"] == asked["data"]["timeoutAt"]
        assert "parameters" not in item and item["owner"] == "ann"
        assert (await eve.ask(op="pending", id="p2"))["approvals"] == listed["approvals"]
        assert (await bob.ask(op="pending", id="p3"))["approvals"] == []
        assert (await bob.ask(op="pending", id="p4", runId=run_id))["code"] == "not_found"

        # Who may answer: not a viewer, not another user.
        answer = {"op": "approve", "runId": run_id, "toolCallId": call_id, "decision": "approve"}
        refused = await eve.ask(id="e1", **answer)
        assert refused["code"] == "unauthorized" and "'approve' is refused" in refused["message"]
        hidden = await bob.ask(id="b1", **answer)
        assert hidden["code"] == "not_found" and hidden["message"] == f"unknown run {run_id!r}"

        # Wrong answers change nothing.
        bad = await ann.ask(id="a1", **{**answer, "args": {"path": 3, "content": "x"}})
        assert bad["code"] == "bad_request" and "args are not valid" in bad["message"]
        assert "path" in bad["message"]
        unknown = await ann.ask(id="a2", **{**answer, "toolCallId": "call-nope"})
        assert unknown["code"] == "not_found" and "no tool call 'call-nope'" in unknown["message"]
        wrong = await ann.ask(id="a3", **{**answer, "decision": "maybe"})
        assert wrong["code"] == "bad_request"
        assert len((await ann.ask(op="pending", id="p5"))["approvals"]) == 1

        edited = {"path": "b.txt", "content": "B"}
        assert (await ann.ask(id="a4", reason="ok", args=edited, **answer))["op"] == "ack"
        again = await ann.ask(id="a5", **{**answer, "decision": "deny"})
        assert again["code"] == "not_found" and "already answered (approve)" in again["message"]
        events, end = await read_until_end(ann_ws, ack["sub"])
        events = ann.events + events
    assert end["status"] == "completed"
    (resolved,) = [e for e in events if e["type"] == "APPROVAL_RESOLVED"]
    assert resolved["source"] == asked["source"]
    assert resolved["data"] == {
        "toolCallId": call_id,
        "decision": "approve",
        "by": "ann",
        "reason": "ok",
        "edited": True,
        "args": edited,
    }
    results = [e for e in events if e["type"] == "TOOL_RESULT" and e["source"] == asked["source"]]
    assert len(results) == 1 and not results[0]["data"]["isError"]
    assert (tmp_path / "workspace" / "b.txt").read_text() == "B"
    assert not (tmp_path / "workspace" / "a.txt").exists()
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


async def test_a_denied_call_and_a_later_watcher_see_the_same_story(tmp_path: Path) -> None:
    config = demo_config(tmp_path, extra_agents=AGENTS)
    async with memory_server(config) as server, connect(server.url, max_size=None) as ws:
        client = Client(ws)
        ack = await client.ask(op="run", id="r", agent="top", input="go")
        run_id = ack["runId"]
        (asked,) = await client.until("APPROVAL_REQUESTED")
        # A client that connects later finds the request in the journal and in `pending`.
        async with connect(server.url) as late_ws:
            late = Client(late_ws)
            watch = await late.ask(op="subscribe", id="s", runId=run_id, detail="status")
            assert watch["op"] == "ack"
            (seen,) = await late.until("APPROVAL_REQUESTED")
            assert seen == asked
            (item,) = (await late.ask(op="pending", id="p", runId=run_id))["approvals"]
            assert item["toolCallId"] == asked["data"]["toolCallId"]
            no = {"op": "approve", "runId": run_id, "toolCallId": item["toolCallId"]}
            reply = await late.ask(id="d", decision="deny", reason="not that file", **no)
            assert reply["op"] == "ack"
            await late.until("APPROVAL_RESOLVED")
        events, end = await read_until_end(ws, ack["sub"])
        events = client.events + events
    assert end["status"] == "completed"
    (resolved,) = [e for e in events if e["type"] == "APPROVAL_RESOLVED"]
    assert resolved["data"]["decision"] == "deny" and resolved["data"]["by"] == "client"
    (result,) = [e for e in events if e["type"] == "TOOL_RESULT" and e["source"] == asked["source"]]
    assert result["data"]["isError"] is True
    assert result["data"]["content"] == (
        "tool 'write_file' was not run: denied by client: not that file"
    )
    assert "denied by client: not that file" in events[-1]["data"]["result"]
    assert not (tmp_path / "workspace" / "a.txt").exists()


async def test_cancelling_an_ancestor_of_a_waiting_call_resolves_it_cancelled(
    tmp_path: Path,
) -> None:
    config = demo_config(tmp_path, extra_agents=AGENTS)
    async with memory_server(config) as server, connect(server.url, max_size=None) as ws:
        client = Client(ws)
        ack = await client.ask(op="run", id="r", agent="top", input="go")
        run_id = ack["runId"]
        (asked,) = await client.until("APPROVAL_REQUESTED")
        (mid,) = [
            e["source"]["agentKey"]
            for e in client.events
            if e["type"] == "AGENT_STARTED" and e["source"]["agentId"] == "mid"
        ]
        reply = await client.ask(op="cancel", id="c", runId=run_id, agentKey=mid, reason="no")
        assert reply["op"] == "ack"
        (resolved,) = await client.until("APPROVAL_RESOLVED")
        assert (await client.ask(op="pending", id="p"))["approvals"] == []
        late = await client.ask(
            op="approve",
            id="a",
            runId=run_id,
            toolCallId=asked["data"]["toolCallId"],
            decision="approve",
        )
        end = await client.finish()
    assert resolved["source"] == asked["source"]
    assert resolved["data"] == {
        "toolCallId": asked["data"]["toolCallId"],
        "decision": "cancelled",
        "by": "user",
        "reason": "no",
        "edited": False,
    }
    assert late["code"] == "not_found"  # answered (cancelled), or the run has ended since
    assert "already answered (cancelled)" in late["message"] or "not running" in late["message"]
    assert end["status"] == "completed"
    assert "cancelled by the user: no" in client.events[-1]["data"]["result"]
    assert not (tmp_path / "workspace" / "a.txt").exists()
