"""Structured answers through a real server: the `run` op's `outputSchema` (events,
a blocking call's result, a refused schema), across a restart and in a fork; and
through the doors — MCP (`structuredContent` and the tool's `outputSchema`), A2A (a
DataPart, read by the `a2a-sdk` client) and AG-UI (the run's `result` is the value)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from websockets.trio.client import connect

from tests.integration.test_server_lifecycle import start_serve_process
from tests.memory_server import autojump, memory_server
from tests.server_helpers import demo_config, read_until_end, recv, replay, request, running_server

PERSON: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def extractor(first_sleep: float = 0.0, schema: bool = False) -> dict[str, Any]:
    """A scripted root whose first answer misses a field and whose second is right."""
    spec: dict[str, Any] = {
        "description": "Extracts a person.",
        "instructions": "Extract the person.",
        "script": {
            "turns": [
                {"say": '{"name": "Ada"}'},
                {"sleep": first_sleep, "say": '```json\n{"name": "Ada", "age": 36}\n```'},
            ]
        },
    }
    if schema:
        spec["output_schema"] = PERSON
    return spec


def root_messages(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["type"] == "USER_MESSAGE"]


@autojump
async def test_a_run_asks_its_root_for_a_schema(tmp_path: Path) -> None:
    config = demo_config(tmp_path, extra_agents={"extractor": extractor()})
    async with memory_server(config) as server, connect(server.url, max_size=None) as ws:
        ack = await request(
            ws, op="run", id="r", agent="extractor", input="Ada is 36", outputSchema=PERSON
        )
        assert ack["op"] == "ack", ack
        events, end = await read_until_end(ws, ack["sub"])
        assert end["status"] == "completed"
        assert events[0]["data"]["outputSchema"] == PERSON
        (refusal,) = root_messages(events)
        assert refusal["outputInvalid"] and "'age' is a required property" in refusal["text"]
        finished = events[-1]["data"]
        assert finished["structured"] == {"name": "Ada", "age": 36}
        assert finished["result"] == '{"name":"Ada","age":36}'

        blocking = await request(
            ws, op="run", id="b", agent="extractor", input="x", stream=False, outputSchema=PERSON
        )
        assert blocking["op"] == "ack"
        result = await recv(ws)
        assert result["op"] == "result" and result["structured"] == {"name": "Ada", "age": 36}

        bad = {**PERSON, "properties": {"name": {"type": "string", "pattern": "^(a+)+$"}}}
        refused = await request(
            ws, op="run", id="x", agent="extractor", input="x", outputSchema=bad
        )
        assert refused["op"] == "error" and refused["code"] == "bad_request"
        assert refused["message"].startswith("outputSchema.properties.name.pattern: not allowed")

        # A fork goes on with the schema the run was asked for.
        fork = await request(ws, op="fork", id="f", runId=ack["runId"], atSeq=1)
        forked, end = await read_until_end(ws, fork["sub"])
        assert end["status"] == "completed"
        assert forked[-1]["data"]["structured"] == {"name": "Ada", "age": 36}


async def test_the_schema_of_a_run_survives_a_restart(tmp_path: Path) -> None:
    """Its record keeps the schema: the resumed root is asked for it, and checked."""
    config_path = tmp_path / "server.yaml"
    agents = {"extractor": extractor(first_sleep=30)}
    demo_config(tmp_path, storage="sqlite:///journal.db", extra_agents=agents)
    seen: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        proc, url = await start_serve_process(nursery, config_path)
        async with connect(url, max_size=None) as ws:
            ack = await request(
                ws, op="run", id=1, agent="extractor", input="q", outputSchema=PERSON
            )
            while not root_messages(seen):  # refused once; its second turn sleeps
                seen += (await recv(ws)).get("events", [])
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        # The script's second turn no longer sleeps: it answers as soon as it is asked.
        spec = tmp_path / "subagents" / "extractor.yaml"
        spec.write_text(json.dumps(extractor()), encoding="utf-8")
        proc, url = await start_serve_process(nursery, config_path)
        with trio.fail_after(30):
            events = await replay(url, ack["runId"])
        proc.send_signal(signal.SIGTERM)
        await proc.wait()
    assert any(e["type"] == "RUN_RESUMED" for e in events)
    assert events[-1]["data"]["status"] == "completed"
    assert events[-1]["data"]["structured"] == {"name": "Ada", "age": 36}


async def test_mcp_declares_and_returns_the_structured_answer(tmp_path: Path) -> None:
    pytest.importorskip("mcp", reason="MCP tests need the `mcp` extra: pip install -e '.[dev]'")
    from tests.integration.test_mcp_endpoint import base_url, mcp_client

    agents = {"extractor": extractor(schema=True)}
    config = demo_config(tmp_path, server={"mcp": True}, extra_agents=agents)
    async with running_server(config) as server, mcp_client(base_url(server)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        declared = tools["extractor"].output_schema
        assert declared is not None and declared["properties"]["structured"] == PERSON
        assert "structured" in declared["required"]
        assert "structured" not in tools["planner"].output_schema["required"]
        result = await client.call_tool("extractor", {"task": "Ada is 36"})
    assert not result.is_error
    assert result.structured_content["structured"] == {"name": "Ada", "age": 36}
    assert result.content[0].text == '{"name":"Ada","age":36}'


@autojump
async def test_a2a_answers_with_a_data_part(tmp_path: Path) -> None:
    pytest.importorskip("a2a", reason="the A2A tests need the `a2a` extra")
    from a2a.types import a2a_pb2 as pb
    from google.protobuf import json_format

    from tests.integration.test_a2a_serve import a2a_client, collect, http_url, message

    agents = {"extractor": extractor(schema=True)}
    config = demo_config(tmp_path, server={"a2a": True}, extra_agents=agents)
    async with (
        memory_server(config) as server,
        a2a_client(http_url(server.url), "extractor") as client,
    ):
        responses = await collect(client, message("Ada is 36"))
    chunks = [r.artifact_update for r in responses if r.WhichOneof("payload") == "artifact_update"]
    last = chunks[-1]
    assert not last.append  # it replaces what streamed
    (part,) = last.artifact.parts
    assert part.WhichOneof("content") == "data" and part.media_type == "application/json"
    assert json_format.MessageToDict(part.data) == {"name": "Ada", "age": 36}
    final = responses[-1].status_update.status
    assert final.state == pb.TaskState.TASK_STATE_COMPLETED


@autojump
async def test_ag_ui_finishes_with_the_value(tmp_path: Path) -> None:
    pytest.importorskip("ag_ui.core", reason="AG-UI needs the `agui` extra")
    from tests.integration.test_agui import base, events_of, run_input

    agents = {"extractor": extractor(schema=True)}
    config = demo_config(tmp_path, server={"ag_ui": True}, extra_agents=agents)
    async with (
        memory_server(config) as server,
        httpx.AsyncClient(timeout=30) as http,
        http.stream("POST", f"{base(server)}/ag-ui/extractor", json=run_input("Ada")) as response,
    ):
        got = [event async for event in events_of(response)]
    assert got[-1].type == "RUN_FINISHED" and got[-1].result == {"name": "Ada", "age": 36}


async def test_the_cli_asks_the_root_for_a_schema_from_a_file(tmp_path: Path) -> None:
    import sys

    from tests.helpers import REPO

    demo_config(tmp_path, extra_agents={"extractor": extractor()})
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "age.json").write_text('{"type": "integer", "minimum": 0}')
    person = {**PERSON, "properties": {**PERSON["properties"], "age": {"$ref": "age.json"}}}
    (tmp_path / "schemas" / "person.json").write_text(json.dumps(person))
    command = [sys.executable, "-m", "orchestrator", "run", "extractor", "Ada is 36"]
    flags = ["--no-stream", "--output-schema", "schemas/person.json", "--config", "server.yaml"]
    done = await trio.run_process(
        [*command, *flags],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().strip() == '{"name":"Ada","age":36}'
    (tmp_path / "schemas" / "bad.json").write_text('{"type": "int"}')
    flags[2] = "schemas/bad.json"
    done = await trio.run_process(
        [*command, *flags],
        cwd=tmp_path,
        capture_stderr=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode != 0
    assert "--output-schema schemas/bad.json.type: 'int' is not valid" in done.stderr.decode()
