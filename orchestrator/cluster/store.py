"""The cluster's state in Redis: the run queue, leases, control streams, fenced appends.

Everything here is a Redis Streams or key operation (coredis, on trio); the
cluster protocol is Redis's own — a consumer group on one queue stream, explicit
stream ids, Lua scripts for the checks that must be atomic. Keys, next to the
journal's (`<prefix>runs`, `<prefix>run:{<runId>}:ev`, see storage/redis.py):

- `<prefix>cluster:<name>:queue` — run requests (`run`: runId), consumer group
  `workers`. An entry stays pending until its run's terminal event is journaled.
- `<prefix>runs:index` — sorted set runId → created_at (the `runs` op pages on it).
- `<prefix>run:{<runId>}:lease` — `worker:epoch`, expiring after `lease_seconds`.
- `<prefix>run:{<runId>}:epoch` — a counter: every acquisition gets a new epoch.
- `<prefix>run:{<runId>}:ctl` — control requests for the run's owner: each entry's
  field `c` is one typed `Control` (msgspec JSON, tagged by `op`: cancel, send,
  approve).
- `<prefix>approvals` — hash `<runId> <call>` → the waiting call (JSON
  `ApprovalInfo`), written by the worker that runs it; the `pending` op reads it.
  `<call>` is the JSON `[agentKey, toolCallId]` (agentKey null for the root agent):
  two agents of a run may both say `call_0`.
- `<prefix>run:{<runId>}:answered` — hash `<call>` → the decision on that call, set
  once (`HSETNX`, kept a week after the last): the first answer through any gateway
  wins.
- `<prefix>run:{<runId>}:failure` — why the last takeover of the run failed (kept a
  week): the run's `worker_lost` message quotes it.
- `<prefix>run:{<runId>}:handovers` — how often a worker that stopped gracefully
  handed the run over (not counted against `max_attempts`).

Fencing: a worker appends a run's events with one script that first compares the
lease with the worker's own `worker:epoch` token; a worker that lost the lease
(paused, partitioned, expired) is refused and never writes again.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass

import coredis
import coredis.exceptions
import msgspec
from coredis.tokens import PureToken

from agents.core.attachments import AttachmentInfo
from orchestrator.core.approvals import AgentKey, Answer, ApprovalInfo, CallKey
from orchestrator.storage.base import RunRecord
from orchestrator.storage.paging import RunPaging
from orchestrator.storage.redis import RedisStorage

__all__ = [
    "ACQUIRE_LEASE",
    "DROP_LEASE",
    "RENEW_LEASE",
    "ApproveControl",
    "CancelControl",
    "ClusterStore",
    "Control",
    "QueueEntry",
    "SendControl",
]

logger = logging.getLogger(__name__)
_encode = msgspec.json.Encoder().encode
_decode_record = msgspec.json.Decoder(RunRecord).decode
_decode_approval = msgspec.json.Decoder(ApprovalInfo).decode
ANSWER_KEPT_SECONDS = 7 * 24 * 3600
"""How long the decision on a call is kept (a second answer says `already answered`)."""
GROUP = "workers"
CONTROL_KEPT = 1000
"""About the most control requests a run's stream keeps (older ones are trimmed)."""

# KEYS: lease, epoch. ARGV: worker, lease ms. Returns the token, or nil when leased.
ACQUIRE_LEASE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local epoch = redis.call('INCR', KEYS[2])
local token = ARGV[1] .. ':' .. epoch
redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
return token
"""

# KEYS: lease. ARGV: token, lease ms. 1: renewed; 0: the lease is someone else's or gone.
RENEW_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

# KEYS: lease. ARGV: token. Lets go of a lease (if still ours) and nothing else: the
# run's request stays pending, for another worker to claim.
DROP_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end
return 0
"""

