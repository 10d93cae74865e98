"""Threads on `/ws` against a real server and a fake provider that records what it is
sent (docs/threads.md): the second run's request holds the first exchange, once and
in order; a child continued by its agentKey; each multitask policy; the `threads` op;
tenancy; and a thread that goes on after a restart."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml
from websockets.trio.client import ClientConnection, connect

from orchestrator.config import load_config
from orchestrator.server.app import RunningServer, serve
from tests.fakes.provider_server import FakeOpenAI, Reply, serve_fake_openai
from tests.helpers import REPO, eventually
from tests.integration.test_approvals_server import Client, bearer
from tests.integration.test_official_clients import need
from tests.integration.test_server_lifecycle import cli
from tests.memory_server import autojump, memory_server
from tests.server_helpers import demo_config, read_until_end, replay, running_server

pytestmark = pytest.mark.trio

TOKENS = [
    {"name": "ann", "token": "ann-secret", "role": "user"},
    {"name": "bob", "token": "bob-secret", "role": "user"},
    {"name": "eve", "token": "eve-secret", "role": "viewer"},
]


def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
    """`chat` answers its last user message (`hold`: it never finishes); `lead` asks
    a `helper` once (`again: …`: the newest helper of an earlier run it may continue);
    `helper` answers what it was asked (`hold`: it never finishes)."""
    said = [m["content"] for m in messages if m["role"] == "user"]
    results = [m["content"] for m in messages if m["role"] == "tool"]
    if role == "chat":
        if said[-1].startswith("hold"):
            return Reply("thinking it over", hang=True)
        return Reply(f"you said {said[-1]}")
    if role == "lead":
        if messages[-1]["role"] == "user":
            ask: dict[str, Any] = {"agent_id": "helper", "task": said[-1]}
            if said[-1].startswith("again: "):
                ask.update(
                    task=said[-1][len("again: ") :],
                    agent_key=(earlier_keys(body) or ["agent:helper:none"])[0],
                )
            return Reply("asking", calls=[("agent_spawn", ask)])
        return Reply(f"lead: {results[-1]}")
    if role == "keeper":
        if messages[-1]["role"] == "user":
            return Reply(
                "noting", calls=[("write_file", {"path": "note.txt", "content": said[-1]})]
            )
        return Reply(f"keeper: {results[-1]}")
    if role == "helper":
        if said[-1].startswith("hold"):
            return Reply("helping slowly", hang=True)
        return Reply(f"helper on {said[-1]}")
    raise AssertionError(role)


def earlier_keys(body: dict[str, Any]) -> list[str]:
    """The agentKeys `agent_spawn`'s schema lets the model continue (none: no key)."""
    spawn = next(t["function"] for t in body["tools"] if t["function"]["name"] == "agent_spawn")
    key = spawn["parameters"]["properties"].get("agent_key")
    return list(key["enum"]) if key else []


AGENTS = {
    "chat": {"description": "Chats.", "instructions": "ROLE: chat\nAnswer."},
    "lead": {
        "description": "Leads.",
        "instructions": "ROLE: lead\nDelegate.",
        "tools": ["agent_spawn"],
    },
    "helper": {"description": "Helps.", "instructions": "ROLE: helper\nHelp."},
    "keeper": {
        "description": "Keeps notes, once a person allows it.",
        "instructions": "ROLE: keeper\nWrite it down.",
        "tools": ["write_file"],
        "approval": ["write_file"],
    },
}


def write(
    tmp_path: Path, fake: FakeOpenAI, *, tokens: bool, storage: str, doors: bool = False
) -> Path:
    sub = tmp_path / "subagents"
    sub.mkdir(exist_ok=True)
    for agent_id, spec in AGENTS.items():
        (sub / f"{agent_id}.yaml").write_text(yaml.safe_dump(spec))
    server: dict[str, Any] = {"host": "127.0.0.1", "port": 0}
    if tokens:
        server["tokens"] = TOKENS
    if doors:
        server.update(ag_ui=True, a2a=True, mcp=True)
    data = {
        "server": server,
        "storage": storage,
        "models": {"default": {"provider": "openai", "base_url": fake.base_url, "model": "fake"}},
        "subagents_dir": "subagents",
        "limits": {"max_depth": 3},
        "tools": {"root": "workspace"},
    }
    (tmp_path / "workspace").mkdir(exist_ok=True)
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@asynccontextmanager
async def server_with_fake(
    tmp_path: Path, *, tokens: bool = False, storage: str = "memory://", doors: bool = False
) -> AsyncIterator[tuple[RunningServer, FakeOpenAI]]:
    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, brain, pause=0.001)
        config = load_config(write(tmp_path, fake, tokens=tokens, storage=storage, doors=doors))
        server: RunningServer = await nursery.start(functools.partial(serve, config, port=0))
        try:
            yield server, fake
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                await server.shutdown()
            nursery.cancel_scope.cancel()


def asked(fake: FakeOpenAI, role: str) -> list[tuple[str, str]]:
    """The conversation of the last request `role`'s agent made: (role, text) each."""
    body = next(
        b
        for b in reversed(fake.requests)
        if b["messages"][0]["content"].startswith(f"ROLE: {role}")
    )
    return [(m["role"], m.get("content") or "") for m in body["messages"][1:]]


async def finished(ws: ClientConnection, ack: dict[str, Any]) -> list[dict[str, Any]]:
    assert ack["op"] == "ack", ack
    events, end = await read_until_end(ws, ack["sub"])
    assert end["status"] == "completed", (end, events[-1])
    return events


