"""Server frames: one Struct each, encoded as the contract writes them, read back."""

from __future__ import annotations

import json

import msgspec
import pytest

from orchestrator import protocol
from orchestrator.core.events import Event, EventType, RemoteRef, Source, decode_event, encode_event


@pytest.mark.parametrize(
    ("frame", "wire"),
    [
        (protocol.Ack(id=1), {"op": "ack", "id": 1}),
        (
            protocol.Ack(id="r", run_id="run-1", sub="s1"),
            {"op": "ack", "id": "r", "runId": "run-1", "sub": "s1"},
        ),
        (protocol.Pong(), {"op": "pong"}),
        (
            protocol.End(sub="s1", run_id="run-1", status="completed"),
            {"op": "end", "sub": "s1", "runId": "run-1", "status": "completed"},
        ),
        (
            protocol.Gap(sub="s1", from_seq=3, to_seq=9),
            {"op": "gap", "sub": "s1", "fromSeq": 3, "toSeq": 9},
        ),
        (
            protocol.ErrorFrame(code="not_found", message="unknown run 'run-1'", id=7),
            {"op": "error", "code": "not_found", "message": "unknown run 'run-1'", "id": 7},
        ),
        (
            protocol.Result(run_id="run-1", status="failed", text=None, error="boom"),
            {"op": "result", "runId": "run-1", "status": "failed", "text": None, "error": "boom"},
        ),
        (
            protocol.RunsReply(
                runs=[
                    protocol.RunInfo(
                        run_id="run-1",
                        agent_id="planner",
                        status="running",
                        created_at=1.5,
                        finished_at=None,
                        owner=None,
                    )
                ],
                more=False,
                id=2,
            ),
            {
                "op": "runs",
                "runs": [
                    {
                        "runId": "run-1",
                        "agentId": "planner",
                        "status": "running",
                        "createdAt": 1.5,
                        "finishedAt": None,
                        "owner": None,
                    }
                ],
                "more": False,
                "id": 2,
            },
        ),
    ],
)
def test_frames_encode_as_the_contract_writes_them(
    frame: protocol.ServerFrame, wire: dict[str, object]
) -> None:
    raw = protocol.encode(frame)
    assert json.loads(raw) == wire
    assert protocol.decode_server_frame(raw) == frame


def test_the_fast_events_frame_reads_back_as_events() -> None:
    event = Event(run_id="run-1", seq=4, ts=1.0, type=EventType.REASONING, source=None)
    raw = protocol.events_frame("s1", [encode_event(event)])
    assert protocol.decode_server_frame(raw) == protocol.Events(sub="s1", events=[event])


def test_an_error_message_keeps_its_quotes() -> None:
    r"""Regression: `str(exc).strip("'\"")` cut the closing quote off `…run 'run-1'`."""
    raw = protocol.error_frame("not_found", "agent 'k' is not part of run 'run-1'")
    frame = protocol.decode_server_frame(raw)
    assert isinstance(frame, protocol.ErrorFrame)
    assert frame.message.endswith("run 'run-1'")


def test_a_forwarded_events_remote_reference_survives_every_reader() -> None:
    """Regression: `watch --json` and the typed client decoded `source` as a plain
    Source and dropped `remote {runId, seq}`, which a raw `subscribe` showed."""
    here = Source(
        agent_key="agent:far:1",
        agent_id="far",
        agent_name="far",
        session_id="sub-1",
        parent_session_id="root-1",
        depth=1,
        path="root-1/far",
    )
    local = Event(run_id="run-1", seq=3, ts=1.0, type=EventType.REASONING, source=here)
    assert "remote" not in json.loads(encode_event(local))["source"]  # local: unchanged
    forwarded = msgspec.structs.replace(
        local, source=msgspec.structs.replace(here, remote=RemoteRef(run_id="run-9", seq=7))
    )
    wire = json.loads(encode_event(forwarded))
    assert wire["source"]["remote"] == {"runId": "run-9", "seq": 7}
    frame = protocol.decode_server_frame(protocol.events_frame("s1", [encode_event(forwarded)]))
    assert isinstance(frame, protocol.Events)
    (event,) = frame.events
    assert event.source is not None and event.source.remote == RemoteRef(run_id="run-9", seq=7)
    assert json.loads(encode_event(event)) == wire  # what `watch --json` prints
    assert decode_event(encode_event(local)).source == here