# KEYS: lease, handovers, queue. ARGV: token, group, consumer, entry id, idle ms. A
# worker that stops gracefully lets go of a run it executes, counted apart from its
# deaths, and marks its request idle for long already (XCLAIM … IDLE) so that the
# other workers claim it at their next look instead of after `lease_seconds`.
_HAND_OVER = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('INCR', KEYS[2])
redis.call('XCLAIM', KEYS[3], ARGV[2], ARGV[3], 0, ARGV[4], 'IDLE', ARGV[5])
return 1
"""

# KEYS: lease, queue. ARGV: token, group, entry id. Ends a run's ownership; the
# request leaves the queue stream (acknowledged entries would otherwise stay for ever).
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
redis.call('XACK', KEYS[2], ARGV[2], ARGV[3])
redis.call('XDEL', KEYS[2], ARGV[3])
return 1
"""


# KEYS: answered, control stream. ARGV: call field, decision, kept seconds, the control
# (an encoded `ApproveControl`), control stream length kept. The first answer to a call is noted and
# handed to the run's owner in one step: a gateway that dies in between cannot leave a
# call claimed that its owner never hears of. Returns nil (ours), else the earlier one.
_ANSWER = """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return redis.call('HGET', KEYS[1], ARGV[1])
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], '*', 'c', ARGV[4])
return false
"""

_CLAIM_PAGE = 100
"""Pending requests looked at per round trip when claiming stale ones."""


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """A run request taken from the queue."""

    entry_id: str
    run_id: str


def attempt_of(token: str) -> int:
    """The attempt a fencing token `worker:epoch` stands for: its epoch, the number of
    times a worker has taken the run's lease (deaths and failed takeovers included,
    claims that found the lease taken not)."""
    return int(token.rsplit(":", 1)[1])


class CancelControl(msgspec.Struct, frozen=True, tag="cancel", tag_field="op"):
    """Cancel the run, or one agent (`agent_key`) and its subtree."""

    agent_key: str | None = None
    reason: str | None = None


class SendControl(msgspec.Struct, frozen=True, tag="send", tag_field="op"):
    """A person's message for an agent (None: the root)."""

    agent_key: str | None
    message: str
    attachments: tuple[AttachmentInfo, ...] = ()
    """Its images and files (their bytes: the run's blobs, stored by the gateway)."""


class ApproveControl(msgspec.Struct, frozen=True, tag="approve", tag_field="op"):
    """An answer a gateway checked against the call and claimed for the cluster: the
    owner's desk takes it without checking it again."""

    answer: Answer


Control = CancelControl | SendControl | ApproveControl
"""A request for a run's owner, as its control stream holds it."""
_decode_control = msgspec.json.Decoder(Control).decode


