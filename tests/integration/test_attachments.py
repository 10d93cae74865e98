"""Attachments through a real server and a fake provider speaking real SSE: an image
given to `run` reaches each wire format in its own blocks, is journaled once
(content-addressed), and survives a restart and a fork without a second copy; limits
and bad input are refused saying which and why."""

from __future__ import annotations

import base64
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml
from websockets.trio.client import connect

from tests.fakes.provider_server import FakeOpenAI, Reply, serve_fake_openai
from tests.integration.test_server_lifecycle import start_serve_process
from tests.memory_server import autojump, memory_server
from tests.server_helpers import read_until_end, recv, replay, request

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
IMAGE = {"name": "dot.png", "mediaType": "image/png", "data": base64.b64encode(PNG).decode()}
NOTE = {"name": "notes.txt", "mediaType": "text/plain", "data": base64.b64encode(b"hello").decode()}


def write_server(
    tmp_path: Path, fake: FakeOpenAI, storage: str = "memory://", **extra: Any
) -> Path:
    sub = tmp_path / "subagents"
    sub.mkdir(exist_ok=True)
    for name, model in (("chat", "gpt"), ("resp", "gpt-r"), ("claude", "claude")):
        spec = {"description": name, "instructions": f"ROLE: {name}\nLook.", "model": model}
        (sub / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    models = {
        "gpt": {
            "provider": "openai",
            "base_url": fake.base_url,
            "model": "g",
            "retry_base_delay": 0.01,
        },
        "gpt-r": {"provider": "openai-responses", "base_url": fake.base_url, "model": "r"},
        "claude": {"provider": "anthropic", "base_url": fake.base_url, "model": "c"},
        "default": {"provider": "scripted"},
    }
    data = {
        "server": {"host": "127.0.0.1", "port": 0},
        "storage": storage,
        "models": models,
        "subagents_dir": "subagents",
        **extra,
    }
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def looked(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
    return Reply("I see a dot.")


@autojump
async def test_an_image_reaches_each_wire_format_in_its_own_blocks(tmp_path: Path) -> None:
    from orchestrator.config import load_config

    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, looked)
        config = load_config(write_server(tmp_path, fake))
        async with memory_server(config) as server, connect(server.url, max_size=None) as ws:
            for agent in ("chat", "resp", "claude"):
                ack = await request(
                    ws,
                    op="run",
                    id=agent,
                    agent=agent,
                    input="What is it?",
                    attachments=[IMAGE, NOTE],
                )
                assert ack["op"] == "ack", ack
                events, end = await read_until_end(ws, ack["sub"])
                assert end["status"] == "completed"
                started = events[0]["data"]["attachments"]
                assert [a["name"] for a in started] == ["dot.png", "notes.txt"]
                assert ack["attachments"] == [a["id"] for a in started]
                assert started[0]["size"] == len(PNG) and started[0]["id"].startswith("att-")
        nursery.cancel_scope.cancel()
    chat, responses, claude = fake.requests
    data_url = "data:image/png;base64," + IMAGE["data"]
    image_id, note_id = ack["attachments"]
    assert chat["messages"][1]["content"] == [
        {"type": "text", "text": "What is it?"},
        {"type": "text", "text": f"[attachment 'dot.png' (image/png), id {image_id}]"},
        {"type": "image_url", "image_url": {"url": data_url}},
        {"type": "text", "text": f"[attachment 'notes.txt' (text/plain), id {note_id}]\nhello"},
    ]
    assert responses["input"][0]["content"][2] == {"type": "input_image", "image_url": data_url}
    blocks = claude["messages"][0]["content"]
    assert blocks[2] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": IMAGE["data"]},
    }