@autojump
async def test_the_next_run_of_a_thread_starts_from_its_conversation(tmp_path: Path) -> None:
    async with server_with_fake(tmp_path) as (server, fake), connect(server.url) as ws:
        client = Client(ws)
        first = await client.ask(op="run", id="1", agent="chat", input="my name is Ann")
        thread = first["threadId"]
        assert thread.startswith("thread-")
        events = await finished(ws, first)
        assert events[0]["data"] == {
            "agentId": "chat",
            "input": "my name is Ann",
            "threadId": thread,
        }

        second = await client.ask(op="run", id="2", threadId=thread, input="what is my name?")
        assert second["threadId"] == thread and second["runId"] != first["runId"]
        events = await finished(ws, second)
        assert events[0]["data"] == {
            "agentId": "chat",  # (left out: the thread's)
            "input": "what is my name?",
            "threadId": thread,
            "previousRunId": first["runId"],
        }
        assert asked(fake, "chat") == [
            ("user", "my name is Ann"),
            ("assistant", "you said my name is Ann"),
            ("user", "what is my name?"),
        ]
        third = await client.ask(op="run", id="3", threadId=thread, input="and now?")
        await finished(ws, third)
        assert [m for _, m in asked(fake, "chat")] == [
            "my name is Ann",
            "you said my name is Ann",
            "what is my name?",
            "you said what is my name?",
            "and now?",
        ]
        # A thread id a client chose: a new thread of that id, then it goes on.
        mine = await client.ask(op="run", id="4", agent="chat", threadId="chat-42", input="hi")
        assert mine["threadId"] == "chat-42"
        await finished(ws, mine)
        listed = await client.ask(op="threads", id="t")
        assert [(t["threadId"], len(t["runs"])) for t in listed["threads"]] == [
            ("chat-42", 1),
            (thread, 3),
        ]
        assert listed["threads"][1]["firstInput"] == "my name is Ann"
        one = await client.ask(op="threads", id="t1", threadId=thread)
        detail = one["threads"][0]["detail"]
        assert [r["runId"] for r in detail] == [first["runId"], second["runId"], third["runId"]]
        assert detail[1]["previousRunId"] == first["runId"] and detail[1]["threadId"] == thread
        assert [r.get("answer") for r in detail] == [  # the thread as a chat
            "you said my name is Ann",
            "you said what is my name?",
            "you said and now?",
        ]


@autojump
async def test_a_child_of_the_thread_is_continued_by_its_agent_key(tmp_path: Path) -> None:
    async with server_with_fake(tmp_path) as (server, fake), connect(server.url) as ws:
        client = Client(ws)
        first = await client.ask(op="run", id="1", agent="lead", input="find the capital")
        events = await finished(ws, first)
        helper = next(e["source"] for e in events if e["type"] == "AGENT_STARTED")
        follow = await client.ask(
            op="run",
            id="2",
            threadId=first["threadId"],
            agentKey=helper["agentKey"],
            input="and its population?",
        )
        events = await finished(ws, follow)
        assert events[0]["data"]["continues"] == {
            "runId": first["runId"],
            "agentKey": helper["agentKey"],
        }
        assert events[0]["data"]["agentId"] == "helper"
        assert asked(fake, "helper") == [
            ("user", "find the capital"),
            ("assistant", "helper on find the capital"),
            ("user", "and its population?"),
        ]
        bad = await client.ask(
            op="run", id="3", threadId=first["threadId"], agentKey="agent:helper:nope", input="x"
        )
        assert bad["op"] == "error" and bad["code"] == "not_found", bad


@autojump
async def test_agent_spawn_continues_a_child_of_an_earlier_run(tmp_path: Path) -> None:
    """A parent asks run 1's helper a follow-up in run 2 (`agent_spawn` with
    `agent_key`), and run 3 (after a restart) continues that continuation."""
    storage = "sqlite:///data/journal.db"
    async with server_with_fake(tmp_path, storage=storage) as (server, fake):
        async with connect(server.url) as ws:
            client = Client(ws)
            first = await client.ask(op="run", id="1", agent="lead", input="find the capital")
            thread = first["threadId"]
            events = await finished(ws, first)
            helper = next(e["source"] for e in events if e["type"] == "AGENT_STARTED")
            assert earlier_keys(fake.requests[0]) == []  # nothing earlier to continue
            second = await client.ask(
                op="run", id="2", threadId=thread, input="again: and its population?"
            )
            events = await finished(ws, second)
        lead = next(b for b in reversed(fake.requests) if "ROLE: lead" in str(b["messages"][0]))
        assert earlier_keys(lead) == [helper["agentKey"]]
        spawn = next(t for t in lead["tools"] if t["function"]["name"] == "agent_spawn")
        assert f"{helper['agentKey']} (helper), asked: find the capital" in str(spawn)
        started = next(e for e in events if e["type"] == "AGENT_STARTED")
        assert started["data"]["continues"] == {
            "runId": first["runId"],
            "agentKey": helper["agentKey"],
        }
        assert started["source"]["agentKey"] != helper["agentKey"]  # a new agent of run 2
        assert asked(fake, "helper") == [
            ("user", "find the capital"),
            ("assistant", "helper on find the capital"),
            ("user", "and its population?"),
        ]
        assert events[-1]["data"]["result"] == "lead: helper on and its population?"
    async with server_with_fake(tmp_path, storage=storage) as (server, fake):
        async with connect(server.url) as ws:
            client = Client(ws)
            third = await client.ask(
                op="run", id="3", threadId=thread, input="again: and its size?"
            )
            await finished(ws, third)
        lead = next(b for b in fake.requests if "ROLE: lead" in str(b["messages"][0]))
        # run 2's helper stands for run 1's, which it continued
        assert earlier_keys(lead) == [started["source"]["agentKey"]]
        assert [text for _, text in asked(fake, "helper")] == [
            "find the capital",
            "helper on find the capital",
            "and its population?",
            "helper on and its population?",
            "and its size?",
        ]


