"""Webhooks out: the outbox that turns journaled events into signed deliveries and
sends each until its receiver takes it (docs/webhooks.md#webhooks-out).

The journal is the source: each run's events are matched in seq order from the
run's cursor, and the deliveries they make are kept in the store together with the
cursor they advance to, in one write (`Storage.keep`, space `outbox`). A crash
between a commit and that write loses nothing: at the next start every run whose
journal is past its cursor is matched again from there. A delivery stays in the
outbox until its receiver answers 2xx — then it is removed — or until its last
attempt fails: then it is dead, listed (`webhooks` op, the console, /metrics) until
a person redelivers it. So delivery is at least once, and a delivery sent twice
has the same `webhook-id` both times.

Runs never wait for it: a run's journal follower only marks the run; matching reads
committed events back from the journal's tail on its own task. When `max_outbox`
deliveries wait, matching pauses (the cursors stay, the journal keeps the events) and
goes on as deliveries leave. Attempts run `concurrency` at a time (a quarter of them to
one receiver at most: one that hangs does not hold up the others), each under one
deadline; failed ones wait `retry_first_seconds`, doubling up to `retry_max_seconds`.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol
from urllib.parse import urlsplit

import msgspec
import trio

from orchestrator.config import WebhookLimits
from orchestrator.core.webhooks import Delivery, DeliveryInfo, WebhookSpec, retry_delay, secret_key
from orchestrator.storage.base import RunRecord
from orchestrator.storage.journal import Journal
from orchestrator.storage.runlog import Entry, RunLog, UnknownRun
from orchestrator.webhooks.matching import Channel, RunSubscriptions
from orchestrator.webhooks.sender import Attempt
from orchestrator.webhooks.writes import KeptWrites

__all__ = ["SPACE", "ChannelMaker", "Outbox"]

logger = logging.getLogger(__name__)
SPACE = "outbox"
"""Where the outbox is kept in the journal's store: `d:<id>` a delivery, `c:<runId>`
a run's cursor, `s:<runId>:<name>` a channel, `epoch` when the outbox began."""
_READ = 512
_BACKOFF_MAX = 5.0
_decode = msgspec.json.Decoder(Delivery).decode
_encode = msgspec.json.Encoder().encode

ChannelMaker = Callable[[RunRecord, str, int, bytes], Channel]
"""Builds a kept channel again: (its run, its name, from_seq, its spec as kept)."""


class Attempts(Protocol):
    """What sends one delivery (`Sender`)."""

    async def attempt(self, delivery: Delivery, key: bytes | None) -> Attempt: ...


