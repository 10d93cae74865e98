"""`redis://HOST:PORT/DB`: run records in a hash, each run's events in a Redis Stream.

Stream entry ids are `0-<seq>`, so a stream id *is* the event's seq: replay after a
cursor is `XRANGE key (0-<seq> + COUNT n`, and Redis refuses an id at or below the
last one. One batch is one pipelined round trip of one append script per run
(events and record together, atomically per run; `APPEND_SCRIPT`).
Uses coredis, which runs on trio (anyio): `async with RedisStorage.open(url)` holds
the client for the block (coredis wants it entered and left in the same task).

Keys (prefix `aor:` unless the URL says `?prefix=…`): `<prefix>runs` (hash runId →
record JSON) and `<prefix>run:{<runId>}:ev` (the stream; braces keep a run's keys in
one cluster slot).

Durability: the journal shows a client an event once Redis acknowledged it, so a
Redis that can lose acknowledged writes on restart breaks "a client never sees an
event a restart could lose". `open()` reads `appendonly` and `appendfsync`:
`durability="strict"` (the default) refuses anything but `appendonly yes` with
`appendfsync always` or `everysec` (the latter can lose up to a second of writes on
a power loss, not on a Redis restart); `"relaxed"` logs a warning and goes on.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

import coredis
import coredis.exceptions
import msgspec
import trio
from coredis.tokens import PureToken

from agents import redact
from orchestrator.storage.base import RunRecord, StorageError

__all__ = ["RedisStorage", "check_persistence"]

logger = logging.getLogger(__name__)
_encode = msgspec.json.Encoder().encode

APPEND_SCRIPT = """
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local last = 0
local top = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
if #top > 0 then last = tonumber(string.match(top[1][1], '^0%-(%d+)$')) or 0 end
for i = 4, #ARGV, 2 do
  if tonumber(ARGV[i]) > last then
    redis.call('XADD', KEYS[2], '0-' .. ARGV[i], 'd', ARGV[i + 1])
  end
end
if ARGV[3] ~= '' then redis.call('HSET', KEYS[3], ARGV[2], ARGV[3]) end
return 1
"""
"""Append one run's events and write its record, in one atomic step.

KEYS: lease, events, runs hash. ARGV: fencing token ('' for none), runId, record JSON
('' for none), then seq, body pairs. Returns 0 when the lease is not the token.
Events at or below the stream's last seq are skipped, so a batch retried after a
failure that left it half written (a lost connection) completes instead of
failing on ids Redis refuses. One script per run is also ~4× cheaper than a
MULTI/EXEC of XADDs for a batch of 256 (docs/benchmarks.md, "Cluster")."""
_decode_record = msgspec.json.Decoder(RunRecord).decode
Durability = Literal["strict", "relaxed"]


def check_persistence(settings: dict[str, str]) -> str | None:
    """What is wrong with a Redis's persistence settings for the journal (None: fine)."""
    appendonly = settings.get("appendonly", "?")
    fsync = settings.get("appendfsync", "?")
    if appendonly != "yes":
        return (
            f"appendonly is {appendonly!r}: a Redis restart can lose events clients already "
            "saw (set `appendonly yes` and `appendfsync everysec` or `always`)"
        )
    if fsync not in ("always", "everysec"):
        return (
            f"appendfsync is {fsync!r}: writes may sit unsynced for long "
            "(use `everysec` or `always`)"
        )
    return None


