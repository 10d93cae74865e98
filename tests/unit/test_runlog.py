"""`RunLog` owns its transitions: the writer, the journal, a mirror and a worker move
it through its methods, and its positions and mode cannot be assigned from outside."""

from __future__ import annotations

import pytest

from orchestrator.core.events import Event, EventType
from orchestrator.storage.base import RunRecord
from orchestrator.storage.runlog import Entry, RunLog


def record(last_seq: int = 0, status: str = "running") -> RunRecord:
    return RunRecord(
        run_id="run-1",
        agent_id="planner",
        input="go",
        status=status,
        created_at=0.0,
        root_session_id="session-root",
        last_seq=last_seq,
    )


def entry(seq: int, kind: EventType = EventType.REASONING, **data: object) -> Entry:
    event = Event("run-1", seq, float(seq), kind, None, False, dict(data))
    return Entry(event, b"{}", seq)


def test_a_write_takes_the_queue_and_commits_it_or_puts_it_back() -> None:
    log = RunLog(record())
    log.pending.extend([entry(1), entry(2)])
    batch = log.take()
    assert [e.seq for e in batch] == [1, 2] and log.writing == 2 and not log.pending
    log.pending.append(entry(3))
    log.put_back(batch)  # the write failed: ahead of what came since
    assert [e.seq for e in log.pending] == [1, 2, 3] and log.writing == 0
    log.commit(log.take())
    assert log.committed == 3 == log.record.last_seq and log.writing == 0
    assert [e.seq for e in log.entries] == [1, 2, 3] and log.tail_first == 1
    assert log.finished_status is None
    log.record.status = "completed"
    log.commit([])  # the record alone
    assert log.finished and log.finished_status == "completed"


def test_a_queued_record_written_alone_is_not_finished() -> None:
    """Regression: a thread's enqueued run is written `queued` before it has an event;
    the commit of its record took any status but `running` as the run's end, and its
    subscribers got `end` before it started."""
    log = RunLog(record(status="queued"))
    log.commit([])
    assert log.finished_status is None and not log.finished


def test_a_refused_write_fences_the_run_and_drops_its_queue() -> None:
    log = RunLog(record())
    log.pending.append(entry(1))
    log.take()
    log.pending.append(entry(2))
    log.refuse()
    assert log.fenced and log.remote and log.writing == 0 and not log.pending
    assert log.committed == 0


def test_owning_a_mirror_that_was_behind_reads_the_rest_from_storage() -> None:
    log = RunLog(record(), remote=True)
    log.append_mirrored([entry(1), entry(2)])
    assert log.committed == 2 and log.remote
    log.own(record(last_seq=5))
    assert not log.remote and not log.fenced and log.finished_status is None
    assert log.committed == 5 and log.tail_first == 6 and not log.entries
    log.fence()
    log.mirror()  # its copy stopped: a mirror again, not fenced
    assert log.remote and not log.fenced


def test_a_mirror_that_skips_restarts_its_tail_and_ends_with_run_finished() -> None:
    log = RunLog(record(), remote=True)
    log.append_mirrored([entry(1)])
    log.evict(0)  # memory let go of it: the tail starts after it
    log.append_mirrored([entry(2), entry(3, EventType.RUN_FINISHED, status="failed")])
    assert log.tail_first == 2 and [e.seq for e in log.entries] == [2, 3]
    assert log.finished_status == "failed" == log.record.status and log.record.finished_at == 3.0


@pytest.mark.parametrize("field", ["committed", "tail_first", "writing", "remote", "fenced"])
def test_its_positions_and_mode_are_not_assignable(field: str) -> None:
    log = RunLog(record())
    with pytest.raises(AttributeError):
        setattr(log, field, 1)
