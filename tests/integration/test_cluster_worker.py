"""The cluster worker in this process, against the machine's Redis (edge cases)."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
import pytest
import trio

from orchestrator.cluster.node import open_node
from orchestrator.cluster.store import ClusterStore
from orchestrator.config import ClusterConfig
from orchestrator.core.events import Event, EventType, encode_event
from orchestrator.runs.host import RunHost
from orchestrator.runtime.engine import Orchestrator
from orchestrator.storage.base import RunRecord
from orchestrator.storage.journal import Journal
from orchestrator.storage.redis import RedisStorage
from tests.helpers import write_config
from tests.redis_helpers import redis_url  # noqa: F401  (fixture)

pytestmark = pytest.mark.trio


async def test_a_run_that_ended_just_before_its_worker_died_is_only_released(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    """Its RUN_FINISHED is journaled but its queue entry was never acknowledged: the
    worker that claims it drops the entry and leaves the run (and its record) alone."""
    config = write_config(tmp_path, {"critic": {"description": "d", "instructions": "i"}})
    cluster = ClusterConfig(name="t", lease_seconds=1, max_runs=2)
    record = RunRecord(
        run_id="run-done",
        agent_id="critic",
        input="x",
        status="queued",
        created_at=time.time(),
        root_session_id="s",
    )
    async with RedisStorage.open(redis_url, durability="relaxed") as storage:
        store = ClusterStore(storage, "t")
        await store.ensure_group()
        await store.submit(record)
        (entry,) = await store.take("dead-worker", 1, 0.1)  # taken, never acknowledged
        events = [
            Event("run-done", 1, 1.0, EventType.RUN_STARTED, None, False, {"agentId": "critic"}),
            Event("run-done", 2, 2.0, EventType.AGENT_RESULT, None, True, {"text": "ok"}),
            Event("run-done", 3, 3.0, EventType.RUN_FINISHED, None, True, {"status": "completed"}),
        ]
        finished = msgspec.structs.replace(record, status="completed", last_seq=3, attempt=1)
        await storage.write([finished], [("run-done", e.seq, encode_event(e)) for e in events])
        async with (
            Journal.open(storage, cluster=True) as journal,
            Orchestrator.open(config) as orch,
            trio.open_nursery() as nursery,
        ):
            host = RunHost(orch, journal, nursery)
            async with open_node(cluster, journal, host, gateway=False) as node:
                assert node.worker is not None
                with trio.fail_after(10):
                    while await _pending(store):  # noqa: ASYNC110 - Redis state, no signal
                        await trio.sleep(0.1)
                assert node.worker.takeovers == 0  # nothing to continue
                assert not host.active
            nursery.cancel_scope.cancel()
        stored = await store.record("run-done")
        assert stored is not None and stored.status == "completed" and stored.attempt == 1
        assert len(await storage.read("run-done", 0, 10)) == 3
        assert await store.client.xlen(store.queue) == 0  # the request left the stream
        assert entry.run_id == "run-done"


async def _pending(store: ClusterStore) -> int:
    summary = await store.client.xpending(store.queue, "workers")
    return int(getattr(summary, "pending", 0))
