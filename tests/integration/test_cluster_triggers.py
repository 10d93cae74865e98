"""Triggers in a cluster (docs/triggers.md#in-a-cluster): two real gateways with the
same trigger fire each tick once — the one holding the Redis lease — and when it is
killed (-9), the other takes the lease within `lease_seconds` and goes on, catching up
the ticks missed meanwhile; no tick is fired twice, none is lost (`catch_up: all`)."""

from __future__ import annotations

import itertools
import json
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import trio
import yaml
from websockets.trio.client import connect

from tests.cluster_helpers import cluster
from tests.redis_helpers import redis_url  # noqa: F401  (fixture)
from tests.server_helpers import request

pytestmark = pytest.mark.trio

EVERY = 1.0


async def triggered_runs(url: str) -> dict[float, list[str]]:
    """The trigger's runs by the tick they were started for, read from the cluster's
    run records in Redis."""
    import coredis

    prefix = parse_qs(urlsplit(url).query)["prefix"][0]
    async with coredis.Redis.from_url(url.split("?")[0]) as client:
        records = await client.hgetall(prefix + "runs")
    out: dict[float, list[str]] = {}
    for run_id, raw in records.items():
        record: dict[str, Any] = json.loads(raw)
        trigger = (record.get("options") or {}).get("trigger")
        if trigger is not None and trigger["name"] == "tick":
            stamp = datetime.fromisoformat(trigger["scheduledFor"]).timestamp()
            out.setdefault(stamp, []).append(
                run_id.decode() if isinstance(run_id, bytes) else run_id
            )
    return out


async def test_two_gateways_fire_each_tick_once_across_a_kill_of_the_holder(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    async with cluster(tmp_path, redis_url, lease_seconds=2.0) as group:
        data = yaml.safe_load(group.gateway_config.read_text())
        data["triggers"] = {
            "tick": {
                "agent": "researcher",
                "input": "tick {scheduled_for}",
                "every": f"{EVERY:g}s",
                "catch_up": "all",
                "overlap": "allow",
            }
        }
        group.gateway_config.write_text(yaml.safe_dump(data))
        await group.start("worker")
        first = await group.start("serve")
        second = await group.start("serve")
        gateways = [first, second]

        async def ticks_fired(count: int, within: float = 30) -> dict[float, list[str]]:
            with trio.fail_after(within):
                while len(fired := await triggered_runs(redis_url)) < count:  # noqa: ASYNC110 - state in Redis
                    await trio.sleep(0.2)
            return fired

        await ticks_fired(3)
        holders = [g for g in gateways if any("holds the lease" in line for line in g.lines)]
        assert len(holders) == 1, group.logs()
        (holder,) = holders
        (other,) = [g for g in gateways if g is not holder]
        holder.kill()
        before = len(await triggered_runs(redis_url))
        fired = await ticks_fired(before + 5)  # (the lease moves within 2 s)
        assert any("holds the lease" in line for line in other.lines), group.logs()
        async with connect(other.url) as ws:
            listed = await request(ws, op="triggers", id="t")
        (tick,) = listed["triggers"]
        assert tick["lastOutcome"] == "started" and tick["nextAt"] is not None
    doubled = {t: runs for t, runs in fired.items() if len(runs) > 1}
    assert doubled == {}, doubled  # no tick fired twice, by either gateway
    ticks = sorted(fired)
    steps = {round(b - a, 3) for a, b in itertools.pairwise(ticks)}
    assert steps == {EVERY}, ticks  # none lost across the kill (`catch_up: all`)


async def test_a_stale_holder_and_a_claimed_tick_fire_nothing(redis_url: str) -> None:  # noqa: F811
    """The fence itself: a holder whose lease expired (a process paused past it) is
    refused, and a tick is claimed once whoever asks."""
    import coredis

    from orchestrator.cluster.trigger_lease import TriggerLease

    prefix = parse_qs(urlsplit(redis_url).query)["prefix"][0]
    async with coredis.Redis.from_url(redis_url.split("?")[0]) as client:
        paused, alive = TriggerLease(client, prefix, "a"), TriggerLease(client, prefix, "b")
        paused.token = await paused.acquire(0.2)
        assert paused.token == "a:1" and await alive.acquire(0.2) is None
        assert await paused.claim("tick", 10.0)
        await trio.sleep(0.3)  # (its lease expires: it is paused, not renewing)
        alive.token = await alive.acquire(5.0)
        assert alive.token == "b:2"
        assert not await paused.claim("tick", 11.0)  # stale token: refused
        assert not await alive.claim("tick", 10.0)  # claimed before (by the paused one)
        assert await alive.claim("tick", 11.0)
        assert not await alive.claim("tick", 11.0)  # once
        assert not await paused.renew(paused.token, 5.0)
        await alive.drop(alive.token)
        assert await paused.acquire(5.0) == "a:3"  # let go: taken at once
