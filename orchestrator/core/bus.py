"""The hierarchical event bus: one flat sink per run, one tagging `Bus` per agent.

Forwarding is flat on purpose. A child's `Bus` does not relay into its parent's
bus level by level: it holds the run's `RunSink` directly and stamps its own
`Source` (built once, when the child is spawned) on every event. An event costs
one hop whatever the depth, so a depth-4 tree streams as fast as a depth-1 one.

`current_bus` is how `agent_spawn` finds the bus of the agent that calls it. A
non-streaming `call()` runs on a `NullBus`, whose events go nowhere, and its
children run blocking on null buses too. Both implement `agents.emitter.Emitter`.
"""

from __future__ import annotations

import contextvars
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, Required, TypedDict, Unpack

from agents.emitter import Emitter, NullEmitter
from orchestrator.core.events import Event, EventType, Source

__all__ = [
    "AnyBus",
    "AnySink",
    "Bus",
    "NullBus",
    "NullSink",
    "Outlet",
    "RunSink",
    "child_source",
    "current_bus",
    "new_agent_key",
    "new_run_id",
    "new_session_id",
]

current_bus: contextvars.ContextVar[AnyBus | None] = contextvars.ContextVar(
    "current_bus", default=None
)
"""The bus of the agent running in this context (a `NullBus` in a non-streaming
call; None outside any run). The one context variable of the runtime, read by
`agent_spawn`: everything else reaches tools through their `ToolContext`."""


def new_run_id() -> str:
    """`run-<32 hex>` (contract §1)."""
    return f"run-{uuid.uuid4().hex}"


def new_session_id(*, root: bool) -> str:
    """`sess-<hex>` for a root agent, `sub-<hex>` for a child (contract §1)."""
    return f"{'sess' if root else 'sub'}-{uuid.uuid4().hex[:16]}"


def new_agent_key(agent_id: str) -> str:
    """`agent:<agentId>:<uuid>` (contract §1)."""
    return f"agent:{agent_id}:{uuid.uuid4()}"


def child_source(
    *,
    parent: Source | None,
    root_session_id: str,
    agent_id: str,
    agent_name: str,
    task_id: str | None = None,
    parent_tool_call_id: str | None = None,
) -> Source:
    """The Source of a new child of `parent` (None = the root agent).

    Depth is the parent's + 1; the path is `<root sessionId>/<agentId>` at depth 1
    and `<parent path>/<agentId>` below (contract §2).
    """
    if parent is None:
        depth, parent_path, parent_session = 1, root_session_id, root_session_id
    else:
        depth, parent_path, parent_session = parent.depth + 1, parent.path, parent.session_id
    return Source(
        agent_key=new_agent_key(agent_id),
        agent_id=agent_id,
        agent_name=agent_name,
        session_id=new_session_id(root=False),
        parent_session_id=parent_session,
        depth=depth,
        path=f"{parent_path}/{agent_id}",
        task_id=task_id,
        parent_tool_call_id=parent_tool_call_id,
    )


class ChildTags(TypedDict, total=False):
    """What a spawn says about a new child: its agent, and where it was spawned from."""

    agent_id: Required[str]
    agent_name: Required[str]
    task_id: str | None
    parent_tool_call_id: str | None


class Outlet(Protocol):
    """Where a run's events go: a bounded buffer, a journal, a test list."""

    def put_nowait(self, event: Event) -> bool:
        """Take the event now (it may go over capacity); True: producers should wait.

        One call per event answers both questions: on the hot path every Python call
        is a measurable share of the cost of forwarding an event.
        """
        ...

    def put_many(self, events: list[Event]) -> bool:
        """`put_nowait` for several events at once (the deltas of one network read)."""
        ...

    async def wait_writable(self) -> None:
        """Return once the outlet has room again (or is closed)."""


