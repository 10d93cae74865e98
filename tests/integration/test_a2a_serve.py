"""Our subagents as A2A agents (`server.a2a: true`), driven by the `a2a-sdk`'s own
client: the card, a streamed task (the run's root text as the answer artifact, the
tree's agents as status messages), a blocking send, get and cancel, the tokens; and
an A2A agent of one server spawned as a subagent by another (`remote: {a2a: …}`)."""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from websockets.trio.client import connect

from tests.memory_server import autojump, memory_server
from tests.server_helpers import demo_config, read_until_end, request

pytest.importorskip("a2a", reason="the A2A tests need the `a2a` extra (pip install -e '.[dev]')")

from a2a.client import ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format

TOKENS = [
    {"name": "ann", "token": "ann-secret", "role": "user"},
    {"name": "eve", "token": "eve-secret", "role": "viewer"},
]


def http_url(ws_url: str) -> str:
    return ws_url.replace("ws://", "http://").removesuffix("/ws")


@asynccontextmanager
async def a2a_client(
    base: str,
    agent: str,
    token: str | None = None,
    *,
    streaming: bool = True,
    headers: dict[str, str] | None = None,
) -> AsyncIterator[Client]:
    headers = {**(headers or {}), **({"Authorization": f"Bearer {token}"} if token else {})}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        factory = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming))
        yield await factory.create_from_url(f"{base}/a2a/{agent}")


def message(text: str) -> pb.SendMessageRequest:
    sent = pb.Message(message_id="m-1", role=pb.Role.ROLE_USER)
    sent.parts.append(pb.Part(text=text))
    return pb.SendMessageRequest(message=sent)


async def start_task(base: str, agent: str, text: str) -> str:
    """Send `text` to `agent`, answered at once (`returnImmediately`): the task's id."""
    async with a2a_client(base, agent, streaming=False) as sender:
        request = pb.SendMessageRequest()
        request.CopyFrom(message(text))
        request.configuration.return_immediately = True
        (started,) = await collect(sender, request)
    return str(started.task.id)


async def collect(client: Client, request: pb.SendMessageRequest) -> list[pb.StreamResponse]:
    """Every response (read to the end: the SDK's inner generators close only so)."""
    return [response async for response in client.send_message(request)]


@autojump
async def test_a_subagent_is_an_a2a_agent_whose_task_is_its_run(tmp_path: Path) -> None:
    config = demo_config(tmp_path, server={"a2a": True})
    async with memory_server(config) as server:
        base = http_url(server.url)
        async with a2a_client(base, "planner") as client:
            responses = await collect(client, message("compare trio"))
        task_id = responses[0].task.id
        async with connect(server.url, max_size=None) as ws:
            sub = await request(ws, op="subscribe", id=1, runId=task_id)
            events, _ = await read_until_end(ws, sub["sub"])
    kinds = [r.WhichOneof("payload") for r in responses]
    assert kinds[0] == "task" and kinds[-1] == "status_update"
    final = responses[-1].status_update.status
    assert final.state == pb.TaskState.TASK_STATE_COMPLETED
    chunks = [r.artifact_update for r in responses if r.WhichOneof("payload") == "artifact_update"]
    answer: list[str] = []
    for chunk in chunks:  # A2A: a chunk that does not append replaces the artifact
        answer = (
            [*answer, chunk.artifact.parts[0].text]
            if chunk.append
            else [chunk.artifact.parts[0].text]
        )
    assert sum(not c.append for c in chunks) == 2  # the first turn, then the answer's
    assert "".join(answer) == events[-1]["data"]["result"]  # the run's answer, streamed
    working = [
        r.status_update.status.message.parts[0].text
        for r in responses
        if r.WhichOneof("payload") == "status_update"
    ]
    started = [e for e in events if e["type"] == "AGENT_STARTED"]
    assert sum(text.endswith(": started") for text in working) == len(started)


