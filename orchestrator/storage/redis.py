"""`redis://HOST:PORT/DB`: run records in a hash, each run's events in a Redis Stream.

Stream entry ids are `0-<seq>`, so a stream id *is* the event's seq: replay after a
cursor is `XRANGE key (0-<seq> + COUNT n`, and Redis refuses an id at or below the
last one, which fences off a second writer. One batch is one MULTI/EXEC pipeline.
Uses coredis, which runs on trio (anyio). The client is entered in `open()` and left
in `aclose()`; both must run in the same task (the server's).

Keys (prefix `aor:` unless the URL says `?prefix=…`): `<prefix>runs` (hash runId →
record JSON) and `<prefix>run:{<runId>}:ev` (the stream; braces keep a run's keys in
one cluster slot).
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from urllib.parse import parse_qs, urlsplit

import coredis
import msgspec

from orchestrator.storage.base import RunRecord

__all__ = ["RedisStorage"]

_encode = msgspec.json.Encoder().encode
_decode_record = msgspec.json.Decoder(RunRecord).decode


class RedisStorage:
    """Durable journal storage in Redis."""

    durable = True

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.url = parts._replace(query="").geturl()
        self.prefix = parse_qs(parts.query).get("prefix", ["aor:"])[0]
        self._client: coredis.Redis[bytes] | None = None
        self._stack = AsyncExitStack()

    def _events_key(self, run_id: str) -> str:
        return f"{self.prefix}run:{{{run_id}}}:ev"

    async def open(self) -> list[RunRecord]:
        """Connect and load every run record."""
        client: coredis.Redis[bytes] = coredis.Redis.from_url(self.url, decode_responses=False)
        self._client = await self._stack.enter_async_context(client)
        raw = await self._client.hgetall(self.prefix + "runs")
        records = [_decode_record(value) for value in raw.values()]
        return sorted(records, key=lambda r: r.created_at)

    async def write(self, records: list[RunRecord], events: list[tuple[str, int, bytes]]) -> None:
        """One MULTI/EXEC: the events (XADD with id 0-seq) and the records."""
        assert self._client is not None, "storage is not open"
        async with self._client.pipeline(transaction=True) as pipe:
            for run_id, seq, body in events:
                pipe.xadd(self._events_key(run_id), {b"d": body}, identifier=f"0-{seq}")
            if records:
                pipe.hset(self.prefix + "runs", {r.run_id: _encode(r) for r in records})

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

    async def aclose(self) -> None:
        """Disconnect."""
        await self._stack.aclose()
        self._client = None
