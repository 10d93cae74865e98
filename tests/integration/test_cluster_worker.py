"""The cluster worker in this process, against the machine's Redis (edge cases)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import msgspec
import pytest
import trio

from orchestrator.cluster.leases import Leases
from orchestrator.cluster.node import open_node
from orchestrator.cluster.store import ApproveControl, CancelControl, ClusterStore, SendControl
from orchestrator.cluster.worker import Worker
from orchestrator.config import ClusterConfig, ServerConfig
from orchestrator.core.approvals import Answer
from orchestrator.core.bus import Bus, RunSink
from orchestrator.core.events import Event, EventType, encode_event
from orchestrator.runs.host import RunHost
from orchestrator.runtime.engine import Orchestrator
from orchestrator.storage.base import RunRecord
from orchestrator.storage.journal import Journal
from orchestrator.storage.redis import RedisStorage
from orchestrator.storage.runlog import UNFINISHED
from tests.helpers import write_config
from tests.redis_helpers import redis_url  # noqa: F401  (fixture)

pytestmark = pytest.mark.trio


@asynccontextmanager
async def worker_node(
    storage: RedisStorage, config: ServerConfig, cluster: ClusterConfig
) -> AsyncIterator[Worker]:
    """A cluster worker in this process, on `storage`, for the block."""
    leases = Leases()
    async with (
        Journal.open(storage, cluster=True, fenced_write=leases.fence(storage)) as journal,
        Orchestrator.open(config) as orch,
        trio.open_nursery() as nursery,
    ):
        host = RunHost(orch, journal, nursery)
        async with open_node(cluster, journal, host, gateway=False, leases=leases) as node:
            assert node.worker is not None
            yield node.worker
        nursery.cancel_scope.cancel()


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
        async with worker_node(storage, config, cluster) as worker:
            with trio.fail_after(10):
                while await _pending(store):  # noqa: ASYNC110 - Redis state, no signal
                    await trio.sleep(0.1)
            assert worker.takeovers == 0  # nothing to continue
            assert not worker.host.active
        stored = await store.record("run-done")
        assert stored is not None and stored.status == "completed" and stored.attempt == 1
        assert len(await storage.read("run-done", 0, 10)) == 3
        assert await store.client.xlen(store.queue) == 0  # the request left the stream
        assert entry.run_id == "run-done"


async def _pending(store: ClusterStore) -> int:
    summary = await store.client.xpending(store.queue, "workers")
    return int(getattr(summary, "pending", 0))


def _queued(run_id: str) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        agent_id="critic",
        input=f"input of {run_id}",
        status="queued",
        created_at=time.time(),
        root_session_id=f"sess-{run_id}",
    )


async def _died_mid_run(store: ClusterStore, storage: RedisStorage, run_id: str) -> None:
    """A run a worker took, started (RUN_STARTED journaled) and died with: no lease."""
    await store.submit(_queued(run_id))
    (entry,) = await store.take("dead-worker", 1, 0.1)
    token = await store.acquire(run_id, "dead-worker", 60)
    assert token is not None and entry.run_id == run_id
    started = Event(
        run_id, 1, 1.0, EventType.RUN_STARTED, None, False,
        {"agentId": "critic", "input": f"input of {run_id}"},
    )  # fmt: skip
    running = msgspec.structs.replace(_queued(run_id), status="running", attempt=1, last_seq=1)
    await storage.append([running], [(run_id, 1, encode_event(started))], {run_id: token})
    await store.client.delete([store.lease_key(run_id)])  # as if it had expired


async def _until_finished(store: ClusterStore, *run_ids: str) -> list[RunRecord]:
    records: list[RunRecord] = []
    with trio.fail_after(20):
        while True:
            raws = [await store.client.hget(store.runs, i) for i in run_ids]  # (not patched)
            records = [msgspec.json.decode(r, type=RunRecord) for r in raws if r is not None]
            if len(records) == len(run_ids) and all(r.status not in UNFINISHED for r in records):
                return records
            await trio.sleep(0.1)


async def test_a_stale_run_behind_long_live_runs_is_claimed(
    redis_url: str,  # noqa: F811
) -> None:
    """The oldest pending requests are live runs (leased): claiming looks past them."""
    async with RedisStorage.open(redis_url, durability="relaxed") as storage:
        store = ClusterStore(storage, "t")
        await store.ensure_group()
        for i in range(3):  # long runs whose workers are fine
            await store.submit(_queued(f"run-live-{i}"))
            await store.take("busy-worker", 1, 0.1)
            assert await store.acquire(f"run-live-{i}", "busy-worker", 60) is not None
        await _died_mid_run(store, storage, "run-stale")
        await trio.sleep(0.2)
        claimed = await store.claim_stale("taker", 0.1, 1)
        assert [e.run_id for e in claimed] == ["run-stale"]
        assert await store.claim_stale("taker-2", 0.1, 5) == [], "claimed twice"


async def test_attempts_count_workers_that_took_the_run_not_claims(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two stale runs claimed together; reading one of them fails for a while. The other
    is taken over at once; neither's attempt counts the failed claims (issue 31)."""
    config = write_config(tmp_path, {"critic": {"description": "d", "instructions": "i"}})
    cluster = ClusterConfig(name="t", lease_seconds=1, max_runs=4)
    async with RedisStorage.open(redis_url, durability="relaxed") as storage:
        store = ClusterStore(storage, "t")
        await store.ensure_group()
        await _died_mid_run(store, storage, "run-a")
        await _died_mid_run(store, storage, "run-b")
        refusals = 0
        real_record = ClusterStore.record

        async def flaky_record(self: ClusterStore, run_id: str) -> RunRecord | None:
            nonlocal refusals
            if run_id == "run-a" and refusals < 3:
                refusals += 1
                raise ConnectionError("redis went away for a moment")
            return await real_record(self, run_id)

        monkeypatch.setattr(ClusterStore, "record", flaky_record)
        async with worker_node(storage, config, cluster) as worker:
            a, b = await _until_finished(store, "run-a", "run-b")
            assert refusals == 3
            assert (a.status, a.attempt) == ("completed", 2)
            assert (b.status, b.attempt) == ("completed", 2)
            assert worker.takeovers == 2 and worker.takeover_failures == 0
        events = [msgspec.json.decode(raw) for raw in await storage.read("run-a", 0, 100)]
        assert [e["type"] for e in events].count("RUN_STARTED") == 1
        (resumed,) = [e for e in events if e["type"] == "RUN_RESUMED"]
        assert resumed["data"]["attempt"] == 2