@autojump
async def test_send_get_cancel_and_the_tokens(tmp_path: Path) -> None:
    config = demo_config(tmp_path, token_delay=0.05, server={"a2a": True, "tokens": TOKENS})
    async with memory_server(config) as server:
        base = http_url(server.url)
        async with a2a_client(base, "researcher", "ann-secret", streaming=False) as client:
            (done,) = await collect(client, message("quick"))
            blocking = pb.SendMessageRequest()
            blocking.CopyFrom(message("now"))
            blocking.message.context_id = "ctx-42"  # the client's conversation
            blocking.configuration.return_immediately = True
            (started,) = await collect(client, blocking)
            task_id = started.task.id
            got = await client.get_task(pb.GetTaskRequest(id=task_id))
            cancelled = await client.cancel_task(pb.CancelTaskRequest(id=task_id))
        async with a2a_client(base, "researcher", "eve-secret", streaming=False) as viewer:
            seen = await viewer.get_task(pb.GetTaskRequest(id=task_id))
            with pytest.raises(Exception, match="viewer"):
                await collect(viewer, message("may I?"))
        async with a2a_client(base, "researcher", streaming=False) as anonymous:  # the card
            with pytest.raises(Exception, match="401"):  # but nothing more
                await collect(anonymous, message("who?"))
    assert done.task.status.state == pb.TaskState.TASK_STATE_COMPLETED
    assert done.task.artifacts[0].parts[0].text.startswith('Findings on "quick"')
    assert started.task.status.state == pb.TaskState.TASK_STATE_SUBMITTED
    assert got.id == task_id and got.status.state == pb.TaskState.TASK_STATE_WORKING
    assert cancelled.status.state == pb.TaskState.TASK_STATE_CANCELED
    assert seen.status.state == pb.TaskState.TASK_STATE_CANCELED
    # The contextId the message gave is the task's everywhere (regression: GetTask and
    # CancelTask reported the runId); a message that gives none starts a thread, whose
    # id is its context (docs/threads.md).
    contexts = {started.task.context_id, got.context_id, cancelled.context_id, seen.context_id}
    assert contexts == {"ctx-42"}
    assert done.task.context_id.startswith("thread-")


@autojump
async def test_an_a2a_agent_here_is_a_subagent_there(tmp_path: Path) -> None:
    far = tmp_path / "far"
    far.mkdir()
    async with memory_server(demo_config(far, server={"a2a": True})) as far_server:
        a2a_url = f"{http_url(far_server.url)}/a2a/planner"
        spawn = {"name": "agent_spawn", "args": {"agent_id": "far_planner", "task": "t"}}
        agents: dict[str, Any] = {
            "far_planner": {"description": "over A2A", "remote": {"a2a": a2a_url}},
            "boss": {
                "description": "asks",
                "instructions": "lead",
                "tools": ["agent_spawn"],
                "script": {"turns": [{"calls": [spawn]}, {"say": "got: {results}"}]},
            },
        }
        async with (
            memory_server(demo_config(tmp_path, extra_agents=agents)) as server,
            connect(server.url, max_size=None) as ws,
        ):
            ack = await request(ws, op="run", id=1, agent="boss", input="go")
            with trio.fail_after(30):
                events, end = await read_until_end(ws, ack["sub"])
    assert end["status"] == "completed"
    result = next(e for e in events if e["type"] == "TOOL_RESULT" and e["source"] is None)
    assert not result["data"]["isError"]
    assert "Here is what the research team found" in result["data"]["content"]
    assert events[-1]["data"]["result"].startswith("got: ")


@autojump
async def test_the_card_is_public_and_says_how_to_authenticate(tmp_path: Path) -> None:
    """Regression: the card answered 401 without a token, and declared no security
    scheme even with one, so no client could learn how to authenticate."""
    config = demo_config(tmp_path, server={"a2a": True, "tokens": TOKENS})
    async with memory_server(config) as server, httpx.AsyncClient() as http:
        base = http_url(server.url)
        card = (await http.get(f"{base}/a2a/critic/.well-known/agent-card.json")).json()
        refused = await http.post(f"{base}/a2a/critic/", json={"jsonrpc": "2.0", "id": 1})
    assert card["name"] == "CriticAgent"
    assert card["securitySchemes"] == {
        "bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer", "description": ANY_TEXT}}
    }
    assert card["securityRequirements"] == [{"schemes": {"bearer": {}}}]
    assert refused.status_code == 401  # everything but the card still needs the token


class _AnyText(str):
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and bool(other)

    __hash__ = str.__hash__


ANY_TEXT = _AnyText()


