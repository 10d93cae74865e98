"""Triggers in a cluster: exactly one gateway fires each tick (docs/triggers.md#in-a-cluster).

Every gateway with `triggers:` competes for one Redis lease (`<prefix>triggers:lease`,
a fencing token `instance:epoch`, expiring after the cluster's `lease_seconds`,
renewed every third of it). The holder runs the firing loop; the others wait, and
take the lease within `lease_seconds` of its holder dying. A tick is fired only after
a claim that checks the token and the trigger's last claimed tick in one Lua script
(`<prefix>triggers:ticks`): a holder that paused past its lease (its token is stale)
or a tick already claimed (by a holder that died between the claim and the next
save) fires nothing. So no tick is fired twice, whoever holds the lease and however
long a process stalls.
"""

from __future__ import annotations

import logging

import coredis
import trio

from orchestrator.cluster.store import ACQUIRE_LEASE, DROP_LEASE, RENEW_LEASE
from orchestrator.runs.triggers import Triggers

__all__ = ["TriggerLease", "hold_triggers"]

logger = logging.getLogger(__name__)

# KEYS: lease, ticks. ARGV: token, trigger, tick. 1: ours to fire; 0: claimed before;
# -1: the lease is not ours (any more).
_CLAIM = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local last = redis.call('HGET', KEYS[2], ARGV[2])
if last and tonumber(last) >= tonumber(ARGV[3]) then return 0 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return 1
"""


class TriggerLease:
    """The cluster's triggers lease, on the journal's Redis client."""

    def __init__(self, client: coredis.Redis[bytes], prefix: str, holder: str) -> None:
        self.holder = holder
        self._lease = f"{prefix}triggers:lease"
        self._epoch = f"{prefix}triggers:epoch"
        self._ticks = f"{prefix}triggers:ticks"
        self._acquire = client.register_script(ACQUIRE_LEASE)  # (the runs' lease scripts)
        self._renew = client.register_script(RENEW_LEASE)
        self._drop = client.register_script(DROP_LEASE)
        self._claim = client.register_script(_CLAIM)
        self.token: str | None = None
        """The fencing token while this instance holds the lease."""

    async def acquire(self, lease: float) -> str | None:
        """Take the lease if nobody holds it: the token, else None."""
        got: object = await self._acquire(
            keys=[self._lease, self._epoch], args=[self.holder, int(lease * 1000)]
        )
        if isinstance(got, bytes):
            return got.decode()
        return got if isinstance(got, str) else None

    async def renew(self, token: str, lease: float) -> bool:
        """Keep the lease; False: it was lost."""
        got: object = await self._renew(keys=[self._lease], args=[token, int(lease * 1000)])
        return got == 1

    async def drop(self, token: str) -> None:
        """Let go of it (if still ours): another gateway takes it at once."""
        await self._drop(keys=[self._lease], args=[token])

    async def claim(self, name: str, tick: float) -> bool:
        """May this holder fire `tick` of trigger `name` (and nobody else ever)?"""
        token = self.token
        if token is None:
            return False
        got: object = await self._claim(
            keys=[self._lease, self._ticks], args=[token, name, repr(tick)]
        )
        if got == -1:
            logger.warning("triggers: the lease was lost before tick %s of %s", tick, name)
        return got == 1


async def hold_triggers(
    triggers: Triggers,
    lease: TriggerLease,
    lease_seconds: float,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Compete for the lease until cancelled; fire the triggers while holding it."""
    task_status.started()
    while True:
        token = None
        try:
            token = await lease.acquire(lease_seconds)
        except Exception:  # (Redis away: try again, as the workers do)
            logger.exception("triggers: the lease could not be asked for")
        if token is None:
            await trio.sleep(lease_seconds / 3)
            continue
        logger.warning("triggers: %s holds the lease (%s)", lease.holder, token)
        lease.token = token
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_renew, lease, token, lease_seconds, nursery.cancel_scope)
                await triggers.run(claim=lease.claim, poll=lease_seconds / 3)
        finally:
            lease.token = None
            with trio.CancelScope(shield=True), trio.move_on_after(2):
                try:
                    await lease.drop(token)
                except Exception:  # (it expires by itself)
                    logger.warning("triggers: the lease was not let go; it expires")


async def _renew(
    lease: TriggerLease, token: str, lease_seconds: float, holding: trio.CancelScope
) -> None:
    """Renew every third of the lease; on loss (or no answer within the lease) stop
    firing at once."""
    deadline = trio.current_time() + lease_seconds
    while True:
        await trio.sleep(lease_seconds / 3)
        try:
            with trio.move_on_after(lease_seconds / 3):
                if not await lease.renew(token, lease_seconds):
                    break
                deadline = trio.current_time() + lease_seconds
        except Exception:
            logger.exception("triggers: the lease could not be renewed")
        if trio.current_time() >= deadline:
            break
    logger.warning("triggers: %s lost the lease; it stops firing", lease.holder)
    holding.cancel()