@autojump
async def test_bad_attachments_are_refused_saying_why(tmp_path: Path) -> None:
    from orchestrator.config import load_config

    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, looked)
        limits = {"attachments": {"max_bytes": 50, "media_types": ["image/*"]}}
        config = load_config(write_server(tmp_path, fake, limits=limits))
        async with memory_server(config) as server, connect(server.url, max_size=None) as ws:

            async def refused(*given: dict[str, Any]) -> str:
                said = await request(
                    ws, op="run", id=1, agent="chat", input="x", attachments=list(given)
                )
                assert said["op"] == "error" and said["code"] == "bad_request", said
                return str(said["message"])

            assert "attachments[0]: 70 bytes; limits.attachments.max_bytes is 50" in await refused(
                IMAGE
            )
            assert "'text/plain' is not allowed" in await refused(
                {**IMAGE, "mediaType": "text/plain"}
            )
            assert "not valid base64" in await refused({**IMAGE, "data": "@@@"})
            assert "either data (base64) or url" in await refused(
                {"name": "a.png", "mediaType": "image/png"}
            )
            assert "an https URL" in await refused(
                {"name": "a", "mediaType": "image/png", "url": "http://x/a"}
            )
            private = {
                "name": "a.png",
                "mediaType": "image/png",
                "url": "https://127.0.0.1:1/a.png",
            }
            assert "non-public address" in await refused(private)
        nursery.cancel_scope.cancel()


async def test_an_image_survives_a_restart_and_a_fork_stored_once(tmp_path: Path) -> None:
    """The model is asked with the image after kill -9 and in a fork; the journal holds
    its bytes once, referred to by both runs."""
    asked = 0

    def slow_first(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        nonlocal asked
        asked += 1
        return Reply("a dot", hang=asked == 1)

    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, slow_first)
        config_path = write_server(tmp_path, fake, storage="sqlite:///journal.db")
        proc, url = await start_serve_process(nursery, config_path)
        async with connect(url, max_size=None) as ws:
            ack = await request(
                ws, op="run", id=1, agent="claude", input="what?", attachments=[IMAGE]
            )
            seen: list[dict[str, Any]] = []
            while not any(e["type"] == "REASONING" for e in seen):  # the model streams
                seen += (await recv(ws)).get("events", [])
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        proc, url = await start_serve_process(nursery, config_path)
        with trio.fail_after(30):
            events = await replay(url, ack["runId"])
        assert events[-1]["data"]["status"] == "completed"
        async with connect(url, max_size=None) as ws:
            fork = await request(ws, op="fork", id="f", runId=ack["runId"], atSeq=1)
            _, end = await read_until_end(ws, fork["sub"])
        assert end["status"] == "completed"
        proc.send_signal(signal.SIGTERM)
        await proc.wait()
        nursery.cancel_scope.cancel()
    for body in fake.requests:  # the first ask, after the restart, in the fork
        image = body["messages"][0]["content"][2]
        assert image["type"] == "image" and image["source"]["data"] == IMAGE["data"]
    assert len(fake.requests) == 3
    with sqlite3.connect(tmp_path / "journal.db") as db:
        assert db.execute("SELECT count(*) FROM blobs").fetchone() == (1,)
        refs = db.execute("SELECT run_id FROM blob_refs ORDER BY run_id").fetchall()
    assert sorted(r[0] for r in refs) == sorted([ack["runId"], fork["runId"]])


async def test_an_mcp_tools_image_reaches_the_model(tmp_path: Path) -> None:
    """OpenAI's tool messages hold no image: it follows them in a user message;
    Anthropic's tool_result holds it. The TOOL_RESULT names it."""
    pytest.importorskip("mcp", reason="MCP tests need the `mcp` extra: pip install -e '.[dev]'")
    from orchestrator.config import ServerConfig, load_config
    from orchestrator.runtime.engine import Orchestrator
    from tests.helpers import collect
    from tests.integration.test_mcp_tools import SERVER

    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        if not any(m["role"] == "tool" for m in messages):
            return Reply(calls=[("demo__dot", {})])
        return Reply("seen")

    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, brain)
        config = load_config(write_server(tmp_path, fake))
        for name in ("chat", "claude"):
            spec = yaml.safe_load((tmp_path / "subagents" / f"{name}.yaml").read_text())
            (tmp_path / "subagents" / f"{name}.yaml").write_text(
                yaml.safe_dump({**spec, "tools": ["demo__dot"]})
            )
        entry = {"command": sys.executable, "args": [SERVER]}
        config = ServerConfig.model_validate(
            {**config.model_dump(), "mcp_servers": {"demo": entry}, "base_dir": tmp_path}
        )
        async with Orchestrator.open(config) as orch:
            chat_events = await collect(orch, "chat", "look")
            claude_events = await collect(orch, "claude", "look")
        nursery.cancel_scope.cancel()
    for events in (chat_events, claude_events):
        (result,) = [e.data for e in events if e.type == "TOOL_RESULT"]
        assert result["content"].startswith("a dot")
        assert result["attachments"][0]["mediaType"] == "image/png"
        assert events[-1].data["status"] == "completed"
    chat_second, claude_second = fake.requests[1], fake.requests[3]
    after = chat_second["messages"][-1]
    assert after["role"] == "user" and chat_second["messages"][-2]["role"] == "tool"
    assert after["content"][0]["text"].startswith("Attachments of the result of demo__dot")
    assert after["content"][2]["image_url"]["url"] == "data:image/png;base64," + IMAGE["data"]
    tool_result = claude_second["messages"][-1]["content"][0]
    assert tool_result["type"] == "tool_result"
    assert tool_result["content"][2]["source"]["data"] == IMAGE["data"]