@autojump
async def test_subscribing_starts_with_the_task_and_a_finished_one_is_refused(
    tmp_path: Path,
) -> None:
    """Regression: SubscribeToTask began with a status update (A2A 1.0: the first event
    MUST be the Task), and on a finished task replayed every response instead of
    UnsupportedOperationError."""
    config = demo_config(tmp_path, token_delay=0.02, server={"a2a": True})
    async with memory_server(config) as server:
        base = http_url(server.url)
        task_id = await start_task(base, "researcher", "follow me")
        async with a2a_client(base, "researcher") as client:
            with trio.fail_after(30):
                followed = [
                    r async for r in client.subscribe(pb.SubscribeToTaskRequest(id=task_id))
                ]
        # (Asked without the SDK's client, whose streaming helper is left unclosed when
        # the server refuses.)
        async with httpx.AsyncClient() as http:
            refused = await http.post(
                f"{base}/a2a/researcher/",
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "SubscribeToTask",
                    "params": {"id": task_id},
                },
                headers={"A2A-Version": "1.0"},
            )
    kinds = [r.WhichOneof("payload") for r in followed]
    assert kinds[0] == "task" and followed[0].task.id == task_id
    assert "task" not in kinds[1:]
    assert "has ended" in refused.text and "UNSUPPORTED_OPERATION" in refused.text
    final = followed[-1].status_update.status
    assert final.state == pb.TaskState.TASK_STATE_COMPLETED


def seq_of(response: pb.StreamResponse) -> int:
    kind = response.WhichOneof("payload")
    return int(getattr(response, kind).metadata["seq"])


def text_after(responses: list[pb.StreamResponse], text: str = "") -> str:
    """The answer artifact, as a client builds it from the updates it got."""
    for response in responses:
        kind = response.WhichOneof("payload")
        if kind == "task":
            text = "".join(p.text for a in response.task.artifacts for p in a.parts)
        elif kind == "artifact_update":
            update = response.artifact_update
            chunk = "".join(p.text for p in update.artifact.parts)
            text = text + chunk if update.append else chunk
    return text


async def test_a_dropped_subscriber_resumes_exactly_by_seq_across_a_restart(
    tmp_path: Path,
) -> None:
    """SubscribeToTask with the cursor (the `A2A-Orchestrator-After-Seq` header, as the
    card's extension says): the Task as it stood at that seq, then exactly the updates
    after it — across a restart of the server."""
    from tests.integration.test_server_lifecycle import start_serve_process

    config_path = tmp_path / "server.yaml"
    demo_config(tmp_path, token_delay=0.05, storage="sqlite:///journal.db", server={"a2a": True})
    seen: list[pb.StreamResponse] = []
    async with trio.open_nursery() as nursery:
        proc, url = await start_serve_process(nursery, config_path)
        base = http_url(url)
        task_id = await start_task(base, "planner", "compare trio and asyncio")
        async with httpx.AsyncClient() as http:
            card = (await http.get(f"{base}/a2a/planner/.well-known/agent-card.json")).json()
        # A client that drops mid-stream (raw JSON-RPC over SSE: the SDK's client leaves
        # its inner generators unclosed when its stream is left early).
        body = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}}
        async with (
            httpx.AsyncClient(timeout=30) as http,
            http.stream(
                "POST", f"{base}/a2a/planner/", json=body, headers={"A2A-Version": "1.0"}
            ) as response,
        ):
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    result = json.loads(line.removeprefix("data:"))["result"]
                    seen.append(json_format.ParseDict(result, pb.StreamResponse()))
                    if len(seen) == 6:
                        break  # the client drops here
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            await proc.wait()
    cursor = max(seq_of(r) for r in seen)

    async with trio.open_nursery() as nursery:
        proc, url = await start_serve_process(nursery, config_path)
        base = http_url(url)
        try:
            headers = {"A2A-Orchestrator-After-Seq": str(cursor)}
            async with a2a_client(base, "planner", headers=headers) as client:
                with trio.fail_after(60):
                    rest = [
                        r async for r in client.subscribe(pb.SubscribeToTaskRequest(id=task_id))
                    ]
            async with a2a_client(base, "planner", streaming=False) as client:
                final = await client.get_task(pb.GetTaskRequest(id=task_id))
        finally:
            proc.send_signal(signal.SIGTERM)
    (extension,) = card["capabilities"]["extensions"]
    assert "a2a-orchestrator-after-seq" in extension["description"]
    first = rest[0]
    assert first.WhichOneof("payload") == "task" and seq_of(first) == cursor
    assert text_after(rest[:1]) == text_after(seen)  # the task as the client had it
    later = [seq_of(r) for r in rest[1:]]
    assert later == sorted(later) and later[0] > cursor  # nothing twice
    assert rest[-1].status_update.status.state == pb.TaskState.TASK_STATE_COMPLETED
    # Nothing missed: what the client built is the answer the task ended with.
    answer = "".join(p.text for a in final.artifacts for p in a.parts)
    assert text_after(rest, text_after(seen)) == answer and answer