class RunSink:
    """Numbers a run's events (1-based, gap-free) and hands them to the outlet.

    `Bus.emit` (same module) does the numbering inline for speed: one function
    call per delta instead of three.

    All agents of a run share one RunSink, so `seq` order is emission order and
    a child's events precede the parent's TOOL_RESULT that follows them.
    """

    __slots__ = ("_clock", "_durable", "_outlet", "_seq", "closed", "root_session_id", "run_id")

    def __init__(
        self,
        run_id: str,
        root_session_id: str,
        outlet: Outlet,
        *,
        clock: Callable[[], float] = time.time,
        after_seq: int = 0,
        durable: Callable[[int], Awaitable[bool]] | None = None,
    ) -> None:
        self.run_id = run_id
        self.root_session_id = root_session_id
        self._outlet = outlet
        self._clock = clock
        self._seq = after_seq
        """The last seq handed out (`after_seq`: a run continued by another worker)."""
        self._durable = durable
        """Waits until the events up to a seq are stored (a journaled run; None: the
        events are not stored, nothing to wait for)."""
        self.closed = False

    @property
    def last_seq(self) -> int:
        """The seq of the newest event (0 before the first)."""
        return self._seq

    def drop(self) -> None:
        """From now on the run's events go nowhere (the server stops and will resume the
        run from what its journal has): nothing more is journaled, not even its end."""
        self._outlet = _DROP

    @property
    def dropped(self) -> bool:
        """`drop` was called: the run is being suspended."""
        return self._outlet is _DROP

    async def durable(self) -> bool:
        """Wait until every event handed out so far is stored (`Emitter.durable`)."""
        if self._outlet is _DROP:
            return False
        return True if self._durable is None else await self._durable(self._seq)

    streaming = True
    """Its events reach an outlet (a consumer, a journal): a person can see and answer."""

    def bus(self) -> Bus:
        """The root agent's bus."""
        return Bus(self)

    def publish_nowait(
        self,
        source: Source | None,
        type: EventType,
        data: Mapping[str, Any],
        last: bool = False,
    ) -> Event:
        """Number and hand over one event without waiting for room.

        Lifecycle events use this directly (they must go out even while the
        emitting agent is being cancelled); the overshoot it allows is bounded
        by the number of agents.
        """
        if self.closed:
            raise RuntimeError(f"run {self.run_id} already finished; cannot emit {type}")
        self._seq += 1
        event = Event(
            run_id=self.run_id,
            seq=self._seq,
            ts=self._clock(),
            type=type,
            source=source,
            last=last,
            data=data,  # type: ignore[arg-type]  # a payload is a plain dict at run time
        )
        self._outlet.put_nowait(event)  # lifecycle events never wait
        if type is EventType.RUN_FINISHED:
            self.closed = True
        return event


class NullSink:
    """The sink of a non-streaming call: it numbers and keeps nothing (its bus is a
    `NullBus`), so a run without a consumer is the same object as one with."""

    __slots__ = ("root_session_id", "run_id")

    closed = False
    dropped = False
    last_seq = 0
    streaming = False
    """Nobody sees its events (`RunSink.streaming`)."""

    def __init__(self, run_id: str, root_session_id: str) -> None:
        self.run_id = run_id
        self.root_session_id = root_session_id

    def bus(self) -> NullBus:
        """The root agent's bus."""
        return NullBus(self.run_id, self.root_session_id)

    def drop(self) -> None:
        """Nothing is kept anyway (`RunSink.drop`)."""

    async def durable(self) -> bool:
        """Nothing to wait for (`RunSink.durable`)."""
        return True

    def publish_nowait(
        self,
        source: Source | None,
        type: EventType,
        data: Mapping[str, Any],
        last: bool = False,
    ) -> None:
        """The event goes nowhere (`RunSink.publish_nowait`)."""


class _Dropped:
    """An outlet that takes every event and keeps none (`RunSink.drop`)."""

    def put_nowait(self, event: Event) -> bool:
        return False

    def put_many(self, events: list[Event]) -> bool:
        return False

    async def wait_writable(self) -> None:
        return


_DROP = _Dropped()


