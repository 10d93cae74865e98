"""What the journal needs from a storage backend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import msgspec

from agents.core.attachments import AttachmentInfo, BlobStore
from agents.errors import OrchestratorError
from orchestrator.core.webhooks import WebhookSpec

__all__ = ["BlobStore", "RunOptions", "RunRecord", "Storage", "StorageError"]


class StorageError(OrchestratorError):
    """A storage backend cannot be opened (bad path, unreachable, refused settings)."""

    code = "unavailable"


class ForkPoint(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """What a fork was asked (docs/fork.md): the run and seq it starts from, the
    message and who gets it, and whether its turns are replayed. Kept with the fork's
    record, so whichever process starts the fork (a cluster worker, a restarted
    server) starts it as it was asked."""

    run_id: str
    seq: int
    agent_key: str | None = None
    message: str | None = None
    replay: bool = False


class RunOptions(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """What a client asked of a run beyond its input, kept with its record (a resume,
    a takeover and a fork start it the same way)."""

    output_schema: dict[str, Any] | None = None
    """The JSON Schema its root's answer must match (docs/structured.md)."""
    attachments: tuple[AttachmentInfo, ...] = ()
    """Images and files given with its input (their bytes: the store's blobs)."""
    trigger: dict[str, Any] | None = None
    """The trigger that started it: `{name, scheduledFor}` (docs/triggers.md)."""
    webhooks: tuple[WebhookSpec, ...] = ()
    """Its own webhooks, as its `run` op gave them (docs/webhooks.md#webhooks-out)."""


class RunRecord(msgspec.Struct, kw_only=True):
    """One run as listed by the `runs` op and kept across restarts."""

    run_id: str
    agent_id: str
    input: str
    status: str
    """`running`, `completed`, `failed`, `cancelled` or `interrupted`."""
    created_at: float
    root_session_id: str
    last_seq: int = 0
    finished_at: float | None = None
    owner: str | None = None
    """The name of the token that started the run (None: no auth configured)."""
    first_seq: int = 1
    """The oldest seq still kept (retention trims older events; a resume below gets `gap`)."""
    worker: str | None = None
    """Cluster mode: the worker executing the run (its latest owner)."""
    attempt: int = 0
    """Cluster mode: 1 for the first worker, +1 for each takeover."""
    context_id: str | None = None
    """The conversation the client that started the run put it in (an A2A `contextId`),
    returned with the run as it was given; None: none given."""
    forked_from: ForkPoint | None = None
    """A fork: the run and seq it started from (None: not a fork)."""
    thread_id: str | None = None
    """The thread the run belongs to (docs/threads.md; None: a run from before threads).
    A thread is its owner's: the same id of two tokens names two threads."""
    previous_run_id: str | None = None
    """The run whose conversation this one goes on from (None: the thread's first)."""
    continues_agent: str | None = None
    """With `previous_run_id`: the agent of that run whose conversation this run's root
    continues (None: that run's root)."""
    options: RunOptions | None = None
    """What the client asked of it beyond its input (None: nothing)."""

    def sort_key(self) -> tuple[float, str]:
        """Creation order; ties (same clock reading) broken by runId, never by a store's hash."""
        return (self.created_at, self.run_id)


class Storage(Protocol):
    """A durable (or not) home for run records and encoded events.

    A backend is opened with `async with Backend.open(…) as storage` (connections
    live exactly as long as the block; raises `StorageError` naming the store when it
    cannot be used). Its methods are called from the journal's writer task or a
    feed; a failure raises any exception, and the journal retries (it never loses
    what it has not written).
    """

    durable: bool
    """False: the journal must keep every event in memory (nothing to read back)."""

    async def load(self) -> list[RunRecord]:
        """Every run the store holds, in `RunRecord.sort_key` order."""
        ...

    async def write(self, records: list[RunRecord], events: list[tuple[str, int, bytes]]) -> None:
        """Upsert `records` and insert `(run_id, seq, json)` events, atomically."""
        ...

    async def read(self, run_id: str, after_seq: int, limit: int) -> list[bytes]:
        """Encoded events of `run_id` with seq > after_seq, in seq order, at most `limit`."""
        ...

    async def trim(self, run_id: str, first_seq: int) -> None:
        """Forget the events of `run_id` below `first_seq` (retention)."""
        ...

    async def delete_runs(self, run_ids: list[str]) -> None:
        """Forget whole runs: their records and events, and the blobs no other run
        refers to (retention)."""
        ...

    async def put_blobs(self, run_id: str, blobs: dict[str, bytes]) -> None:
        """Keep `blobs` (an attachment's id → its bytes) for `run_id`: each stored once,
        however many runs refer to it (docs/structured.md#attachments)."""
        ...

    async def ref_blobs(self, run_id: str, keys: list[str]) -> None:
        """`run_id` refers to blobs already stored (a fork, a thread's next run)."""
        ...

    async def get_blobs(self, keys: list[str], run_id: str | None = None) -> dict[str, bytes]:
        """The blobs of `keys` that are stored (a missing one is left out; with
        `run_id`, one that run does not refer to as well)."""
        ...

    async def load_kept(self, space: str) -> dict[str, bytes]:
        """Every value kept in `space` (`triggers`: each trigger's state; `outbox`: the
        webhooks' deliveries and cursors), by key."""
        ...

    async def keep(self, space: str, put: dict[str, bytes], delete: Sequence[str] = ()) -> None:
        """Replace the values of `put` and remove the keys of `delete` in `space`,
        atomically."""
        ...

    async def upkeep(self) -> None:
        """What the store does in the background while the journal is open (SQLite:
        WAL checkpoints); returns at once where there is nothing. Run in the journal's
        nursery, cancelled when it closes."""
        ...