class Outbox:
    """The deliveries of one server.

    Args:
        webhooks: the config's webhooks, by name.
        limits: `limits.webhooks`.
        journal: where events are read from, and whose store keeps the outbox.
        sender: makes the attempts.
        now: the wall clock (deliveries' times are kept across restarts).
    """

    def __init__(
        self,
        webhooks: Mapping[str, WebhookSpec],
        limits: WebhookLimits,
        journal: Journal,
        sender: Attempts,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.webhooks = dict(webhooks)
        self._keys = {name: secret_key(spec.secret) for name, spec in webhooks.items()}
        self.limits = limits
        self._journal = journal
        self._storage = journal.storage
        self._sender = sender
        self._writes = KeptWrites(journal.storage, SPACE)
        self._now = now
        self.kinds: dict[str, ChannelMaker] = {}
        """Channel kinds by prefix (`a2a`), registered by the doors that make them."""
        self.waiting: dict[str, Delivery] = {}
        self.dead: dict[str, Delivery] = {}
        """Dead deliveries, oldest first."""
        self._cursors: dict[str, int] = {}
        self._channels: dict[str, dict[str, tuple[int, bytes]]] = {}
        self._subs: dict[str, RunSubscriptions] = {}
        self._dirty: dict[str, None] = {}
        self._unfollow: Callable[[], None] = lambda: None
        self._markers: dict[str, _Marker] = {}
        """The runs followed, with their followers."""
        self._epoch = 0.0
        self._heap: list[tuple[float, str]] = []
        self._in_flight: set[str] = set()
        self._turns = _Turns(max(1, limits.concurrency // 4))
        self._marked = trio.Event()
        """Set when a run has new events to match."""
        self._scheduled = trio.Event()
        """Set when a delivery is due sooner than the send loop thought."""
        self._room = trio.Event()
        self.delivered = 0
        self.failed_attempts = 0
        self.dead_total = 0
        self.dead_dropped = 0

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Load the outbox and follow the runs (before runs left running resume)."""
        await self._load()
        self._unfollow = self._journal.started.subscribe(self._follow)
        for log in list(self._journal.logs.values()):
            if not log.finished:
                self._follow(log)

    async def run(self) -> None:
        """Match and send until cancelled (after `start`)."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._writes.run)
                nursery.start_soon(self._match_loop)
                nursery.start_soon(self._send_loop)
        finally:
            self._unfollow()

    async def _load(self) -> None:
        kept = await self._storage.load_kept(SPACE)
        known = self._journal.logs
        read = _Kept(kept, known)
        self.waiting, self.dead = read.waiting, read.dead
        self._cursors, self._channels, gone = read.cursors, read.channels, read.gone
        self._epoch = float(kept.get("epoch", b"0")) or self._now()
        await self._storage.keep(SPACE, {"epoch": repr(self._epoch).encode()}, gone)
        self.dead = dict(sorted(self.dead.items(), key=lambda item: item[1].created_at))
        for delivery in self.waiting.values():
            heapq.heappush(self._heap, (delivery.next_at, delivery.id))
        for run_id, log in known.items():
            cursor = self._cursors.get(run_id)
            if cursor is None and log.record.created_at < self._epoch:
                continue  # (before the outbox began: nothing of it is sent)
            if self._wanted(log) and log.committed > (cursor or 0):
                self._dirty[run_id] = None

    def _wanted(self, log: RunLog) -> bool:
        """Something may want the run's events (else it costs nothing here)."""
        options = log.record.options
        return bool(
            self.webhooks or (options and options.webhooks) or log.record.run_id in self._channels
        )

    def _follow(self, log: RunLog) -> None:
        run_id = log.record.run_id
        if self._wanted(log) and run_id not in self._markers:
            self._markers[run_id] = marker = _Marker(self, run_id)
            self._journal.follow(log, marker)

    def _mark(self, run_id: str) -> None:
        self._dirty[run_id] = None
        self._marked.set()

    # -- matching --------------------------------------------------------------------

    async def _match_loop(self) -> None:
        backoff = 0.05
        while True:
            if not self._dirty:
                await self._marked.wait()
                self._marked = trio.Event()
                continue
            if len(self.waiting) >= self.limits.max_outbox:
                await self._room.wait()
                self._room = trio.Event()
                continue
            run_id = next(iter(self._dirty))
            try:
                await self._match_run(run_id)
                backoff = 0.05
            except UnknownRun:  # (retention deleted it)
                self._forget_run(run_id)
            except Exception:  # a store that fails: the cursor stays, tried again
                logger.exception("webhooks: matching run %s failed", run_id)
                await trio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX)

    async def _match_run(self, run_id: str) -> None:
        """Match the run's next committed events past its cursor (one read)."""
        log = self._journal.get(run_id)
        cursor = self._cursors.get(run_id, 0)
        if cursor >= log.committed:
            self._caught_up(log)
            return
        subs = await self._subscriptions(log, cursor)
        if subs.empty:  # (nothing wants it any more: no read, no write)
            self._cursors[run_id] = log.committed
            del self._dirty[run_id]
            return
        room = self.limits.max_outbox - len(self.waiting)  # (one delivery an event, mostly)
        entries = await self._journal.read(run_id, cursor, max(1, min(_READ, room)))
        if not entries:
            self._caught_up(log)
            return
        made = subs.match(entries, self._now())
        made = [d for d in made if d.id not in self.waiting and d.id not in self.dead]
        last = entries[-1].seq
        put = {f"d:{d.id}": _encode(d) for d in made}
        put[f"c:{run_id}"] = b"%d" % last
        await self._storage.keep(SPACE, put)
        self._cursors[run_id] = last
        for delivery in made:
            self.waiting[delivery.id] = delivery
            heapq.heappush(self._heap, (delivery.next_at, delivery.id))
        if made:
            self._scheduled.set()

    def _caught_up(self, log: RunLog) -> None:
        """Everything committed of the run is matched."""
        del self._dirty[log.record.run_id]
        if log.finished:
            self._subs.pop(log.record.run_id, None)
        else:  # (a follower is let go once the run's record ends, even with events still
            self._follow(log)  # to commit: follow it again for them)

    async def _subscriptions(self, log: RunLog, cursor: int) -> RunSubscriptions:
        subs = self._subs.get(log.record.run_id)
        if subs is not None:
            return subs
        channels = []
        for name, (from_seq, spec) in self._channels.get(log.record.run_id, {}).items():
            maker = self.kinds.get(name.partition(":")[0])
            if maker is not None:
                channels.append(maker(log.record, name, from_seq, spec))
        subs = RunSubscriptions(log.record, self.webhooks, channels)
        if subs.has_channels and cursor:  # they see the run from its start
            subs.see(await self._journal.read_all(log.record.run_id, cursor))
        self._subs[log.record.run_id] = subs
        return subs

    def _forget_run(self, run_id: str) -> None:
        self._dirty.pop(run_id, None)
        self._subs.pop(run_id, None)
        self._cursors.pop(run_id, None)
        self._channels.pop(run_id, None)

    # -- channels (an A2A push config) -----------------------------------------------

    async def add_channel(
        self, run_id: str, name: str, spec: bytes, *, from_start: bool = False
    ) -> None:
        """Send the run's events from now on (`from_start`: from its first) through the
        channel `name` (`<kind>:<id>`, replacing one of that name), built from `spec` by
        its kind's maker.

        Raises:
            UnknownRun: no such run.
            LookupError: the run has `limits.webhooks.max_per_run` channels already.
        """
        log = self._journal.get(run_id)
        held = self._channels.get(run_id, {})
        if name not in held and len(held) >= self.limits.max_per_run:
            raise LookupError(
                f"run {run_id} has {len(held)} push configs: limits.webhooks.max_per_run"
            )
        from_seq = 0 if from_start else log.committed
        await self._storage.keep(SPACE, {f"s:{run_id}:{name}": b"%d %s" % (from_seq, spec)})
        self._channels.setdefault(run_id, {})[name] = (from_seq, spec)
        self._subs.pop(run_id, None)  # (rebuilt with it at the next match)
        if run_id not in self._cursors and not self._had_hooks(log):
            self._cursors[run_id] = from_seq  # (nothing matched it before: from now)
            await self._storage.keep(SPACE, {f"c:{run_id}": b"%d" % from_seq})
        elif self._cursors.get(run_id, 0) > from_seq:  # (events matched for webhooks
            await self._catch_up(log, name, from_seq, spec)  # before it was kept)
        if not log.finished:
            self._follow(log)
        self._mark(run_id)

    async def _catch_up(self, log: RunLog, name: str, from_seq: int, spec: bytes) -> None:
        """A new channel's deliveries of the events matched before it was kept."""
        maker = self.kinds.get(name.partition(":")[0])
        if maker is None:
            return
        run_id = log.record.run_id
        cursor = self._cursors[run_id]
        channel = maker(log.record, name, from_seq, spec)
        alone = RunSubscriptions(log.record, {}, [channel], its_own=False)
        made = alone.match(await self._journal.read_all(run_id, cursor), self._now())
        made = [d for d in made if d.id not in self.waiting and d.id not in self.dead]
        await self._storage.keep(SPACE, {f"d:{d.id}": _encode(d) for d in made})
        for delivery in made:
            self.waiting[delivery.id] = delivery
            heapq.heappush(self._heap, (delivery.next_at, delivery.id))
        self._scheduled.set()

    def _had_hooks(self, log: RunLog) -> bool:
        options = log.record.options
        return bool(self.webhooks or (options and options.webhooks))

    async def remove_channel(self, run_id: str, name: str) -> bool:
        """Stop the channel; False if the run has none of that name."""
        if name not in self._channels.get(run_id, {}):
            return False
        await self._storage.keep(SPACE, {}, [f"s:{run_id}:{name}"])
        del self._channels[run_id][name]
        self._subs.pop(run_id, None)
        return True

    def channels(self, run_id: str, kind: str) -> dict[str, bytes]:
        """The run's channels of `kind`, by id (their specs as kept)."""
        prefix = kind + ":"
        return {
            name.removeprefix(prefix): spec
            for name, (_, spec) in self._channels.get(run_id, {}).items()
            if name.startswith(prefix)
        }

    # -- sending ---------------------------------------------------------------------

    async def _wait(self, seconds: float) -> None:
        with trio.move_on_after(seconds):
            await self._scheduled.wait()
        self._scheduled = trio.Event()

    async def _send_loop(self) -> None:
        limiter = trio.CapacityLimiter(self.limits.concurrency)
        async with trio.open_nursery() as nursery:
            while True:
                if not self._heap:
                    await self._wait(math.inf)
                    continue
                next_at, delivery_id = self._heap[0]
                if next_at > self._now():
                    await self._wait(next_at - self._now())
                    continue
                heapq.heappop(self._heap)
                delivery = self.waiting.get(delivery_id)
                if (
                    delivery is None
                    or delivery.next_at != next_at
                    or delivery_id in self._in_flight
                ):
                    continue  # (delivered, redelivered, or rescheduled since)
                if not self._turns.take(_host(delivery.url), delivery_id):
                    continue  # (its turn comes when an attempt to its receiver ends)
                await limiter.acquire_on_behalf_of(delivery_id)
                self._in_flight.add(delivery_id)
                nursery.start_soon(self._attempt, delivery, limiter)

    async def _attempt(self, delivery: Delivery, limiter: trio.CapacityLimiter) -> None:
        try:
            key = self._key_of(delivery)
            outcome = await self._sender.attempt(delivery, key) if not isinstance(key, str) else key
        finally:
            limiter.release_on_behalf_of(delivery.id)
            self._in_flight.discard(delivery.id)
            for parked in self._turns.done(_host(delivery.url)):
                again = self.waiting.get(parked)
                if again is not None:  # (its receiver's turn: due again)
                    heapq.heappush(self._heap, (again.next_at, again.id))
                    self._scheduled.set()
                    break
        self._settle(delivery, outcome)

    def _key_of(self, delivery: Delivery) -> bytes | str | None:
        """Its signing key, None for a channel's (unsigned), or why there is none."""
        if delivery.secret is not None:
            return secret_key(delivery.secret)
        if delivery.headers is not None or ":" in delivery.webhook:
            return None
        key = self._keys.get(delivery.webhook)
        return key if key is not None else f"webhook {delivery.webhook!r} is no longer configured"

    def _settle(self, delivery: Delivery, outcome: Attempt) -> None:
        delivery.attempts += 1
        if outcome is None:
            self.delivered += 1
            self.waiting.pop(delivery.id, None)
            self._room.set()
            self._writes.note({}, [f"d:{delivery.id}"])
            return
        self.failed_attempts += 1
        delivery.last_error = outcome
        gone = outcome.endswith("no longer configured")
        if delivery.attempts < self.limits.max_attempts and not gone:
            first, most = self.limits.retry_first_seconds, self.limits.retry_max_seconds
            wait = retry_delay(delivery.attempts, first, most)
            delivery.next_at = self._now() + wait
            heapq.heappush(self._heap, (delivery.next_at, delivery.id))
            self._scheduled.set()
            self._writes.note({f"d:{delivery.id}": _encode(delivery)})
            return
        logger.warning(
            "webhooks: delivery %s (%s of run %s seq %d to %s) is dead after %d attempts: %s",
            delivery.id, delivery.type, delivery.run_id, delivery.seq, delivery.webhook,
            delivery.attempts, outcome,
        )  # fmt: skip
        delivery.dead = True
        self.waiting.pop(delivery.id, None)
        self.dead[delivery.id] = delivery
        self.dead_total += 1
        self._room.set()
        dropped = []
        while len(self.dead) > self.limits.max_dead:
            dropped.append(f"d:{next(iter(self.dead))}")
            del self.dead[dropped[-1][2:]]
            self.dead_dropped += 1
        self._writes.note({f"d:{delivery.id}": _encode(delivery)}, dropped)

    # -- what a person does ----------------------------------------------------------

    @property
    def idle(self) -> bool:
        """Nothing to match and nothing waiting to be sent (dead ones aside)."""
        return not self._dirty and not self.waiting

    def listed(self, *, dead: bool) -> list[DeliveryInfo]:
        """The dead deliveries (oldest first), or those waiting (soonest first)."""
        if dead:
            return [d.info() for d in self.dead.values()]
        return [d.info() for d in sorted(self.waiting.values(), key=lambda d: d.next_at)]

    async def redeliver(self, delivery_id: str | None) -> int:
        """Send a dead delivery again (`None`: every one), from a first attempt.

        Raises:
            LookupError: no dead delivery has that id.
        """
        if delivery_id is not None and delivery_id not in self.dead:
            raise LookupError(f"no dead delivery {delivery_id!r}")
        ids = [delivery_id] if delivery_id is not None else list(self.dead)
        now = self._now()
        again = []
        for one in ids:
            delivery = self.dead.pop(one)
            delivery.dead, delivery.attempts, delivery.next_at = False, 0, now
            again.append(delivery)
        await self._storage.keep(SPACE, {f"d:{d.id}": _encode(d) for d in again})
        for delivery in again:
            self.waiting[delivery.id] = delivery
            heapq.heappush(self._heap, (delivery.next_at, delivery.id))
        self._scheduled.set()
        return len(again)


class _Kept:
    """The outbox as the store keeps it: deliveries, cursors, channels; and the keys of
    runs gone (retention deleted them)."""

    def __init__(self, kept: dict[str, bytes], known: Mapping[str, RunLog]) -> None:
        self.waiting: dict[str, Delivery] = {}
        self.dead: dict[str, Delivery] = {}
        self.cursors: dict[str, int] = {}
        self.channels: dict[str, dict[str, tuple[int, bytes]]] = {}
        self.gone: list[str] = []
        for key, value in kept.items():
            kind, _, rest = key.partition(":")
            run_id, _, name = rest.partition(":")
            if kind == "d":
                delivery = _decode(value)
                (self.dead if delivery.dead else self.waiting)[delivery.id] = delivery
            elif kind in ("c", "s") and run_id not in known:
                self.gone.append(key)
            elif kind == "c":
                self.cursors[run_id] = int(value)
            elif kind == "s":
                seq, _, spec = value.partition(b" ")
                self.channels.setdefault(run_id, {})[name] = (int(seq), spec)


class _Turns:
    """Attempts under way to each receiver (host and port), at most `most` at once: one
    that hangs takes a quarter of `concurrency`, the other receivers the rest."""

    def __init__(self, most: int) -> None:
        self._most = most
        self._busy: Counter[str] = Counter()
        self._parked: dict[str, deque[str]] = {}
        """Due deliveries waiting for their receiver's turn."""

    def take(self, host: str, delivery_id: str) -> bool:
        """A turn for the delivery now; False: it is parked until one ends."""
        if self._busy[host] >= self._most:
            self._parked.setdefault(host, deque()).append(delivery_id)
            return False
        self._busy[host] += 1
        return True

    def done(self, host: str) -> Iterator[str]:
        """An attempt to `host` ended: its parked deliveries, first parked first (the
        caller takes the first that is still waiting)."""
        self._busy[host] -= 1
        if self._busy[host] <= 0:
            del self._busy[host]
        parked = self._parked.get(host)
        while parked:
            yield parked.popleft()
        self._parked.pop(host, None)


def _host(url: str) -> str:
    return urlsplit(url).netloc.lower()


class _Marker:
    """A run's journal follower: marks the run for matching, at no other cost."""

    __slots__ = ("_outbox", "_run_id")

    def __init__(self, outbox: Outbox, run_id: str) -> None:
        self._outbox = outbox
        self._run_id = run_id

    def offer(self, entries: list[Entry], shared: dict[object, bytes]) -> bool:
        self._outbox._mark(self._run_id)
        return True

    def wake(self) -> None:
        self._outbox._markers.pop(self._run_id, None)  # (the run ended: no more offers)
        self._outbox._mark(self._run_id)