@autojump
async def test_a_continued_child_goes_on_after_a_restart(tmp_path: Path) -> None:
    """A child that continues an earlier agent, cut off by a restart, is rebuilt with
    that agent's conversation before its own."""
    storage = "sqlite:///data/journal.db"

    def helpers(fake: FakeOpenAI) -> int:
        return sum("ROLE: helper" in str(b["messages"][0]) for b in fake.requests)

    async with (
        server_with_fake(tmp_path, storage=storage) as (server, fake),
        connect(server.url) as ws,
    ):
        client = Client(ws)
        first = await client.ask(op="run", id="1", agent="lead", input="find the capital")
        await finished(ws, first)
        second = await client.ask(
            op="run", id="2", threadId=first["threadId"], input="again: hold the line"
        )
        assert second["op"] == "ack", second
        await eventually(lambda: helpers(fake) == 2)
    async with server_with_fake(tmp_path, storage=storage) as (server, fake):
        await eventually(lambda: helpers(fake) == 1)
        assert asked(fake, "helper") == [
            ("user", "find the capital"),
            ("assistant", "helper on find the capital"),
            ("user", "hold the line"),
        ]
        async with connect(server.url) as ws:
            client = Client(ws)
            await client.ask(op="cancel", id="c", runId=second["runId"])


@autojump
async def test_agent_spawn_refuses_an_agent_key_it_cannot_continue(tmp_path: Path) -> None:
    async with server_with_fake(tmp_path) as (server, _), connect(server.url) as ws:
        client = Client(ws)
        first = await client.ask(op="run", id="1", agent="lead", input="again: what?")
        events = await finished(ws, first)
        result = next(e for e in events if e["type"] == "TOOL_RESULT")
        assert result["data"]["isError"] is True
        assert "agent_key" in result["data"]["content"], result


async def hold(client: Client, thread: str | None = None) -> dict[str, Any]:
    """A run of `chat` that never finishes by itself (the fake hangs), seen running."""
    extra = {"threadId": thread} if thread else {"agent": "chat"}
    ack = await client.ask(op="run", id=f"hold-{thread}", input="hold on", **extra)
    assert ack["op"] == "ack", ack
    while not any(e["type"] == "REASONING" and e["runId"] == ack["runId"] for e in client.events):
        await client._read_one()
    return ack


@autojump
async def test_each_multitask_policy(tmp_path: Path) -> None:
    async with server_with_fake(tmp_path) as (server, fake), connect(server.url) as ws:
        client = Client(ws)
        first = await client.ask(op="run", id="1", agent="chat", input="one")
        thread = first["threadId"]
        await finished(ws, first)
        running = await hold(client, thread)

        refused = await client.ask(op="run", id="r", threadId=thread, input="two")
        assert refused["op"] == "error" and refused["code"] == "limit_exceeded"
        assert running["runId"] in refused["message"]

        steer = await client.ask(op="run", id="s", threadId=thread, input="psst", multitask="steer")
        assert steer["runId"] == running["runId"] and steer["threadId"] == thread

        rolled = await client.ask(
            op="run", id="rb", threadId=thread, input="instead", multitask="rollback"
        )
        assert rolled["runId"] != running["runId"]
        await finished(ws, rolled)
        # From before the run it discarded: its input never reaches the model again.
        assert [m for _, m in asked(fake, "chat")] == ["one", "you said one", "instead"]

        running = await hold(client, thread)
        interrupted = await client.ask(
            op="run", id="i", threadId=thread, input="go on", multitask="interrupt"
        )
        events = await finished(ws, interrupted)
        assert events[0]["data"]["previousRunId"] == running["runId"]
        assert [m for _, m in asked(fake, "chat")] == [
            "one",
            "you said one",
            "instead",
            "you said instead",
            "hold on",  # the interrupted run's input: its cut-off answer is not kept
            "go on",
        ]

        running = await hold(client, thread)
        queued = await client.ask(
            op="run", id="q", threadId=thread, input="later", multitask="enqueue"
        )
        assert queued["runId"] != running["runId"]
        await trio.sleep(0.2)
        runs = (await client.ask(op="threads", id="l", threadId=thread))["threads"][0]["detail"]
        assert runs[-1]["status"] == "queued" and runs[-1]["runId"] == queued["runId"]
        cancel = await client.ask(op="cancel", id="c", runId=running["runId"])
        assert cancel["op"] == "ack"
        events = await finished(ws, queued)
        assert events[0]["data"]["previousRunId"] == running["runId"]
        assert [m for _, m in asked(fake, "chat")][-2:] == ["hold on", "later"]


async def thread_runs(client: Client, thread: str) -> list[dict[str, Any]]:
    """The thread's runs as the `threads` op details them, oldest first."""
    reply = await client.ask(op="threads", id=f"l-{len(client.replies)}", threadId=thread)
    runs: list[dict[str, Any]] = reply["threads"][0]["detail"]
    return runs


async def started_of(server: RunningServer, run_id: str) -> dict[str, Any]:
    """The run's RUN_STARTED (its thread fields), whether or not the run has ended."""
    async with connect(server.url, max_size=None) as ws:
        client = Client(ws)
        ack = await client.ask(
            op="subscribe", id="s", runId=run_id, filter={"types": ["RUN_STARTED"]}
        )
        assert ack["op"] == "ack", ack
        (started,) = await client.until("RUN_STARTED")
        return started


