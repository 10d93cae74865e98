"""One subscription: replay from the journal after a cursor, then follow the run live.

The feed pulls from the journal at its own pace, so a slow client only slows its
own feed: the run and other clients never wait for it, and the memory it holds is
one frame queue. Because it reads by cursor, a subscription with `afterSeq: N`
gets exactly the matching events with seq > N — replayed, then live, with no race
between the two and no duplicates. Events the retention policy has trimmed are
reported as one `gap` frame (`fromSeq`..`toSeq`) in their place.

A caught-up feed with a `LiveSink` *follows* the run instead of waiting: the
journal offers it each committed batch (`offer`), and it writes the frame to its
client there and then if the connection is idle. So a live event reaches a
thousand watchers in one pass of the journal's writer, not through a thousand
woken tasks, and watchers with the same filter share one encoded frame. Anything
that stands in the way (a send under way, a full socket, a gap, a batch too big
for one frame) hands the feed back to its own task, which reads from its cursor.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

import msgspec
import trio

from orchestrator.core.blocks import BlockMerger
from orchestrator.core.events import Event, EventType, encode_event
from orchestrator.core.filters import FeedFilter, FilterSpec
from orchestrator.protocol import end_frame, events_frame, gap_frame
from orchestrator.storage.journal import Entry, Journal, RunLog

if TYPE_CHECKING:
    from orchestrator.agui.mapping import AguiStream

__all__ = ["Feed", "LiveSink", "Sent"]

_STATUS_HIDDEN = frozenset({EventType.REASONING, EventType.TOOL_CALL_DELTA})


class Sent(enum.Enum):
    """What became of a frame handed to `LiveSink.send_now`."""

    WHOLE = "whole"
    """On the socket."""
    PARTLY = "partly"
    """Taken, but not all of it is on the socket yet: `flush` writes the rest."""
    NOT_NOW = "not now"
    """Nothing written (the connection is busy or closing): send it the usual way."""


class LiveSink(Protocol):
    """How a live feed writes from the journal's writer task (no awaiting there)."""

    def send_now(self, frame: bytes) -> Sent:
        """Write `frame` to the client now if the connection is idle (never awaits)."""
        ...

    async def flush(self) -> None:
        """Write what a `Sent.PARTLY` frame left over."""


