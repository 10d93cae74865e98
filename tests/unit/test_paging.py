"""`RunPaging`: the one paging rule of the journal and the cluster, fed whole or in chunks."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.storage.base import RunRecord
from orchestrator.storage.paging import RunPaging


def record(n: int, owner: str | None) -> RunRecord:
    return RunRecord(
        run_id=f"run-{n}",
        agent_id="a",
        input="",
        status="completed",
        created_at=float(n),
        root_session_id="sess",
        owner=owner,
    )


def test_a_full_page_knows_older_runs_remain() -> None:
    page = RunPaging(limit=2)
    assert page.add([record(3, None), record(2, None)]) is False
    assert page.add([record(1, None)]) is True
    assert [r.run_id for r in page.records] == ["run-3", "run-2"]
    assert page.result()[1] is True


def test_other_owners_are_skipped_and_do_not_count_as_more() -> None:
    page = RunPaging(limit=1, owner="alice")
    assert page.add([record(3, "bob"), record(2, "alice"), record(1, "bob")]) is False
    assert page.result() == ([record(2, "alice")], False)


@given(
    owners=st.lists(st.sampled_from([None, "alice", "bob"]), max_size=40),
    limit=st.integers(min_value=0, max_value=10),
    chunk=st.integers(min_value=1, max_value=7),
    owner=st.sampled_from([None, "alice"]),
)
def test_chunked_pages_match_the_plain_rule(
    owners: list[str | None], limit: int, chunk: int, owner: str | None
) -> None:
    records = [record(n, o) for n, o in enumerate(owners)]
    mine = [r for r in records if owner is None or r.owner == owner]
    page = RunPaging(limit=limit, owner=owner)
    for start in range(0, len(records), chunk):
        if page.add(records[start : start + chunk]):
            break
    assert page.result() == (mine[:limit], len(mine) > limit)