@pytest.mark.parametrize(
    "policies",
    [("interrupt", "interrupt"), ("interrupt", "rollback"), ("rollback", "rollback")],
    ids="+".join,
)
@autojump
async def test_two_inputs_that_stop_the_running_run_at_once_go_one_after_the_other(
    tmp_path: Path, policies: tuple[str, str]
) -> None:
    """Issue 57, defect 4: two connections send `interrupt` (or `rollback`) to one
    thread at once. The first stops the running run; the second stops the first's new
    run; never two runs side by side, and the thread's chain stays straight."""
    async with (
        server_with_fake(tmp_path) as (server, fake),
        connect(server.url) as ws,
        connect(server.url) as ws_a,
        connect(server.url) as ws_b,
    ):
        client = Client(ws)
        first = await client.ask(op="run", id="1", agent="chat", input="one")
        thread = first["threadId"]
        await finished(ws, first)
        running = await hold(client, thread)
        acks: dict[str, dict[str, Any]] = {}

        async def send(name: str, ws: ClientConnection, multitask: str) -> None:
            acks[name] = await Client(ws).ask(
                op="run", id=name, threadId=thread, input=f"hold {name}", multitask=multitask
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, "a", ws_a, policies[0])
            nursery.start_soon(send, "b", ws_b, policies[1])
        assert {a["op"] for a in acks.values()} == {"ack"}, acks
        starts = {name: await started_of(server, ack["runId"]) for name, ack in acks.items()}
        runs = {r["runId"]: r for r in await thread_runs(client, thread)}
        # One went first: it stopped the held run. The other stopped that one's run.
        (earlier,) = [n for n in acks if runs[acks[n]["runId"]]["status"] == "cancelled"]
        later = "a" if earlier == "b" else "b"
        policy = dict(zip("ab", policies, strict=True))
        before = "one's run" if policy[earlier] == "rollback" else "held"
        assert starts[earlier]["data"].get("previousRunId") == (
            first["runId"] if before == "one's run" else running["runId"]
        )
        expected_previous = (
            starts[earlier]["data"].get("previousRunId")
            if policy[later] == "rollback"
            else acks[earlier]["runId"]
        )
        assert starts[later]["data"].get("previousRunId") == expected_previous
        assert runs[running["runId"]]["status"] == "cancelled"
        assert runs[acks[later]["runId"]]["status"] == "running"
        assert [r["runId"] for r in runs.values() if r["status"] == "running"] == [
            acks[later]["runId"]
        ]
        await eventually(lambda: f"hold {later}" in str(fake.requests[-1]["messages"][-1]))
        await client.ask(op="cancel", id="c", runId=acks[later]["runId"])
        # The later run was asked from the thread's chain: with the earlier's input
        # when it went on from it (interrupt), without it when it rolled it back.
        said = [m for role, m in asked(fake, "chat") if role == "user"]
        assert said[-1] == f"hold {later}"
        assert (f"hold {earlier}" in said) is (policy[later] == "interrupt")


@autojump
async def test_steer_and_reject_name_the_running_run_not_a_queued_one(tmp_path: Path) -> None:
    """Issue 57, defect 5: with runs queued behind the running one, `steer` reaches the
    running root and `reject` names the running run."""
    async with server_with_fake(tmp_path) as (server, fake), connect(server.url) as ws:
        client = Client(ws)
        running = await hold(client)
        thread = running["threadId"]
        queued = [
            await client.ask(
                op="run", id=f"q{n}", threadId=thread, input=f"later {n}", multitask="enqueue"
            )
            for n in range(2)
        ]
        assert all(q["op"] == "ack" for q in queued)
        steer = await client.ask(op="run", id="s", threadId=thread, input="psst", multitask="steer")
        assert steer["op"] == "ack" and steer["runId"] == running["runId"], steer
        refused = await client.ask(op="run", id="r", threadId=thread, input="no")
        assert refused["code"] == "limit_exceeded"
        assert running["runId"] in refused["message"]
        assert not any(q["runId"] in refused["message"] for q in queued)
        # The queued runs still go in order, each from the one before it.
        await client.ask(op="cancel", id="c", runId=running["runId"])
        for ack, previous in zip(queued, [running, queued[0]], strict=True):
            events = await finished(ws, ack)
            assert events[0]["data"]["previousRunId"] == previous["runId"]
        chat = [m for _, m in asked(fake, "chat")]
        assert chat[-3:] == ["later 0", "you said later 0", "later 1"]


@autojump
async def test_an_interrupt_ends_the_runs_queued_behind_the_running_one(tmp_path: Path) -> None:
    """An `interrupt` while runs are queued: the running run and the queued ones end
    `cancelled` (those never run), and the new run goes on from the running run."""
    async with server_with_fake(tmp_path) as (server, fake), connect(server.url) as ws:
        client = Client(ws)
        running = await hold(client)
        thread = running["threadId"]
        queued = await client.ask(
            op="run", id="q", threadId=thread, input="later", multitask="enqueue"
        )
        now = await client.ask(
            op="run", id="i", threadId=thread, input="now", multitask="interrupt"
        )
        events = await finished(ws, now)
        assert events[0]["data"]["previousRunId"] == running["runId"]
        runs = {r["runId"]: r for r in await thread_runs(client, thread)}
        assert runs[queued["runId"]]["status"] == "cancelled"
        assert "later" not in [m for _, m in asked(fake, "chat")]
        dropped = await replay(server.url, queued["runId"])
        assert dropped[-1]["type"] == "RUN_FINISHED"
        assert dropped[-1]["data"]["status"] == "cancelled"