class Feed:
    """The state of one subscription; `run()` drives it until the run's `end`."""

    def __init__(
        self,
        journal: Journal,
        sub: str,
        run_id: str,
        *,
        after_seq: int = 0,
        filter: FilterSpec | None = None,
        detail: str = "full",
        ag_ui: bool = False,
        batch_events: int = 1024,
        frame_bytes: int = 256 * 1024,
        coalesce: float = 0.0,
    ) -> None:
        log = journal.get(run_id)
        self.journal = journal
        self.sub = sub
        self.run_id = run_id
        self.cursor = after_seq
        """Highest seq already handled (sent, or filtered out)."""
        self.filter = FeedFilter(
            filter, root_agent_id=log.record.agent_id, root_session_id=log.record.root_session_id
        )
        self.status_only = detail == "status"
        self.blocks = BlockMerger() if detail == "blocks" else None
        self.agui: AguiStream | None = None
        """`format: "ag-ui"`: the events written as AG-UI events (this feed's own state)."""
        if ag_ui:
            from orchestrator.agui.mapping import AguiStream  # the `agui` extra, only here

            self.agui = AguiStream(run_id)
        self.batch_events = batch_events
        self.frame_bytes = frame_bytes
        self.coalesce = coalesce
        """Seconds a caught-up (live) feed waits after a wake-up, so the events of the
        next moment share one frame: with many watchers, frames — not events — cost."""
        self.everything = (
            self.filter.everything
            and not self.status_only
            and self.blocks is None
            and self.agui is None
        )
        self._share_key: object = (
            sub,
            detail,
            ag_ui,
            msgspec.json.encode(filter) if filter is not None else b"",
        )
        """Feeds with equal keys make equal frames of the same events."""
        self._live: LiveSink | None = None
        self._woken = trio.lowlevel.ParkingLot()

    def wants(self, event: Event) -> bool:
        """Does this subscription deliver the event?"""
        if self.status_only and event.type in _STATUS_HIDDEN:
            return False
        return self.filter.matches(event)

    async def run(
        self, send: Callable[[bytes], Awaitable[None]], live: LiveSink | None = None
    ) -> None:
        """Send matching events as `events` frames, then `end`; returns after `end`.

        With `live`, the caught-up feed follows the run (module docstring); a
        `blocks` or coalescing feed always reads for itself.
        """
        log = self.journal.get(self.run_id)
        if self.blocks is None and self.agui is None and not self.coalesce:
            self._live = live
        self.journal.mirrors.watch(log, +1)  # a run of another instance is tailed while watched
        try:
            await self._run(send)
        finally:
            self.journal.unfollow(log, self)
            self.journal.mirrors.watch(log, -1)

    async def _run(self, send: Callable[[bytes], Awaitable[None]]) -> None:
        journal, run_id = self.journal, self.run_id
        log = journal.get(run_id)
        behind = False
        while True:
            entries = await journal.read(run_id, self.cursor, self.batch_events)
            if entries and behind:  # catching up, and frames may go out without a wait:
                await trio.lowlevel.checkpoint()  # let the others have a turn
            behind = bool(entries)
            if entries and entries[0].seq > self.cursor + 1:
                await self._gap(send, entries[0].seq - 1)
            if entries:
                if self.blocks is not None:
                    raws = _merged_raws(self.blocks, entries, self.wants)
                elif self.agui is not None:
                    raws = self._agui_raws(self.agui, entries)
                else:
                    raws = self._raws(entries)
                for frame_raws in _split(raws, self.frame_bytes):
                    await send(events_frame(self.sub, frame_raws))
                self.cursor = entries[-1].seq
                continue
            if log.finished and self.cursor >= log.committed:
                if self.blocks is not None:
                    rest = [encode_event(e) for e in self.blocks.flush()]
                    if rest:
                        await send(events_frame(self.sub, rest))
                await send(end_frame(self.sub, run_id, log.finished_status or "completed"))
                return
            if self._live is not None:
                await self._follow(log, self._live)
                continue
            await journal.wait(run_id, self.cursor)
            if self.coalesce:
                await trio.sleep(self.coalesce)

    async def _follow(self, log: RunLog, live: LiveSink) -> None:
        """Follow the run until the journal hands the feed back (`wake`)."""
        if log.committed > self.cursor or log.finished or log.fenced:
            await trio.lowlevel.checkpoint()
            return
        self.journal.follow(log, self)
        try:
            await self._woken.park()
        finally:
            self.journal.unfollow(log, self)
        await live.flush()

    def offer(self, entries: list[Entry], shared: dict[object, bytes]) -> bool:
        """`Follower.offer`: write the frame of `entries` now, or decline (module doc)."""
        live = self._live
        if live is None or entries[0].seq != self.cursor + 1 or len(entries) > self.batch_events:
            return False
        frame = shared.get(self._share_key)
        if frame is None:
            raws = self._raws(entries)
            frame = events_frame(self.sub, raws) if raws else b""
            shared[self._share_key] = frame
        if len(frame) > self.frame_bytes:
            return False
        if frame:
            sent = live.send_now(frame)
            if sent is Sent.NOT_NOW:
                return False
        else:
            sent = Sent.WHOLE  # nothing of it matches
        self.cursor = entries[-1].seq
        return sent is Sent.WHOLE

    def _raws(self, entries: list[Entry]) -> list[bytes]:
        """The encoded events of `entries` this subscription delivers (not `blocks`)."""
        if self.everything:
            return [e.raw for e in entries]
        return [e.raw for e in entries if self.wants(e.event)]

    def _agui_raws(self, stream: AguiStream, entries: list[Entry]) -> list[bytes]:
        """`format: "ag-ui"`: the AG-UI events of the entries this subscription delivers."""
        return [
            out.model_dump_json(by_alias=True).encode()
            for entry in entries
            if self.wants(entry.event)
            for out in stream.feed(entry.event)
        ]

    def wake(self) -> None:
        """`Follower.wake`: the feed's task reads for itself again."""
        self._woken.unpark_all()

    async def _gap(self, send: Callable[[bytes], Awaitable[None]], to_seq: int) -> None:
        if self.blocks is not None:
            rest = [encode_event(e) for e in self.blocks.flush()]
            if rest:
                await send(events_frame(self.sub, rest))
        await send(gap_frame(self.sub, self.cursor + 1, to_seq))
        self.cursor = to_seq


def _merged_raws(
    merger: BlockMerger, entries: list[Entry], wants: Callable[[Event], bool]
) -> list[bytes]:
    """Events to send at the `blocks` detail level (originals keep their encoding)."""
    originals = {id(e.event): e.raw for e in entries}
    raws: list[bytes] = []
    for entry in entries:
        if wants(entry.event):
            for event in merger.feed(entry.event):
                raws.append(originals.get(id(event)) or encode_event(event))
    return raws


def _split(raws: list[bytes], budget: int) -> list[list[bytes]]:
    """Cut a batch into frames of about `budget` bytes (one event per frame at least)."""
    if not raws:
        return []
    if sum(map(len, raws)) + len(raws) <= budget:
        return [raws]
    frames: list[list[bytes]] = []
    current: list[bytes] = []
    size = 0
    for raw in raws:
        if current and size + len(raw) > budget:
            frames.append(current)
            current, size = [], 0
        current.append(raw)
        size += len(raw) + 1
    frames.append(current)
    return frames