class ClusterStore:
    """Redis operations of one cluster, on the journal's Redis client."""

    def __init__(self, storage: RedisStorage, name: str) -> None:
        assert storage._client is not None, "storage is not open"
        self.client: coredis.Redis[bytes] = storage._client
        self.storage = storage
        prefix = storage.prefix
        self.prefix = prefix
        self.name = name
        self.queue = f"{prefix}cluster:{name}:queue"
        self.index = f"{prefix}runs:index"
        self.runs = f"{prefix}runs"
        self._acquire = self.client.register_script(ACQUIRE_LEASE)
        self._renew = self.client.register_script(RENEW_LEASE)
        self._release = self.client.register_script(_RELEASE)
        self._drop = self.client.register_script(DROP_LEASE)
        self._hand_over = self.client.register_script(_HAND_OVER)
        self._answer = self.client.register_script(_ANSWER)

    # -- keys --------------------------------------------------------------------

    def events_key(self, run_id: str) -> str:
        """The run's event stream (the journal's key)."""
        return f"{self.prefix}run:{{{run_id}}}:ev"

    def lease_key(self, run_id: str) -> str:
        """The run's lease."""
        return f"{self.prefix}run:{{{run_id}}}:lease"

    def control_key(self, run_id: str) -> str:
        """The run's control stream."""
        return f"{self.prefix}run:{{{run_id}}}:ctl"

    # -- runs --------------------------------------------------------------------

    async def ensure_group(self) -> None:
        """Create the queue and its consumer group if they do not exist yet."""
        with contextlib.suppress(coredis.exceptions.StreamDuplicateConsumerGroupError):
            await self.client.xgroup_create(self.queue, GROUP, identifier="0", mkstream=True)

    async def submit(self, record: RunRecord) -> None:
        """Store a new run's record and queue it, in one MULTI/EXEC."""
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hset(self.runs, {record.run_id: _encode(record)})
            pipe.zadd(self.index, {record.run_id: record.created_at})
            pipe.xadd(self.queue, {b"run": record.run_id.encode()})

    async def record(self, run_id: str) -> RunRecord | None:
        """The run's stored record (None: no such run)."""
        raw = await self.client.hget(self.runs, run_id)
        return None if raw is None else _decode_record(raw)

    async def put_record(self, record: RunRecord) -> None:
        """Overwrite a record (only for runs nobody owns: a run failed by the cluster)."""
        await self.client.hset(self.runs, {record.run_id: _encode(record)})

    async def page(
        self, *, limit: int, before: str | None = None, owner: str | None = None
    ) -> tuple[list[RunRecord], bool]:
        """Up to `limit` records, newest first, older than `before`, of `owner` if given.

        Reads the index whole (O(runs): retention keeps it bounded) and the records
        in chunks of 200 until the page is full.
        """
        ids = [_text(i) for i in await self.client.zrange(self.index, 0, -1, rev=True)]
        if before is not None:
            ids = ids[ids.index(before) + 1 :] if before in ids else []
        page = RunPaging(limit=limit, owner=owner)
        for start in range(0, len(ids), 200):
            raws = await self.client.hmget(self.runs, ids[start : start + 200])
            if page.add(_decode_record(raw) for raw in raws if raw is not None):
                break
        return page.result()

    # -- the queue ---------------------------------------------------------------

    async def take(self, consumer: str, count: int, block: float) -> list[QueueEntry]:
        """New run requests for this worker (waits up to `block` seconds for one)."""
        reply = await self.client.xreadgroup(
            GROUP, consumer, {self.queue: ">"}, count=count, block=int(block * 1000)
        )
        entries: list[QueueEntry] = []
        for items in (reply or {}).values():
            for entry in items:
                run = entry.field_values.get(b"run")
                if run is not None:
                    entries.append(QueueEntry(_text(entry.identifier), _text(run)))
        return entries

    async def claim_stale(self, consumer: str, min_idle: float, count: int) -> list[QueueEntry]:
        """Up to `count` pending requests idle for `min_idle` s whose lease is gone, now
        claimed here (oldest first).

        Idle time alone does not prove a worker dead (a long run renews its lease but
        leaves its entry idle), so an entry is only claimed when its run has no lease.
        The pending list is read a page at a time until `count` are claimed or it ends:
        the oldest entries are often long runs whose workers are fine, and stopping at
        them would leave a stale run behind them unclaimed for ever. Each page takes
        four round trips (pending ids, their runs, their leases, the claim).
        """
        idle = int(min_idle * 1000)
        claimed: list[QueueEntry] = []
        start = "-"
        while len(claimed) < count:
            pending = await self.client.xpending(
                self.queue, GROUP, start=start, end="+", count=_CLAIM_PAGE, idle=idle
            )
            ids = [_text(item.identifier) for item in pending]  # type: ignore[union-attr]
            if not ids:
                break
            start = f"({ids[-1]}"
            async with self.client.pipeline(transaction=False) as pipe:
                ranges = [pipe.xrange(self.queue, start=i, end=i) for i in ids]
            runs: dict[str, str] = {}
            for entry_id, found in zip(ids, ranges, strict=True):
                entries = await found
                run = entries[0].field_values.get(b"run") if entries else None
                if run is not None:
                    runs[entry_id] = _text(run)
            if not runs:
                continue
            async with self.client.pipeline(transaction=False) as pipe:
                leased = [pipe.exists([self.lease_key(run)]) for run in runs.values()]
            free = [
                entry_id for entry_id, lease in zip(runs, leased, strict=True) if not await lease
            ][: count - len(claimed)]
            if not free:
                continue
            # XCLAIM checks the idle time again: of two workers racing, one gets each.
            got = await self.client.xclaim(self.queue, GROUP, consumer, idle, free)
            for entry in got:
                entry_id = _text(entry.identifier)  # type: ignore[union-attr]
                if entry_id in runs:
                    claimed.append(QueueEntry(entry_id, runs[entry_id]))
        return claimed

    async def queue_depth(self) -> int:
        """Run requests not yet taken by a worker."""
        groups = await self.client.xinfo_groups(self.queue)
        for group in groups:
            name, lag = group.get(b"name"), group.get(b"lag")
            if isinstance(name, bytes) and name.decode() == GROUP:
                return int(lag) if isinstance(lag, int) else 0
        return 0

    async def ack(self, entry_id: str) -> None:
        """Drop a request from the queue (its run is over): acknowledged and deleted,
        so the queue holds only runs not yet over."""
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.xack(self.queue, GROUP, [entry_id])
            pipe.xdel(self.queue, [entry_id])

    # -- leases ------------------------------------------------------------------

    async def acquire(self, run_id: str, worker: str, lease: float) -> str | None:
        """Take the run's lease: the fencing token `worker:epoch`, or None if leased."""
        token: object = await self._acquire(
            keys=[self.lease_key(run_id), f"{self.prefix}run:{{{run_id}}}:epoch"],
            args=[worker, int(lease * 1000)],
        )
        return _text(token) if isinstance(token, bytes | str) else None

    async def drop(self, run_id: str, token: str) -> None:
        """Let go of the run's lease (if still ours), keeping its request pending: a
        takeover that failed, so that another worker can try at once."""
        await self._drop(keys=[self.lease_key(run_id)], args=[token])

    def _handovers_key(self, run_id: str) -> str:
        return f"{self.prefix}run:{{{run_id}}}:handovers"

    async def hand_over(
        self, run_id: str, token: str, entry_id: str, consumer: str, lease: float
    ) -> None:
        """Let go of the run's lease (if still ours) because this worker stops: its
        request stays pending, claimable at once by another worker, and the hand-over
        is counted apart from deaths (it does not use up one of `max_attempts`)."""
        await self._hand_over(
            keys=[self.lease_key(run_id), self._handovers_key(run_id), self.queue],
            args=[token, GROUP, consumer, entry_id, int(lease * 1000) + 1],
        )

    async def handovers(self, run_id: str) -> int:
        """How many times a worker that stopped gracefully handed the run over."""
        raw = await self.client.get(self._handovers_key(run_id))
        return 0 if raw is None else int(raw)

    def _failure_key(self, run_id: str) -> str:
        return f"{self.prefix}run:{{{run_id}}}:failure"

    async def note_failure(self, run_id: str, reason: str) -> None:
        """Remember why a takeover of the run failed (its `worker_lost` end says it)."""
        await self.client.set(self._failure_key(run_id), reason[:500], ex=ANSWER_KEPT_SECONDS)

    async def failure(self, run_id: str) -> str | None:
        """Why the run's last takeover failed (None: none did)."""
        raw = await self.client.get(self._failure_key(run_id))
        return None if raw is None else _text(raw)

    async def renew(self, leases: Mapping[str, str], lease: float) -> set[str]:
        """Renew these leases (runId → token) in one round trip; returns the lost ones."""
        if not leases:
            return set()
        async with self.client.pipeline(transaction=False) as pipe:
            requests: list[Awaitable[object]] = [
                self._renew(
                    keys=[self.lease_key(run_id)], args=[token, int(lease * 1000)], client=pipe
                )
                for run_id, token in leases.items()
            ]
        results = [await request for request in requests]
        return {run_id for run_id, ok in zip(leases, results, strict=True) if ok != 1}

    async def release(self, run_id: str, token: str, entry_id: str) -> None:
        """The run is over: drop the lease (if still ours) and the queue entry."""
        await self._release(
            keys=[self.lease_key(run_id), self.queue], args=[token, GROUP, entry_id]
        )

    # -- control -----------------------------------------------------------------

    async def send_control(self, run_id: str, control: Control) -> None:
        """Queue a request for the run's owner (whoever that is now, or next)."""
        await self.client.xadd(
            self.control_key(run_id),
            {b"c": _encode(control)},
            trim_strategy=PureToken.MAXLEN,
            threshold=CONTROL_KEPT,
            trim_operator=PureToken.APPROXIMATELY,
        )

    async def read_control(
        self, cursors: Mapping[str, str], block: float
    ) -> list[tuple[str, str, Control | None]]:
        """Control requests after each run's cursor: (runId, entry id, request; None
        for an entry that is not a control this version reads, logged and passed)."""
        if not cursors:
            return []
        keys = {self.control_key(run_id): cursor for run_id, cursor in cursors.items()}
        reply = await self.client.xread(keys, block=int(block * 1000), count=100)
        out: list[tuple[str, str, Control | None]] = []
        for key, items in (reply or {}).items():
            run_id = _run_of(_text(key))
            for entry in items:
                entry_id = _text(entry.identifier)
                try:
                    control: Control | None = _decode_control(entry.field_values.get(b"c", b""))
                except msgspec.DecodeError as exc:
                    logger.warning("run %s: control entry %s passed: %s", run_id, entry_id, exc)
                    control = None
                out.append((run_id, entry_id, control))
        return out

    async def control_done(self, run_id: str) -> str:
        """The last control request the run's owners applied ('0-0': none)."""
        raw = await self.client.get(f"{self.prefix}run:{{{run_id}}}:ctldone")
        return "0-0" if raw is None else _text(raw)

    async def set_control_done(self, run_id: str, entry_id: str) -> None:
        """Note a control request as applied (a takeover goes on after it, not before)."""
        await self.client.set(f"{self.prefix}run:{{{run_id}}}:ctldone", entry_id)

    # -- approvals ---------------------------------------------------------------

    @property
    def approvals_key(self) -> str:
        """The hash of every waiting call of the cluster."""
        return f"{self.prefix}approvals"

    async def publish_approvals(self, changes: Sequence[tuple[str, CallKey, bytes | None]]) -> None:
        """Apply `(run_id, call, info JSON or None)` changes to the waiting list, in
        order, in one round trip."""
        if not changes:
            return
        requests: list[Awaitable[object]] = []
        async with self.client.pipeline(transaction=False) as pipe:
            for run_id, call, info in changes:
                field = f"{run_id} {_call_field(call)}"
                if info is None:
                    requests.append(pipe.hdel(self.approvals_key, [field]))
                else:
                    requests.append(pipe.hset(self.approvals_key, {field: info}))
        for request in requests:
            await request

    async def forget_approvals(self, run_id: str) -> None:
        """Drop the run's calls from the waiting list (the run was ended here, with no
        executor to drop them one by one)."""
        fields = [
            field
            async for field, _ in self.client.hscan_iter(self.approvals_key, match=f"{run_id} *")
        ]
        if fields:
            await self.client.hdel(self.approvals_key, fields)

    async def approvals_of(
        self, run_id: str, call_id: str, agent_key: AgentKey
    ) -> list[ApprovalInfo]:
        """The run's waiting calls with id `call_id`, of `agent_key` (unset: of any
        agent)."""
        if agent_key is not msgspec.UNSET:
            raw = await self.client.hget(
                self.approvals_key, f"{run_id} {_call_field((agent_key, call_id))}"
            )
            return [] if raw is None else [_decode_approval(raw)]
        found = [
            _decode_approval(value)
            async for _, value in self.client.hscan_iter(self.approvals_key, match=f"{run_id} *")
        ]
        return [info for info in found if info.tool_call_id == call_id]

    async def approvals(self) -> list[ApprovalInfo]:
        """Every waiting call of the cluster."""
        raw = await self.client.hgetall(self.approvals_key)
        return [_decode_approval(value) for value in raw.values()]

    def _answered_key(self, run_id: str) -> str:
        return f"{self.prefix}run:{{{run_id}}}:answered"

    async def answered(self, run_id: str, call_id: str, agent_key: AgentKey) -> str | None:
        """The decision noted on a call of `agent_key` (unset: of any agent) with id
        `call_id` (None: none yet)."""
        key = self._answered_key(run_id)
        if agent_key is not msgspec.UNSET:
            raw = await self.client.hget(key, _call_field((agent_key, call_id)))
            return None if raw is None else _text(raw)
        for field, value in (await self.client.hgetall(key)).items():
            if msgspec.json.decode(field)[1] == call_id:
                return _text(value)
        return None

    async def answer(self, run_id: str, call: CallKey, control: ApproveControl) -> str | None:
        """Note the decision on a call and queue `control` for the run's owner, both or
        neither, unless a decision was noted: None when this one is the first, else the
        earlier decision. The call leaves the cluster's list of
        waiting calls at once (its owner would drop it when it takes the answer)."""
        field = _call_field(call)
        decision = control.answer.decision
        earlier: object = await self._answer(
            keys=[self._answered_key(run_id), self.control_key(run_id)],
            args=[field, decision, ANSWER_KEPT_SECONDS, _encode(control), CONTROL_KEPT],
        )
        if isinstance(earlier, bytes | str):
            return _text(earlier)
        with contextlib.suppress(Exception):  # (only a listing: its owner corrects it)
            await self.client.hdel(self.approvals_key, [f"{run_id} {field}"])
        return None

    # -- tailing -----------------------------------------------------------------

    async def tail(
        self, cursors: Mapping[str, int], block: float, count: int = 1024
    ) -> dict[str, list[bytes]]:
        """Events after each run's seq (XREAD BLOCK over all of them): runId → bodies."""
        if not cursors:
            return {}
        keys = {self.events_key(run_id): f"0-{seq}" for run_id, seq in cursors.items()}
        reply = await self.client.xread(keys, block=int(block * 1000), count=count)
        out: dict[str, list[bytes]] = {}
        for key, items in (reply or {}).items():
            bodies = []
            for entry in items:
                body = entry.field_values[b"d"]
                bodies.append(body if isinstance(body, bytes) else body.encode())
            out[_run_of(_text(key))] = bodies
        return out

    async def workers(self) -> dict[str, dict[str, object]]:
        """Each worker's last heartbeat (`at`, its runs, its stalled agents)."""
        raw = await self.client.hgetall(f"{self.prefix}cluster:{self.name}:workers")
        return {_text(k): msgspec.json.decode(v) for k, v in raw.items()}

    async def heartbeat(self, worker: str, info: Mapping[str, object]) -> None:
        """Note this worker as alive (for `/healthz` and people looking at Redis)."""
        await self.client.hset(
            f"{self.prefix}cluster:{self.name}:workers",
            {worker: _encode({"at": time.time(), **info})},
        )


def _call_field(call: CallKey) -> str:
    """A call as a hash field: the JSON `[agentKey, toolCallId]`."""
    return msgspec.json.encode(list(call)).decode()


def _run_of(key: str) -> str:
    """The runId inside `…run:{<runId>}:…`."""
    return key[key.index("{") + 1 : key.index("}")]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