@autojump
async def test_a_parent_hands_its_image_to_a_child_by_id(tmp_path: Path) -> None:
    """The parent's model reads the image's id from its caption and gives it to
    `agent_spawn`; the child's model gets the image, and no second copy is stored."""
    from orchestrator.config import load_config

    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        if role == "claude":
            return Reply("a dot, seen by the child")
        if any(m["role"] == "tool" for m in messages):
            return Reply("the child said so")
        caption = next(
            part["text"]
            for part in body["messages"][1]["content"]
            if part["type"] == "text" and "id att-" in part["text"]
        )
        given = caption.rsplit("id ", 1)[1].rstrip("]")
        spawn = {"agent_id": "claude", "task": "what is it?", "attachments": [given]}
        return Reply(calls=[("agent_spawn", spawn)])

    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, brain)
        path = write_server(tmp_path, fake)
        spec = yaml.safe_load((tmp_path / "subagents" / "chat.yaml").read_text())
        (tmp_path / "subagents" / "chat.yaml").write_text(
            yaml.safe_dump({**spec, "tools": ["agent_spawn"]})
        )
        async with memory_server(load_config(path)) as server, connect(server.url) as ws:
            ack = await request(ws, op="run", id=1, agent="chat", input="look", attachments=[IMAGE])
            events, end = await read_until_end(ws, ack["sub"])
            blobs = server.app.journal.storage.blobs  # type: ignore[attr-defined]
            stored = await blobs.get_blobs(ack["attachments"])
        nursery.cancel_scope.cancel()
    assert end["status"] == "completed"
    (started,) = [e for e in events if e["type"] == "AGENT_STARTED"]
    assert [a["id"] for a in started["data"]["attachments"]] == ack["attachments"]
    child = next(body for body in fake.requests if "system" in body)  # the Anthropic one
    assert child["messages"][0]["content"][2]["source"]["data"] == IMAGE["data"]
    assert list(stored) == ack["attachments"] and stored[ack["attachments"][0]] == PNG


@autojump
async def test_a_message_sent_with_an_image_reaches_the_next_turn(tmp_path: Path) -> None:
    from orchestrator.config import load_config

    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        if not any(m["role"] == "tool" for m in messages):
            return Reply(calls=[("wait", {"seconds": 1})])
        return Reply("thanks for the picture")

    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, brain)
        path = write_server(tmp_path, fake)
        spec = yaml.safe_load((tmp_path / "subagents" / "chat.yaml").read_text())
        (tmp_path / "subagents" / "chat.yaml").write_text(
            yaml.safe_dump({**spec, "tools": ["wait"]})
        )
        async with memory_server(load_config(path)) as server, connect(server.url) as ws:
            ack = await request(ws, op="run", id=1, agent="chat", input="wait for it")
            events: list[dict[str, Any]] = []
            while not any(e["type"] == "TOOL_CALL" for e in events):
                events += (await recv(ws)).get("events", [])
            sent = await request(
                ws, op="send", id=2, runId=ack["runId"], message="here", attachments=[IMAGE]
            )
            while sent["op"] == "events":  # (the run's events go on meanwhile)
                events += sent["events"]
                sent = await recv(ws)
            assert sent["op"] == "ack" and len(sent["attachments"]) == 1, sent
            more, end = await read_until_end(ws, ack["sub"])
        nursery.cancel_scope.cancel()
    assert end["status"] == "completed"
    (said,) = [e for e in events + more if e["type"] == "USER_MESSAGE"]
    assert said["data"]["attachments"][0]["id"] == sent["attachments"][0]
    last = fake.requests[-1]["messages"][-1]
    assert last["role"] == "user" and last["content"][0] == {"type": "text", "text": "here"}
    assert last["content"][2]["image_url"]["url"].endswith(IMAGE["data"])