class Bus:
    """One agent instance's view of its run: emits events stamped with its Source."""

    __slots__ = ("sink", "source")

    def __init__(self, sink: RunSink, source: Source | None = None) -> None:
        self.sink = sink
        self.source = source

    @property
    def agent_key(self) -> str | None:
        """The instance's agentKey (None for the root agent)."""
        return self.source.agent_key if self.source is not None else None

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.sink.run_id

    @property
    def closed(self) -> bool:
        """True once RUN_FINISHED went out."""
        return self.sink.closed

    @property
    def depth(self) -> int:
        """Depth of the agent that owns this bus (0 for the root)."""
        return 0 if self.source is None else self.source.depth

    @property
    def dropped(self) -> bool:
        """The run is being suspended: its events go nowhere now (`RunSink.drop`)."""
        return self.sink.dropped

    def forward_nowait(
        self, source: Source, type: EventType, data: dict[str, Any], last: bool = False
    ) -> None:
        """Publish an event of another run's agent (a remote subtree's, tagged `source`
        here) into this run, unless it has ended."""
        if not self.sink.closed:
            self.sink.publish_nowait(source, type, data, last)

    async def _emit(self, type: EventType, data: Mapping[str, Any], last: bool = False) -> None:
        """Emit one event of this agent, waiting if the run's outlet is full."""
        if self._offer(type, data, last):
            await self.sink._outlet.wait_writable()

    def _offer(self, type: EventType, data: Mapping[str, Any], last: bool = False) -> bool:
        """Emit one event now; True: the outlet is full, `await wait_writable()` next.

        `RunSink.publish`, inlined: this is the hot path of every delta of every
        agent (RUN_FINISHED never comes here, so `closed` needs no update).
        """
        sink = self.sink
        if sink.closed:
            raise RuntimeError(f"run {sink.run_id} already finished; cannot emit {type}")
        sink._seq = seq = sink._seq + 1
        # Positional, in field order (run_id, seq, ts, type, source, last, data); a
        # typed payload (agents/core/payloads.py) is a plain dict at run time.
        return sink._outlet.put_nowait(
            Event(sink.run_id, seq, sink._clock(), type, self.source, last, data)  # type: ignore[arg-type]
        )

    def offer_deltas(self, texts: list[str]) -> bool:
        """REASONING `{delta}` events for texts that arrived together; True: full.

        One call, one clock reading and one hand-over for the whole read (each delta
        still gets its own event and seq): per delta, the calls were most of the cost.
        """
        sink = self.sink
        if sink.closed:
            raise RuntimeError(f"run {sink.run_id} already finished; cannot emit REASONING")
        seq = sink._seq
        sink._seq = seq + len(texts)
        run_id, ts, source, kind = sink.run_id, sink._clock(), self.source, EventType.REASONING
        return sink._outlet.put_many(
            [
                Event(run_id, seq + i, ts, kind, source, False, {"delta": text})
                for i, text in enumerate(texts, 1)
            ]
        )

    async def wait_writable(self) -> None:
        """Return once the run's outlet has room again."""
        await self.sink._outlet.wait_writable()

    async def durable(self) -> bool:
        """Return once the run's events so far are stored (`Emitter.durable`)."""
        return await self.sink.durable()

    def emit_any(self, type: EventType, data: Mapping[str, Any], last: bool = False) -> None:
        """`emit_nowait` of an event whose type is a value, not a literal (a run's
        opening, a child's events mapped from another protocol): its payload was made
        where the type was chosen."""
        self.sink.publish_nowait(self.source, type, data, last)

    # Each type takes its own payload, as through the `Emitter` (agents/core/payloads.py):
    # mypy checks every producer that holds a `Bus`; at run time they are the above.
    if TYPE_CHECKING:
        emit = Emitter.emit
        offer = Emitter.offer
        emit_nowait = Emitter.emit_nowait
    else:
        emit, offer, emit_nowait = _emit, _offer, emit_any

    def child(self, **tags: Unpack[ChildTags]) -> Bus:
        """A bus for a new child instance; it publishes straight into the same sink."""
        source = child_source(parent=self.source, root_session_id=self.sink.root_session_id, **tags)
        return Bus(self.sink, source)

    def at(self, source: Source | None) -> Bus:
        """A bus of the same run for the agent `source` (one rebuilt from the journal,
        or one whose end the run writes for it)."""
        return Bus(self.sink, source)

    streaming = True
    """Its events reach a sink (a consumer, a journal): a person can see and answer."""


class NullBus(NullEmitter):
    """A bus whose events go nowhere: a non-streaming `call()`.

    It drops events as `agents.emitter.NullEmitter` does; what it adds is a Source,
    so children still get one built the same way (their agentKey stays valid for
    `agent_send`), but nothing is numbered or stored.
    """

    __slots__ = ("root_session_id", "run_id", "source")

    def __init__(self, run_id: str, root_session_id: str, source: Source | None = None) -> None:
        self.run_id = run_id
        self.root_session_id = root_session_id
        self.source = source

    @property
    def agent_key(self) -> str | None:
        """The instance's agentKey (None for the root agent)."""
        return self.source.agent_key if self.source is not None else None

    @property
    def depth(self) -> int:
        """Depth of the agent that owns this bus (0 for the root)."""
        return 0 if self.source is None else self.source.depth

    dropped = False

    def forward_nowait(
        self, source: Source, type: EventType, data: dict[str, Any], last: bool = False
    ) -> None:
        """Nothing to do (`Bus.forward_nowait`)."""

    def emit_any(self, type: EventType, data: Mapping[str, Any], last: bool = False) -> None:
        """Nothing to do (`Bus.emit_any`)."""

    def child(self, **tags: Unpack[ChildTags]) -> NullBus:
        """A null bus for a new child instance."""
        source = child_source(parent=self.source, root_session_id=self.root_session_id, **tags)
        return NullBus(self.run_id, self.root_session_id, source)

    def at(self, source: Source | None) -> NullBus:
        """A null bus of the same run for the agent `source` (`Bus.at`)."""
        return NullBus(self.run_id, self.root_session_id, source)

    streaming = False
    """Its events go nowhere: nobody sees them, nobody can answer a call (`Bus.streaming`)."""


AnyBus = Bus | NullBus
"""What `current_bus` holds during a run."""
AnySink = RunSink | NullSink
"""Where a run's events go: a streaming run's sink, or a call's null one."""
