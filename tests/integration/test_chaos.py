"""The chaos runs of `tests/chaos.py`, short and with a fixed seed (issue 31).

The cluster in the production shape (2 gateways and 3 workers, all started before
the first run) and one server with `resume_runs`, each under a steady load while a
seeded driver kills, pauses and restarts their processes; then every invariant
`tests.chaos.verify` names is checked. Longer runs: `python -m tests.chaos`
(docs/reliability.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos import chaos
from tests.redis_helpers import redis_url  # noqa: F401  (fixture)

pytestmark = [pytest.mark.trio, pytest.mark.chaos]


async def test_the_cluster_survives_chaos(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    report = await chaos("cluster", seed=1, seconds=45, root=tmp_path, redis_url=redis_url)
    print(report.row())
    assert not report.problems, "\n".join(report.problems)
    assert sum(report.actions.values()) >= 7 and report.runs >= 15


async def test_a_single_server_survives_restarts_under_load(tmp_path: Path) -> None:
    report = await chaos("single", seed=1, seconds=20, root=tmp_path)
    print(report.row())
    assert not report.problems, "\n".join(report.problems)
    assert sum(report.actions.values()) >= 3 and report.runs >= 6