DESCRIBER = {
    "description": "says what it got",
    "instructions": "look",
    "script": {"turns": [{"say": "I got {attachments}"}]},
}


@autojump
async def test_ag_ui_image_parts_are_the_runs_attachments(tmp_path: Path) -> None:
    pytest.importorskip("ag_ui.core", reason="AG-UI needs the `agui` extra")
    import httpx

    from tests.integration.test_agui import base, events_of, run_input
    from tests.server_helpers import demo_config

    config = demo_config(tmp_path, server={"ag_ui": True}, extra_agents={"describer": DESCRIBER})
    image = {
        "type": "image",
        "source": {"type": "data", "value": IMAGE["data"], "mimeType": "image/png"},
    }
    body = run_input("x")
    body["messages"] = [
        {"id": "m1", "role": "user", "content": [{"type": "text", "text": "what?"}, image]}
    ]
    async with (
        memory_server(config) as server,
        httpx.AsyncClient(timeout=30) as http,
        http.stream("POST", f"{base(server)}/ag-ui/describer", json=body) as response,
    ):
        got = [event async for event in events_of(response)]
    assert got[-1].type == "RUN_FINISHED"
    assert got[-1].result == f"I got image-2 (image/png, {len(PNG)} bytes)"


@autojump
async def test_a2a_file_parts_go_both_ways(tmp_path: Path) -> None:
    """A FilePart sent to our A2A door is the run's attachment; a child that is an A2A
    agent gets its attachments as FileParts."""
    pytest.importorskip("a2a", reason="the A2A tests need the `a2a` extra")
    from a2a.types import a2a_pb2 as pb

    from tests.integration.test_a2a_serve import a2a_client, collect, http_url, text_after
    from tests.server_helpers import demo_config

    far = tmp_path / "far"
    far.mkdir()
    far_config = demo_config(far, server={"a2a": True}, extra_agents={"describer": DESCRIBER})
    async with memory_server(far_config) as far_server:
        base = http_url(far_server.url)
        sent = pb.Message(message_id="m-1", role=pb.Role.ROLE_USER)
        sent.parts.append(pb.Part(text="what is this?"))
        sent.parts.append(pb.Part(raw=PNG, filename="dot.png", media_type="image/png"))
        async with a2a_client(base, "describer") as client:
            responses = await collect(client, pb.SendMessageRequest(message=sent))
        assert text_after(responses) == f"I got dot.png (image/png, {len(PNG)} bytes)"
        spawn = {
            "name": "agent_spawn",
            "args": {"agent_id": "far", "task": "look", "attachments": ["{attachment}"]},
        }
        agents: dict[str, Any] = {
            "far": {"description": "over A2A", "remote": {"a2a": f"{base}/a2a/describer"}},
            "boss": {
                "description": "asks",
                "instructions": "lead",
                "tools": ["agent_spawn"],
                "script": {"turns": [{"calls": [spawn]}, {"say": "far: {results}"}]},
            },
        }
        async with (
            memory_server(demo_config(tmp_path, extra_agents=agents)) as server,
            connect(server.url, max_size=None) as ws,
        ):
            ack = await request(ws, op="run", id=1, agent="boss", input="go", attachments=[IMAGE])
            with trio.fail_after(30):
                events, end = await read_until_end(ws, ack["sub"])
    assert end["status"] == "completed"
    assert events[-1]["data"]["result"] == f"far: I got dot.png (image/png, {len(PNG)} bytes)"