async def test_a_takeover_that_keeps_failing_ends_the_run_worker_lost(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each failed takeover lets the lease go at once (counted, logged); after
    `max_attempts` the run ends failed `worker_lost`, saying why — never `running`
    for ever, and no lease is left renewed for it."""
    from orchestrator.runs import resume as resume_module

    async def broken_plan(*args: object) -> None:
        raise RuntimeError("the journal cannot be read back")

    monkeypatch.setattr(resume_module, "plan_resume", broken_plan)
    config = write_config(tmp_path, {"critic": {"description": "d", "instructions": "i"}})
    cluster = ClusterConfig(name="t", lease_seconds=1, max_runs=4, max_attempts=3)
    async with RedisStorage.open(redis_url, durability="relaxed") as storage:
        store = ClusterStore(storage, "t")
        await store.ensure_group()
        await _died_mid_run(store, storage, "run-x")
        async with worker_node(storage, config, cluster) as worker:
            (record,) = await _until_finished(store, "run-x")
            assert worker.takeover_failures == 2  # attempts 2 and 3
            assert not worker.owned
        assert (record.status, record.attempt) == ("failed", 4)
        events = [msgspec.json.decode(raw) for raw in await storage.read("run-x", 0, 100)]
        finished = events[-1]
        assert finished["type"] == "RUN_FINISHED"
        assert finished["data"]["errorType"] == "worker_lost"
        assert "3 worker(s) took the run" in finished["data"]["error"]
        assert "the journal cannot be read back" in finished["data"]["error"]
        assert not await store.client.exists([store.lease_key("run-x")])
        assert await store.client.xlen(store.queue) == 0


async def test_a_run_its_worker_never_wrote_to_starts_with_its_input(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    """Its worker took the lease and died before its first write: the next worker
    starts the run (RUN_STARTED with its input), it does not "resume" an empty one."""
    config = write_config(tmp_path, {"critic": {"description": "d", "instructions": "i"}})
    cluster = ClusterConfig(name="t", lease_seconds=1, max_runs=4)
    async with RedisStorage.open(redis_url, durability="relaxed") as storage:
        store = ClusterStore(storage, "t")
        await store.ensure_group()
        await store.submit(_queued("run-quiet"))
        await store.take("dead-worker", 1, 0.1)
        assert await store.acquire("run-quiet", "dead-worker", 60) is not None
        await store.client.delete([store.lease_key("run-quiet")])  # as if it had expired
        async with worker_node(storage, config, cluster) as worker:
            (record,) = await _until_finished(store, "run-quiet")
            assert worker.takeovers == 0
        assert (record.status, record.attempt) == ("completed", 2)
        events = [msgspec.json.decode(raw) for raw in await storage.read("run-quiet", 0, 100)]
        kinds = [e["type"] for e in events]
        assert kinds[0] == "RUN_STARTED" and "RUN_RESUMED" not in kinds
        assert events[0]["data"]["input"] == "input of run-quiet"


async def test_a_workers_journal_is_fenced_from_its_first_write(
    redis_url: str,  # noqa: F811
) -> None:
    """The fence is given when the journal opens (not set on it afterwards): a write
    for a run this worker holds no lease of is refused, even the very first."""
    leases = Leases()
    async with RedisStorage.open(redis_url, durability="relaxed") as storage:
        refused: list[list[str]] = []
        async with Journal.open(
            storage, cluster=True, fenced_write=leases.fence(storage)
        ) as journal:
            journal.writer.fenced.subscribe(refused.append)
            journal.create_run(
                RunRecord(
                    run_id="run-x",
                    agent_id="critic",
                    input="x",
                    status="running",
                    created_at=1.0,
                    root_session_id="s",
                )
            )
            bus = Bus(RunSink("run-x", "s", journal.outlet("run-x")))
            bus.emit_nowait(EventType.RUN_STARTED, {"agentId": "critic", "input": "x"})
            await journal.writer.flush()
        assert refused == [["run-x"]]
        assert await storage.load() == []


async def test_an_answer_is_noted_and_queued_for_the_owner_in_one_step(
    redis_url: str,  # noqa: F811
) -> None:
    """Regression (chaos, seed 1): a gateway noted the first answer (`HSETNX`), then
    queued it for the run's owner in a second round trip; killed in between, the call
    stayed `already answered` for every later answer and waited for ever. Now both
    happen in one script: the first answer is in the control stream once noted, and a
    later one queues nothing."""
    async with RedisStorage.open(redis_url, durability="relaxed") as storage:
        store = ClusterStore(storage, "t")
        call = ("agent:writer:1", "call_0")
        first = Answer(tool_call_id="call_0", decision="approve", agent_key=call[0])
        second = msgspec.structs.replace(first, decision="deny")
        assert await store.answer("run-a", call, ApproveControl(first)) is None
        assert await store.answer("run-a", call, ApproveControl(second)) == "approve"
        assert await store.answered("run-a", "call_0", msgspec.UNSET) == "approve"
        requests = await store.read_control({"run-a": "0-0"}, block=0.01)
        assert [c for _, _, c in requests] == [ApproveControl(first)]


async def test_control_requests_are_typed_and_an_unreadable_one_is_passed(
    redis_url: str,  # noqa: F811
) -> None:
    """Each control is one typed entry; one this version cannot read is returned as
    None (the worker moves its cursor past it) instead of failing the loop."""
    async with RedisStorage.open(redis_url, durability="relaxed") as storage:
        store = ClusterStore(storage, "t")
        await store.send_control("run-b", CancelControl("agent:a:1", "enough"))
        await store.client.xadd(store.control_key("run-b"), {b"op": b"send", b"m": b"old"})
        await store.send_control("run-b", SendControl(None, "hello"))
        requests = await store.read_control({"run-b": "0-0"}, block=0.01)
        assert [c for _, _, c in requests] == [
            CancelControl("agent:a:1", "enough"),
            None,
            SendControl(None, "hello"),
        ]