@autojump
async def test_a_thread_is_its_owners(tmp_path: Path) -> None:
    async with server_with_fake(tmp_path, tokens=True) as (server, fake):
        async with connect(server.url, additional_headers=bearer("ann-secret")) as ws:
            ann = Client(ws)
            first = await ann.ask(
                op="run", id="1", agent="chat", threadId="shared", input="ann here"
            )
            await finished(ws, first)
        async with connect(server.url, additional_headers=bearer("bob-secret")) as ws:
            bob = Client(ws)
            assert (await bob.ask(op="threads", id="l"))["threads"] == []
            nope = await bob.ask(op="threads", id="t", threadId="shared")
            assert nope["code"] == "not_found"
            # The same id in bob's tenant is bob's own new thread: it knows nothing of ann's.
            his = await bob.ask(op="run", id="2", agent="chat", threadId="shared", input="bob here")
            events = await finished(ws, his)
            assert "previousRunId" not in events[0]["data"]
            assert asked(fake, "chat") == [("user", "bob here")]
        async with connect(server.url, additional_headers=bearer("eve-secret")) as ws:
            eve = Client(ws)
            refused = await eve.ask(op="run", id="3", threadId="shared", input="eve")
            assert refused["code"] == "unauthorized"
            gone = await eve.ask(op="threads", id="d", threadId="shared", action="delete")
            assert gone["code"] in ("unauthorized", "not_found")
        async with connect(server.url, additional_headers=bearer("ann-secret")) as ws:
            ann = Client(ws)
            deleted = await ann.ask(op="threads", id="d", threadId="shared", action="delete")
            assert deleted["deleted"] == [first["runId"]]
            assert (await ann.ask(op="threads", id="l"))["threads"] == []


async def test_a_thread_goes_on_after_a_restart(tmp_path: Path) -> None:
    storage = "sqlite:///data/journal.db"
    async with (
        server_with_fake(tmp_path, storage=storage) as (server, _),
        connect(server.url) as ws,
    ):
        client = Client(ws)
        first = await client.ask(op="run", id="1", agent="chat", input="remember 7")
        await finished(ws, first)
    async with server_with_fake(tmp_path, storage="sqlite:///data/journal.db") as (server, fake):
        async with connect(server.url) as ws:
            client = Client(ws)
            second = await client.ask(
                op="run", id="2", threadId=first["threadId"], input="what number?"
            )
            await finished(ws, second)
        assert asked(fake, "chat") == [
            ("user", "remember 7"),
            ("assistant", "you said remember 7"),
            ("user", "what number?"),
        ]


@autojump
async def test_bad_thread_asks_are_clear_errors(tmp_path: Path) -> None:
    async with server_with_fake(tmp_path) as (server, _), connect(server.url) as ws:
        client = Client(ws)
        long = await client.ask(op="run", id="1", agent="chat", threadId="x" * 300, input="hi")
        assert long["code"] == "bad_request" and "threadId" in long["message"]
        none = await client.ask(op="run", id="2", threadId="never-seen", input="hi")
        assert none["code"] == "bad_request" and "agent" in none["message"]
        blocking = await client.ask(
            op="run", id="3", agent="chat", threadId="t", input="hi", stream=False
        )
        assert blocking["code"] == "bad_request" and "stream" in blocking["message"]