class RedisStorage:
    """Durable journal storage in Redis."""

    durable = True

    def __init__(self, url: str, *, durability: Durability = "strict") -> None:
        parts = urlsplit(url)
        self.url = parts._replace(query="").geturl()
        self.shown = redact.url(self.url)
        """The URL as messages show it (no password)."""
        self.prefix = parse_qs(parts.query).get("prefix", ["aor:"])[0]
        self.durability = durability
        self._client: coredis.Redis[bytes] | None = None
        self._append: Any = None

    def _events_key(self, run_id: str) -> str:
        return f"{self.prefix}run:{{{run_id}}}:ev"

    def _lease_key(self, run_id: str) -> str:
        return f"{self.prefix}run:{{{run_id}}}:lease"

    async def _probe(self) -> None:
        """Fail fast and cleanly when nothing listens (coredis leaks its internal
        streams when its first connection fails inside `__aenter__`)."""
        parts = urlsplit(self.url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 6379
        try:
            with trio.fail_after(5):
                stream = await trio.open_tcp_stream(host, port)
        except (OSError, trio.TooSlowError) as exc:
            why = "timed out" if isinstance(exc, trio.TooSlowError) else exc.strerror or exc
            raise StorageError(f"redis storage {self.shown}: cannot connect: {why}") from None
        await stream.aclose()

    @classmethod
    @asynccontextmanager
    async def open(
        cls, url: str, *, durability: Durability = "strict"
    ) -> AsyncIterator[RedisStorage]:
        """Connect and check persistence; the client lives for the block.

        Raises:
            StorageError: unreachable, or not durable under `strict` (names the URL).
        """
        storage = cls(url, durability=durability)
        await storage._probe()
        client: coredis.Redis[bytes] = coredis.Redis.from_url(storage.url, decode_responses=False)
        in_block = False
        try:
            async with client:
                await storage._check_durability(client)
                storage._client = client
                in_block = True
                try:
                    yield storage
                finally:
                    storage._client = None
        except BaseException as exc:
            if in_block:  # the block's own failure: not ours to rename
                raise
            # coredis's client runs a nursery: our own refusal arrives in a group.
            leaf = _first_leaf(exc)
            if isinstance(leaf, StorageError):
                raise leaf from None
            if isinstance(leaf, (coredis.exceptions.RedisError, OSError)):
                raise StorageError(
                    f"redis storage {storage.shown}: cannot connect: {redact.url(str(leaf))}"
                ) from None
            raise

    async def load(self) -> list[RunRecord]:
        """Every run record, in creation order."""
        assert self._client is not None, "storage is not open"
        raw = await self._client.hgetall(self.prefix + "runs")
        records = [_decode_record(value) for value in raw.values()]
        return sorted(records, key=RunRecord.sort_key)

    async def _check_durability(self, client: coredis.Redis[bytes]) -> None:
        try:
            raw = await client.config_get(["appendonly", "appendfsync"])
            settings = {_text(k): _text(v) for k, v in raw.items()}
            problem = check_persistence(settings)
        except coredis.exceptions.ResponseError as exc:
            problem = f"cannot read its persistence settings (CONFIG GET: {exc})"
        if problem is None:
            return
        if self.durability == "strict":
            raise StorageError(
                f"redis storage {self.shown}: {problem}; or accept the risk with "
                "`storage: {url: …, durability: relaxed}`"
            )
        logger.warning("redis storage %s: %s (durability: relaxed)", self.shown, problem)

    async def write(self, records: list[RunRecord], events: list[tuple[str, int, bytes]]) -> None:
        """One append script per run (`APPEND_SCRIPT`), pipelined in one round trip."""
        refused = await self.append(records, events, {}, fenced=False)
        assert not refused

    async def append(
        self,
        records: list[RunRecord],
        events: list[tuple[str, int, bytes]],
        tokens: Mapping[str, str],
        *,
        fenced: bool = True,
        lease_key: str | None = None,
    ) -> set[str]:
        """Append each run's events and record; with `fenced`, behind its lease token.

        `lease_key`: one lease for every run (a single server's ownership of the whole
        journal, storage/owner.py) instead of each run's own (cluster mode).

        Returns the runs refused (fenced: no token here, or the lease is not it).
        """
        assert self._client is not None, "storage is not open"
        by_run: dict[str, list[bytes | int]] = {}
        for run_id, seq, body in events:
            by_run.setdefault(run_id, []).extend((seq, body))
        bodies = {r.run_id: _encode(r) for r in records}
        runs = list(dict.fromkeys([*by_run, *bodies]))
        refused = {run_id for run_id in runs if fenced and run_id not in tokens}
        mine = [run_id for run_id in runs if run_id not in refused]
        if not mine:
            return refused
        if self._append is None:
            self._append = self._client.register_script(APPEND_SCRIPT)
        script = self._append
        async with self._client.pipeline(transaction=False) as pipe:
            requests: list[Awaitable[object]] = [
                script(
                    keys=[
                        lease_key or self._lease_key(run_id),
                        self._events_key(run_id),
                        self.prefix + "runs",
                    ],
                    args=[
                        tokens.get(run_id, "") if fenced else "",
                        run_id,
                        bodies.get(run_id, b""),
                        *by_run.get(run_id, []),
                    ],
                    client=pipe,
                )
                for run_id in mine
            ]
        results = [await request for request in requests]
        return refused | {run_id for run_id, ok in zip(mine, results, strict=True) if ok != 1}

    async def read(self, run_id: str, after_seq: int, limit: int) -> list[bytes]:
        """Events with seq > after_seq, oldest first."""
        assert self._client is not None, "storage is not open"
        entries = await self._client.xrange(
            self._events_key(run_id), start=f"(0-{after_seq}", end="+", count=limit
        )
        out = []
        for entry in entries:
            body = entry.field_values[b"d"]
            out.append(body if isinstance(body, bytes) else body.encode())
        return out

    async def trim(self, run_id: str, first_seq: int) -> None:
        """XTRIM MINID 0-<first_seq> (the record's first_seq is written with it)."""
        assert self._client is not None, "storage is not open"
        # coredis types the threshold as int, but MINID takes a stream id.
        threshold: int = f"0-{first_seq}"  # type: ignore[assignment]
        await self._client.xtrim(self._events_key(run_id), PureToken.MINID, threshold)

    async def delete_runs(self, run_ids: list[str]) -> None:
        """DEL the streams (and cluster keys) and HDEL the records, in one MULTI/EXEC;
        then drop the runs' blob references, and each blob no run refers to any more."""
        assert self._client is not None, "storage is not open"
        client = self._client
        held = {run_id: await client.smembers(self._blobs_of(run_id)) for run_id in run_ids}
        async with client.pipeline(transaction=True) as pipe:
            for run_id in run_ids:
                base = f"{self.prefix}run:{{{run_id}}}:"
                names = ("ev", "lease", "epoch", "ctl", "ctldone", "failure", "handovers", "blobs")
                pipe.delete([base + name for name in names])
            pipe.hdel(self.prefix + "runs", run_ids)
            pipe.zrem(self.prefix + "runs:index", run_ids)  # cluster mode's `runs` index
        for run_id, keys in held.items():
            for raw in keys:
                key = _text(raw)
                await client.srem(self._blob_key(key) + ":runs", [run_id])
                if await client.scard(self._blob_key(key) + ":runs") == 0:
                    await client.delete([self._blob_key(key), self._blob_key(key) + ":runs"])

    async def load_kept(self, space: str) -> dict[str, bytes]:
        """HGETALL of `<prefix><space>`."""
        assert self._client is not None, "storage is not open"
        found = await self._client.hgetall(self.prefix + space)
        return {_text(k): v if isinstance(v, bytes) else v.encode() for k, v in found.items()}

    async def keep(self, space: str, put: dict[str, bytes], delete: Sequence[str] = ()) -> None:
        """HSET and HDEL on `<prefix><space>`, in one MULTI."""
        assert self._client is not None, "storage is not open"
        async with self._client.pipeline(transaction=True) as pipe:
            if put:
                pipe.hset(self.prefix + space, dict(put))
            if delete:
                pipe.hdel(self.prefix + space, list(delete))

    def _blob_key(self, key: str) -> str:
        return f"{self.prefix}blob:{key}"

    def _blobs_of(self, run_id: str) -> str:
        return f"{self.prefix}run:{{{run_id}}}:blobs"

    async def put_blobs(self, run_id: str, blobs: dict[str, bytes]) -> None:
        """SET NX each blob (stored once) and record who refers to it, both ways."""
        assert self._client is not None, "storage is not open"
        async with self._client.pipeline(transaction=False) as pipe:
            for key, data in blobs.items():
                pipe.set(self._blob_key(key), data, condition=PureToken.NX)
                pipe.sadd(self._blob_key(key) + ":runs", [run_id])
            if blobs:
                pipe.sadd(self._blobs_of(run_id), list(blobs))

    async def ref_blobs(self, run_id: str, keys: list[str]) -> None:
        """The run's references to blobs stored already."""
        assert self._client is not None, "storage is not open"
        async with self._client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.sadd(self._blob_key(key) + ":runs", [run_id])
            if keys:
                pipe.sadd(self._blobs_of(run_id), keys)

    async def get_blobs(self, keys: list[str], run_id: str | None = None) -> dict[str, bytes]:
        """MGET of the blobs (with `run_id`: only those the run refers to)."""
        assert self._client is not None, "storage is not open"
        if run_id is not None and keys:
            mine = await self._client.smembers(self._blobs_of(run_id))
            held = {_text(member) for member in mine}
            keys = [key for key in keys if key in held]
        if not keys:
            return {}
        values = await self._client.mget([self._blob_key(key) for key in keys])
        return {
            key: value if isinstance(value, bytes) else value.encode()
            for key, value in zip(keys, values, strict=True)
            if value is not None
        }

    async def upkeep(self) -> None:
        """Redis keeps itself up."""


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
