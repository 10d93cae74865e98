"""Feeds over a real WebSocket server: the tree, filters, resume, slow consumers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
from websockets.trio.client import connect

from tests.server_helpers import (
    demo_config,
    read_until_end,
    recv,
    replay,
    request,
    run_to_end,
    running_server,
)


def descends(session: str, ancestor: str, parents: dict[str, str]) -> bool:
    while True:
        if session == ancestor:
            return True
        if session not in parents:
            return False
        session = parents[session]


async def test_tree_over_websocket_tags_and_ordering(tmp_path: Path) -> None:
    async with running_server(demo_config(tmp_path)) as server:
        run_id, events, end = await run_to_end(server.url, task="trio")
        assert end == {"op": "end", "sub": end["sub"], "runId": run_id, "status": "completed"}
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED"
        starts = [e for e in events if e["type"] == "AGENT_STARTED"]
        assert sorted((s["source"]["depth"], s["source"]["agentId"]) for s in starts) == [
            (1, "researcher"),
            (1, "researcher"),
            (2, "critic"),
            (2, "critic"),
        ]
        root_session = starts[0]["source"]["parentSessionId"]
        parents = {
            e["source"]["sessionId"]: e["source"]["parentSessionId"] for e in events if e["source"]
        }
        for start in starts:
            src = start["source"]
            if src["depth"] == 1:
                assert src["path"] == f"{root_session}/researcher"
            else:
                assert src["path"] == f"{root_session}/researcher/critic"
            result = next(
                e
                for e in events
                if e["type"] == "TOOL_RESULT"
                and e["data"]["toolCallId"] == src["parentToolCallId"]
                and (e["source"]["sessionId"] if e["source"] else root_session)
                == src["parentSessionId"]
            )
            subtree = [
                e
                for e in events
                if e["source"] and descends(e["source"]["sessionId"], src["sessionId"], parents)
            ]
            assert max(e["seq"] for e in subtree) < result["seq"]
        # A late subscriber replays exactly the same events from the journal.
        assert await replay(server.url, run_id) == events


FILTERS: list[tuple[dict[str, Any], Any]] = [
    ({"maxDepth": 0}, lambda e, root: e["source"] is None),
    ({"maxDepth": 1}, lambda e, root: e["source"] is None or e["source"]["depth"] <= 1),
    ({"pathPrefix": "ROOT/researcher"}, lambda e, root: e["source"] is not None),
    (
        {"pathPrefix": "ROOT/researcher/critic"},
        lambda e, root: e["source"] is not None and e["source"]["agentId"] == "critic",
    ),
    ({"pathPrefix": "ROOT/research"}, lambda e, root: False),
    (
        {"pathGlob": "**/critic"},
        lambda e, root: e["source"] is not None and e["source"]["agentId"] == "critic",
    ),
    (
        {"pathGlob": "*/researcher"},
        lambda e, root: e["source"] is not None and e["source"]["depth"] == 1,
    ),
    ({"pathGlob": "ROOT"}, lambda e, root: e["source"] is None),
    ({"agentIds": ["planner"]}, lambda e, root: e["source"] is None),
    ({"agentIds": ["critic", "researcher"]}, lambda e, root: e["source"] is not None),
    (
        {"types": ["AGENT_STARTED", "AGENT_RESULT"]},
        lambda e, root: e["type"] in ("AGENT_STARTED", "AGENT_RESULT"),
    ),
    (
        {"maxDepth": 1, "types": ["TOOL_RESULT"], "agentIds": ["researcher"]},
        lambda e, root: (
            e["type"] == "TOOL_RESULT" and e["source"] is not None and e["source"]["depth"] == 1
        ),
    ),
]


async def test_every_filter_equals_a_filtered_full_replay(tmp_path: Path) -> None:
    async with running_server(demo_config(tmp_path)) as server:
        run_id, everything, _ = await run_to_end(server.url)
        root = next(e for e in everything if e["type"] == "AGENT_STARTED")["source"][
            "parentSessionId"
        ]
        for raw_filter, predicate in FILTERS:
            flt = json.loads(json.dumps(raw_filter).replace("ROOT", root))
            expected = [e for e in everything if predicate(e, root)]
            got = await replay(server.url, run_id, filter=flt)
            assert got == expected, flt
            # And resuming a filtered feed in the middle gives the rest, no more.
            if len(expected) > 2:
                middle = expected[len(expected) // 2]["seq"]
                rest = await replay(server.url, run_id, after_seq=middle, filter=flt)
                assert rest == [e for e in expected if e["seq"] > middle]


async def test_live_filtered_feed_equals_replay(tmp_path: Path) -> None:
    async with running_server(demo_config(tmp_path, token_delay=0.002)) as server:
        async with connect(server.url, max_size=None) as ws:
            ack = await request(
                ws, op="run", id=1, agent="planner", input="q", filter={"pathGlob": "**/critic"}
            )
            live, end = await read_until_end(ws, ack["sub"])
        assert live and all(e["source"]["agentId"] == "critic" for e in live)
        assert await replay(server.url, ack["runId"], filter={"pathGlob": "**/critic"}) == live
        assert end["status"] == "completed"


async def test_status_detail_drops_deltas(tmp_path: Path) -> None:
    async with running_server(demo_config(tmp_path)) as server:
        run_id, everything, _ = await run_to_end(server.url)
        status = await replay(server.url, run_id, detail="status")
        assert status == [
            e for e in everything if e["type"] not in ("REASONING", "TOOL_CALL_DELTA")
        ]


async def test_connection_dropped_mid_run_resumes_without_loss_or_duplicates(
    tmp_path: Path,
) -> None:
    async with running_server(demo_config(tmp_path, token_delay=0.003)) as server:
        seen: list[dict[str, Any]] = []
        async with connect(server.url, max_size=None) as ws:
            ack = await request(ws, op="run", id=1, agent="planner", input="q")
            run_id = ack["runId"]
            while len(seen) < 40:
                frame = await recv(ws)
                if frame["op"] == "events":
                    seen.extend(frame["events"])
            # Drop the TCP connection abruptly (no closing handshake).
            await trio.aclose_forcefully(ws.stream)
        for _ in range(3):  # resume several times while the run is still going
            async with connect(server.url, max_size=None) as ws:
                ack = await request(
                    ws, op="subscribe", id=2, runId=run_id, afterSeq=seen[-1]["seq"]
                )
                target = len(seen) + 30
                ended = False
                while len(seen) < target:
                    frame = await recv(ws)
                    if frame["op"] == "events":
                        seen.extend(frame["events"])
                    elif frame["op"] == "end":
                        ended = True
                        break
                if ended:
                    break
        seen += await replay(server.url, run_id, after_seq=seen[-1]["seq"])
        assert [e["seq"] for e in seen] == list(range(1, len(seen) + 1))
        assert seen == await replay(server.url, run_id)
        assert seen[-1]["type"] == "RUN_FINISHED"


async def test_slow_consumer_does_not_slow_the_run_or_other_clients(tmp_path: Path) -> None:
    big = {
        "description": "streams a lot",
        "instructions": "talk",
        "script": {"turns": [{"say": "word " * 60000}]},
    }
    config = demo_config(tmp_path, extra_agents={"talker": big})
    async with running_server(config) as server:
        app = server.app
        async with (
            connect(server.url, max_size=None, max_queue=1) as slow,
            connect(server.url, max_size=None) as fast,
        ):
            # The slow client starts the run, reads its ack, then stops reading.
            ack = await request(slow, op="run", id=1, agent="talker", input="x")
            run_id = ack["runId"]
            fast_ack = await request(fast, op="subscribe", id=1, runId=run_id)
            events, end = await read_until_end(fast, fast_ack["sub"])
            assert end["status"] == "completed"
            assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
            log = app.journal.get(run_id)
            assert log.finished and not log.pending
            # The run and the fast client are done while the slow client is far behind,
            # and the server holds at most the one frame it is sending to it.
            slow_conn = next(c for c in app.connections if ack["sub"] in c.feeds)
            slow_feed = slow_conn.feeds[ack["sub"]]
            assert slow_feed.cursor < log.committed - 1000
            assert slow_conn._send_lock.locked()
            assert slow_conn._send_lock.statistics().tasks_waiting == 0
            assert app.slowest_lag() == log.committed - slow_feed.cursor
            # Once it reads again, it catches up from the journal, complete and in order.
            slow_events, slow_end = await read_until_end(slow, ack["sub"])
            assert slow_end["status"] == "completed"
            assert slow_events == events


@pytest.mark.parametrize("storage", ["memory://", "sqlite:///db/journal.db"])
async def test_many_runs_many_subscriptions_on_one_connection(tmp_path: Path, storage: str) -> None:
    async with (
        running_server(demo_config(tmp_path, storage=storage)) as server,
        connect(server.url, max_size=None) as ws,
    ):
        for i in range(3):
            await ws.send(json.dumps({"op": "run", "id": i, "agent": "critic", "input": f"t{i}"}))
        subs: dict[str, str] = {}
        events: dict[str, list[dict[str, Any]]] = {}
        ended: set[str] = set()
        while len(ended) < 3:
            frame = await recv(ws)
            if frame["op"] == "ack":
                subs[frame["sub"]] = frame["runId"]
            elif frame["op"] == "events":
                assert frame["sub"] in subs, "an ack comes before its subscription's events"
                events.setdefault(frame["sub"], []).extend(frame["events"])
            elif frame["op"] == "end":
                ended.add(frame["sub"])
        assert len(set(subs.values())) == 3
        for sub, run_id in subs.items():
            assert {e["runId"] for e in events[sub]} == {run_id}
            assert [e["seq"] for e in events[sub]] == list(range(1, len(events[sub]) + 1))