async def test_the_command_line_chats_and_lists_runs_and_threads(tmp_path: Path) -> None:
    """`orchestrator chat`: each line is the next run of one thread, followed to its
    answer; `runs` and `threads` list them; `start --thread` goes on in a thread."""
    async with running_server(demo_config(tmp_path, token_delay=0.0)) as server:
        chat = await trio.run_process(
            [sys.executable, "-m", "orchestrator", "chat", "critic", "--url", server.url],
            stdin=b"first draft\nsecond draft\n\n",
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert chat.returncode == 0, chat.stderr
        thread = chat.stderr.decode().split()[1]
        assert thread.startswith("thread-")
        threads = await cli("threads", "--json", "--url", server.url)
        ((listed,),) = [json.loads(threads.stdout)]
        assert listed["threadId"] == thread and listed["firstInput"] == "first draft"
        first, second = listed["runs"]
        events = await replay(server.url, second)
        assert events[0]["data"]["previousRunId"] == first
        assert events[0]["data"]["threadId"] == thread
        more = await cli("start", "critic", "third", "--thread", thread, "--url", server.url)
        assert more.returncode == 0, more.stderr
        runs = json.loads((await cli("runs", "--json", "--url", server.url)).stdout)
        assert [r["threadId"] for r in runs] == [thread] * 3
        assert runs[0]["previousRunId"] == second
        text = (await cli("threads", thread, "--url", server.url)).stdout.decode()
        assert f"{thread}  3 runs" in text and "second draft" in text


async def test_the_official_ag_ui_client_chats_in_a_thread(tmp_path: Path) -> None:
    """@ag-ui/client posts the whole chat on each `runAgent` of one threadId: the model
    gets each earlier message once (the server's history, not the client's copy); a
    fresh client with only its new message gets the history too, and the run's
    MESSAGES_SNAPSHOT gives it the chat (a reloaded page sees it)."""
    need("@ag-ui/client")
    async with server_with_fake(tmp_path, tokens=True, doors=True) as (server, fake):
        url = f"http://127.0.0.1:{server.port}/ag-ui/chat"
        done = await trio.run_process(
            [
                "node",
                str(REPO / "clients" / "agui_chat.mjs"),
                url,
                "ann-secret",
                "ag-ui-thread-1",
                json.dumps(["my name is Ann", "what is my name?"]),
                "and again?",
            ],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        outcome = json.loads(done.stdout.decode().splitlines()[-1])
        assert outcome["ok"], outcome
        assert [m for _, m in asked(fake, "chat")] == [
            "my name is Ann",
            "you said my name is Ann",
            "what is my name?",
            "you said what is my name?",
            "and again?",
        ]
        reloaded = [(m["role"], m["content"]) for m in outcome["reloaded"]]
        assert reloaded[:5] == [
            ("user", "my name is Ann"),
            ("assistant", "you said my name is Ann"),
            ("user", "what is my name?"),
            ("assistant", "you said what is my name?"),
            ("user", "and again?"),
        ]
        async with connect(server.url, additional_headers=bearer("ann-secret")) as ws:
            listed = await Client(ws).ask(op="threads", id="t", threadId="ag-ui-thread-1")
        assert len(listed["threads"][0]["runs"]) == 3
        # Another token's client on that threadId has a thread of its own; a viewer none.
        for token, ok in (("bob-secret", True), ("eve-secret", False)):
            other = await trio.run_process(
                ["node", str(REPO / "clients" / "agui_chat.mjs"), url, token,
                 "ag-ui-thread-1", json.dumps(["who am I?"])],
                capture_stdout=True, capture_stderr=True, check=False,
            )  # fmt: skip
            assert json.loads(other.stdout.decode().splitlines()[-1])["ok"] is ok, other
        assert asked(fake, "chat") == [("user", "who am I?")]


@autojump
async def test_an_mcp_client_goes_on_in_a_thread(tmp_path: Path) -> None:
    """The `mcp` package's own client: the tools take `threadId`, results carry the
    run's and the thread's ids (structuredContent), and a call with the threadId gets
    the conversation; another token's call with that id starts a thread of its own."""
    pytest.importorskip("mcp", reason="MCP tests need the `mcp` extra: pip install -e '.[dev]'")
    from tests.integration.test_mcp_endpoint import mcp_client

    async with server_with_fake(tmp_path, tokens=True, doors=True) as (server, fake):
        base = f"http://127.0.0.1:{server.port}"
        async with mcp_client(base, "ann-secret") as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            schema = tools["chat"].input_schema
            assert "threadId" in schema["properties"] and schema["required"] == ["task"]
            answer = tools["chat"].output_schema
            assert set(answer["properties"]) == {"result", "runId", "threadId", "structured"}
            assert "structured" not in answer["required"]  # (only an output_schema's agent)
            first = await client.call_tool("chat", {"task": "my name is Ann"})
            assert not first.is_error
            ids = first.structured_content
            assert ids["result"] == "you said my name is Ann" and ids["runId"].startswith("run-")
            again = await client.call_tool(
                "chat", {"task": "what is my name?", "threadId": ids["threadId"]}
            )
            assert again.structured_content["threadId"] == ids["threadId"]
            assert [m for _, m in asked(fake, "chat")] == [
                "my name is Ann",
                "you said my name is Ann",
                "what is my name?",
            ]
        async with mcp_client(base, "bob-secret") as client:
            await client.call_tool("chat", {"task": "who am I?", "threadId": ids["threadId"]})
            assert asked(fake, "chat") == [("user", "who am I?")]


async def test_the_official_a2a_client_talks_in_one_context(tmp_path: Path) -> None:
    """@a2a-js/sdk: two messages with one contextId are two runs of one thread: the
    second's model gets the first exchange."""
    need("@a2a-js/sdk")
    async with server_with_fake(tmp_path, tokens=True, doors=True) as (server, fake):
        done = await trio.run_process(
            [
                "node",
                str(REPO / "clients" / "a2a_chat.mjs"),
                f"http://127.0.0.1:{server.port}/a2a/chat/",
                "ann-secret",
                "ctx-chat-1",
                "my name is Ann",
                "what is my name?",
            ],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        outcome = json.loads(done.stdout.decode().splitlines()[-1])
        assert outcome["ok"], outcome
        assert [t["contextId"] for t in outcome["tasks"]] == ["ctx-chat-1", "ctx-chat-1"]
        assert outcome["tasks"][1]["answer"] == "you said what is my name?"
        assert [m for _, m in asked(fake, "chat")] == [
            "my name is Ann",
            "you said my name is Ann",
            "what is my name?",
        ]
        async with connect(server.url, additional_headers=bearer("ann-secret")) as ws:
            listed = await Client(ws).ask(op="threads", id="t", threadId="ctx-chat-1")
        assert len(listed["threads"][0]["runs"]) == 2
        # Another token's message in that context is a thread of its own; a viewer's none.
        for token, ok in (("bob-secret", True), ("eve-secret", False)):
            other = await trio.run_process(
                ["node", str(REPO / "clients" / "a2a_chat.mjs"),
                 f"http://127.0.0.1:{server.port}/a2a/chat/", token, "ctx-chat-1", "who am I?"],
                capture_stdout=True, capture_stderr=True, check=False,
            )  # fmt: skip
            assert json.loads(other.stdout.decode().splitlines()[-1])["ok"] is ok, other
        assert asked(fake, "chat") == [("user", "who am I?")]


async def a2a_input(
    server: RunningServer, token: str, *texts: str, task: str | None = None
) -> dict[str, Any]:
    """clients/a2a_input.mjs against the `keeper` agent (`task`: the first message
    goes to that task): its outcome."""
    done = await trio.run_process(
        [
            "node",
            str(REPO / "clients" / "a2a_input.mjs"),
            f"http://127.0.0.1:{server.port}/a2a/keeper/",
            token,
            *texts,
        ],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env={**os.environ, **({"A2A_TASK_ID": task} if task else {})},
    )
    outcome: dict[str, Any] = json.loads(done.stdout.decode().splitlines()[-1])
    return outcome


async def test_an_a2a_task_waiting_for_approval_is_input_required(tmp_path: Path) -> None:
    """A call that waits for a person makes the task `input-required` (the official
    client's blocking `sendMessage` returns it so, the call in a data part); the
    client's next message with the taskId answers it, and the task goes on."""
    need("@a2a-js/sdk")
    async with server_with_fake(tmp_path, tokens=True, doors=True) as (server, _):
        outcome = await a2a_input(server, "ann-secret", "buy milk", "approve", "again?")
        assert not outcome["ok"], outcome  # the third message: the task is not waiting
        assert "not waiting for input" in outcome["error"], outcome
        first, second = outcome["tasks"]
        assert first["state"] == 6, first  # TASK_STATE_INPUT_REQUIRED
        assert "asks to run write_file" in first["said"] and "approve" in first["said"]
        (data,) = first["data"]
        assert "write_file" in json.dumps(data) and "note.txt" in json.dumps(data), data
        assert second["id"] == first["id"] and second["state"] == 3, second  # COMPLETED
        assert second["answer"] == "keeper: wrote 8 characters to note.txt", second
        assert (tmp_path / "workspace" / "note.txt").read_text() == "buy milk"
        denied = await a2a_input(server, "ann-secret", "sell milk", "deny: not today")
        assert denied["ok"], denied
        assert denied["tasks"][1]["state"] == 3, denied
        assert "not today" in denied["tasks"][1]["answer"], denied
        assert (tmp_path / "workspace" / "note.txt").read_text() == "buy milk"
        # Another token does not see a waiting task, and a viewer cannot answer it.
        waiting = await a2a_input(server, "ann-secret", "call mum")
        (task,) = waiting["tasks"]
        assert task["state"] == 6, waiting
        for token in ("bob-secret", "eve-secret"):
            outsider = await a2a_input(server, token, "approve", task=task["id"])
            assert not outsider["ok"], outsider
        done = await a2a_input(server, "ann-secret", "approve", task=task["id"])
        assert done["tasks"][0]["answer"] == "keeper: wrote 8 characters to note.txt", done


@autojump
async def test_a_fork_of_a_threads_run_starts_a_thread_of_its_own(tmp_path: Path) -> None:
    """A fork of a thread's second run has the thread's conversation (its model is
    asked the first exchange too), in a new thread that shares the first run; a
    follow-up there goes on from the fork, and the original thread is unchanged."""
    async with server_with_fake(tmp_path) as (server, fake), connect(server.url) as ws:
        client = Client(ws)
        first = await client.ask(op="run", id="1", agent="chat", input="my name is Ann")
        await finished(ws, first)
        second = await client.ask(op="run", id="2", threadId=first["threadId"], input="who?")
        await finished(ws, second)
        fork = await client.ask(op="fork", id="f", runId=second["runId"], atSeq=1)
        assert fork["threadId"] != first["threadId"]
        events = await finished(ws, fork)
        assert events[0]["data"]["threadId"] == fork["threadId"]
        assert events[0]["data"]["previousRunId"] == first["runId"]
        assert [m for _, m in asked(fake, "chat")] == [
            "my name is Ann",
            "you said my name is Ann",
            "who?",
        ]
        more = await client.ask(op="run", id="3", threadId=fork["threadId"], input="again")
        events = await finished(ws, more)
        assert events[0]["data"]["previousRunId"] == fork["runId"]
        assert [m for _, m in asked(fake, "chat")] == [
            "my name is Ann",
            "you said my name is Ann",
            "who?",
            "you said who?",
            "again",
        ]
        original = await client.ask(op="threads", id="t", threadId=first["threadId"])
        assert original["threads"][0]["runs"] == [first["runId"], second["runId"]]


async def test_an_enqueued_run_that_never_started_runs_after_a_restart(
    tmp_path: Path,
) -> None:
    """An acknowledged input runs (issue 57, defect 3): a run queued behind a running
    one is still queued after a restart, and starts once the resumed run ends, from
    the conversation it left."""
    storage = "sqlite:///data/journal.db"
    async with (
        server_with_fake(tmp_path, storage=storage) as (server, _),
        connect(server.url) as ws,
    ):
        client = Client(ws)
        running = await hold(client)
        queued = await client.ask(
            op="run", id="q", threadId=running["threadId"], input="later", multitask="enqueue"
        )
        assert queued["op"] == "ack"
    async with (
        server_with_fake(tmp_path, storage=storage) as (server, fake),
        connect(server.url) as ws,
    ):
        client = Client(ws)
        runs = {r["runId"]: r for r in (await client.ask(op="runs", id="l"))["runs"]}
        assert runs[queued["runId"]]["status"] == "queued"
        assert runs[running["runId"]]["status"] == "running"  # (resumed)
        sub = (await client.ask(op="subscribe", id="s", runId=queued["runId"]))["sub"]
        await client.ask(op="cancel", id="c", runId=running["runId"])
        events, end = await read_until_end(ws, sub)
        assert end["status"] == "completed"
        assert events[0]["type"] == "RUN_STARTED"
        assert events[0]["data"]["previousRunId"] == running["runId"]
        assert [m for _, m in asked(fake, "chat")][-2:] == ["hold on", "later"]


@autojump
async def test_in_process_runs_go_on_in_a_thread(tmp_path: Path) -> None:
    """`Orchestrator.stream(…, thread=…)` and `call(…, thread=…)`: the thread's
    conversation kept in memory; one run of a thread at a time."""
    from orchestrator.runtime.conversations import ThreadBusy
    from orchestrator.runtime.engine import Orchestrator

    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, brain, pause=0.001)
        config = load_config(write(tmp_path, fake, tokens=False, storage="memory://"))
        async with Orchestrator.open(config) as orch:
            async with orch.stream("chat", "my name is Ann", thread="mine") as run:
                first = [event async for event in run]
                assert run.thread_id == "mine"
            assert first[0].data["threadId"] == "mine"
            async with orch.stream("chat", "what is my name?", thread="mine") as run:
                second = [event async for event in run]
                with pytest.raises(ThreadBusy):
                    await orch.call("chat", "meanwhile", thread="mine")
            assert second[0].data["previousRunId"] == first[0].run_id
            result = await orch.call("chat", "once more", thread="mine")
            assert result.status == "completed"
            assert [m for _, m in asked(fake, "chat")] == [
                "my name is Ann",
                "you said my name is Ann",
                "what is my name?",
                "you said what is my name?",
                "once more",
            ]
        nursery.cancel_scope.cancel()


@autojump
async def test_a_fork_at_the_last_seq_with_a_message_is_a_follow_up(tmp_path: Path) -> None:
    """At the last seq of an ended run, a message for its root is no longer refused:
    it is the next run of a new thread that goes on from that run's conversation."""
    async with server_with_fake(tmp_path) as (server, fake), connect(server.url) as ws:
        client = Client(ws)
        first = await client.ask(op="run", id="1", agent="chat", input="my name is Ann")
        events = await finished(ws, first)
        last = events[-1]["seq"]
        fork = await client.ask(
            op="fork", id="f", runId=first["runId"], atSeq=last, message="who am I?"
        )
        assert fork["op"] == "ack", fork
        assert fork["threadId"] not in (None, first["threadId"])
        events = await finished(ws, fork)
        assert events[0]["data"] == {
            "agentId": "chat",
            "input": "who am I?",
            "threadId": fork["threadId"],
            "previousRunId": first["runId"],
        }
        assert [m for _, m in asked(fake, "chat")] == [
            "my name is Ann",
            "you said my name is Ann",
            "who am I?",
        ]


@autojump
async def test_from_run_names_only_a_run_of_the_callers_thread(tmp_path: Path) -> None:
    """Regression: `fromRun` was read without checking it: another token's runId and
    agentKey continued that token's agent, its conversation with it."""
    async with server_with_fake(tmp_path, tokens=True) as (server, fake):
        async with connect(server.url, additional_headers=bearer("ann-secret")) as ws:
            ann = Client(ws)
            secret = await ann.ask(op="run", id="1", agent="lead", input="ann's secret plan")
            events = await finished(ws, secret)
            helper = next(e["source"]["agentKey"] for e in events if e["type"] == "AGENT_STARTED")
        async with connect(server.url, additional_headers=bearer("bob-secret")) as ws:
            bob = Client(ws)
            mine = await bob.ask(op="run", id="2", agent="chat", input="hi")
            await finished(ws, mine)
            stolen = await bob.ask(
                op="run",
                id="3",
                threadId=mine["threadId"],
                agentKey=helper,
                fromRun=secret["runId"],
                input="what was the plan?",
            )
            assert stolen["op"] == "error" and stolen["code"] == "not_found", stolen
        assert all("secret" not in m for _, m in asked(fake, "chat"))


@autojump
async def test_a_threads_queue_and_listing_are_bounded(tmp_path: Path) -> None:
    from orchestrator.runs.thread_inputs import MAX_QUEUED

    async with server_with_fake(tmp_path) as (server, _), connect(server.url) as ws:
        client = Client(ws)
        running = await hold(client)
        thread = running["threadId"]
        for n in range(MAX_QUEUED):
            queued = await client.ask(
                op="run", id=f"q{n}", threadId=thread, input=f"q{n}", multitask="enqueue"
            )
            assert queued["op"] == "ack", queued
        full = await client.ask(op="run", id="qx", threadId=thread, input="x", multitask="enqueue")
        assert full["code"] == "limit_exceeded" and f"{MAX_QUEUED} runs queued" in full["message"]
        for limit in (0, 1001):
            bad = await client.ask(op="threads", id=f"l{limit}", limit=limit)
            assert bad["code"] == "bad_request" and "limit must be 1 to 1000" in bad["message"]
        await client.ask(op="cancel", id="c", runId=running["runId"])


@autojump
async def test_the_demos_scripted_planner_answers_a_follow_up_in_its_thread(
    tmp_path: Path,
) -> None:
    """Issue 57, 16: the demo's follow-up in a thread is answered by a whole tree, not
    a planner's last words with no results."""
    from tests.server_helpers import demo_config

    async with memory_server(demo_config(tmp_path)) as server, connect(server.url) as ws:
        client = Client(ws)
        first = await client.ask(op="run", id="1", agent="planner", input="my name is Ann")
        await finished(ws, first)
        again = await client.ask(
            op="run", id="2", threadId=first["threadId"], input="what is my name?"
        )
        events = await finished(ws, again)
    spawned = [e for e in events if e["type"] == "AGENT_STARTED" and e["source"]["depth"] == 1]
    assert len(spawned) == 2  # two researchers again
    answer = events[-1]["data"]["result"]
    assert 'found about "what is my name?"' in answer
    assert "critic" in answer.lower() and len(answer) > 200, answer
