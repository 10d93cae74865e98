"""The shell around `trace.py`: follow the runs this process executes, turn their
committed events into spans, and export them over OTLP/HTTP — off the event path.

Imported only when `telemetry:` is configured (the `otel` extra). The journal tells
`Telemetry.watch` of every run this process starts or takes over; a follower on the
run's log takes each committed batch by reference (one append, no work) and one task
builds the spans later; another exports them in batches from a thread. Both queues
are bounded: a slow or dead collector costs dropped spans (counted in /metrics),
never a slower run. A run taken over or resumed is first replayed from its journal,
so its spans (same ids: `trace.py`) continue the same trace; spans that ended before
the takeover were the previous process's to export and are not sent again.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import trio
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from orchestrator.core.events import EventType
from orchestrator.storage.runlog import Entry, RunLog
from orchestrator.telemetry.trace import ModelInfo, SpanRecord, TraceBuilder

if TYPE_CHECKING:
    from orchestrator.config import TelemetryConfig
    from orchestrator.storage.journal import Journal

__all__ = ["Telemetry", "model_info", "open_telemetry"]

logger = logging.getLogger(__name__)

MAX_QUEUED_EVENTS = 200_000
"""Committed events waiting to become spans, over all runs; past it a run's batch is
dropped and that run is no longer traced (counted: `dropped_events`)."""
EXPORT_BATCH = 512
EXPORT_EVERY = 1.0
"""Seconds between two exports when fewer than `EXPORT_BATCH` spans wait."""
FINAL_FLUSH_SECONDS = 5.0
_SCOPE = InstrumentationScope("agent-orchestrator")
_REASONING = EventType.REASONING


class _RunTrace:
    """One run being traced: its builder and the batches not yet turned into spans."""

    def __init__(self, hub: Telemetry, log: RunLog) -> None:
        self.hub = hub
        self.log = log
        self.run_id = log.record.run_id
        self.replay_to = log.committed
        """Events journaled before this process took the run: replayed, not re-exported."""
        self.after = 0
        """Events up to this seq were replayed: later batches start after it."""
        self.builder = TraceBuilder(
            self.run_id,
            hub.models,
            model_keys=hub.model_keys,
            capture_content=hub.capture,
            names=hub.names,
            root_session=log.record.root_session_id,
        )
        self.batches: deque[list[Entry]] = deque()
        self.seen = log.committed
        """The last seq handed to this trace (by the journal, or read by `catch_up`)."""
        self.dropped = False

    def offer(self, entries: list[Entry], shared: dict[object, bytes]) -> bool:
        hub = self.hub
        if hub.queued_events + len(entries) > MAX_QUEUED_EVENTS:
            hub.dropped_events += len(entries)
            self.dropped = True  # its spans could no longer be right: stop tracing it
            return False
        self.seen = entries[-1].seq
        self.batches.append(entries)
        hub.queued_events += len(entries)
        hub.dirty.add(self)
        hub.wake.set()
        return entries[-1].event.type is not EventType.RUN_FINISHED

    def wake(self) -> None:
        """No longer followed: the run ended (its last batches may still be on their
        way: read them), or another worker took it over (its spans are that one's)."""
        if self.dropped or self.log.fenced:  # (not this process's to finish)
            self.hub.traces.pop(self.run_id, None)
        elif self.hub.nursery is not None:
            self.hub.nursery.start_soon(self.hub.catch_up, self)


class Telemetry:
    """Spans of the runs this process executes, exported to `config.otlp_endpoint`."""

    def __init__(
        self,
        config: TelemetryConfig,
        journal: Journal,
        models: ModelInfo,
        exporter: SpanExporter | None = None,
        names: Callable[[str], str] | None = None,
        model_keys: ModelInfo | None = None,
    ) -> None:
        self.journal = journal
        self.models = models
        self.model_keys = model_keys
        """Model key → (provider, model), for an agent's fallback model."""
        self.names = names
        """agentId → display name, for the root's span (children's sources carry theirs)."""
        self.capture = config.capture_content
        self.exporter = exporter or _otlp_exporter(config)
        self.resource = Resource.create({"service.name": config.service_name})
        self.spans: deque[SpanRecord] = deque()
        self.max_spans = config.max_queued_spans
        self.dirty: set[_RunTrace] = set()
        self.wake = trio.Event()
        self.queued_events = 0
        self.exported = 0
        """Spans the collector accepted."""
        self.dropped = 0
        """Spans dropped: the queue was full (a slow or dead collector)."""
        self.failed = 0
        """Spans in batches the exporter could not deliver."""
        self.dropped_events = 0
        """Events never turned into spans (the event queue was full)."""
        self._space = trio.Event()
        self.nursery: trio.Nursery | None = None
        self.traces: dict[str, _RunTrace] = {}
        """The runs traced that have not ended yet (read to their end at a stop)."""

    async def catch_up(self, trace: _RunTrace) -> None:
        """The journal stopped offering a run's batches as it ended: read the rest."""
        try:
            await self.journal.wait_finished(trace.run_id)
            entries = await self.journal.read_all(
                trace.run_id, self.journal.get(trace.run_id).committed
            )
        except Exception:  # gone (retention) meanwhile
            return
        self._take_rest(trace, entries)
        self.wake.set()

    def _take_rest(self, trace: _RunTrace, entries: list[Entry]) -> None:
        """Queue what of `entries` the trace has not seen, to be built into spans."""
        rest = [e for e in entries if e.seq > trace.seen]
        if rest:
            trace.seen = rest[-1].seq
            trace.batches.append(rest)
            self.queued_events += len(rest)
            self.dirty.add(trace)

    def watch(self, log: RunLog) -> None:
        """Trace the run of `log` from now on (the journal calls it for every run this
        process starts, resumes or takes over)."""
        trace = _RunTrace(self, log)
        self.traces[trace.run_id] = trace
        self.journal.follow(log, trace)
        if trace.replay_to:
            self.dirty.add(trace)
            self.wake.set()

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Build and export spans until cancelled; then a last export, bounded."""
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                nursery.start_soon(self._build)
                task_status.started()
                await self._export_forever()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(FINAL_FLUSH_SECONDS):
                await self._read_to_the_end()
                await self._drain()
                await trio.to_thread.run_sync(self.exporter.shutdown, abandon_on_cancel=True)

    async def _read_to_the_end(self) -> None:
        """At a stop: what the journal holds of every traced run (its writer flushed
        first) and was not built into spans yet, built now — a run that ended just
        before the stop keeps its root span."""
        with contextlib.suppress(Exception):  # (a failing store: what was read is built)
            await self.journal.writer.flush()
        for trace in list(self.traces.values()):
            if trace.dropped or trace.log.fenced:
                continue
            try:
                entries = await self.journal.read_all(trace.run_id, trace.log.committed)
            except Exception:  # gone (retention)
                continue
            self._take_rest(trace, entries)
        while self.dirty:
            await self._advance(self.dirty.pop())

    async def _build(self) -> None:
        while True:
            await self.wake.wait()
            self.wake = trio.Event()
            while self.dirty:
                trace = self.dirty.pop()
                await self._advance(trace)
                await trio.lowlevel.checkpoint()  # others' batches wait their turn

    async def _advance(self, trace: _RunTrace) -> None:
        if trace.replay_to:
            last, trace.replay_to = trace.replay_to, 0
            try:
                entries = await self.journal.read_all(trace.run_id, last)
            except Exception:  # the run is gone (retention): nothing to continue
                logger.warning("telemetry: cannot replay run %s", trace.run_id, exc_info=True)
                entries = []
            for entry in entries:
                trace.builder.feed(entry.event)  # those spans were exported before
            trace.after = last
        builder, after = trace.builder, trace.after
        streaming, feed = builder.streaming, builder.feed
        while trace.batches:
            batch = trace.batches.popleft()
            self.queued_events -= len(batch)
            if batch and batch[-1].event.type is EventType.RUN_FINISHED:
                self.traces.pop(trace.run_id, None)  # (read to its end)
            for entry in batch:
                event = entry.event
                if event.type is _REASONING and not event.last:
                    source = event.source  # a delta of a turn already open: nothing to do
                    if (source.agent_key if source is not None else None) in streaming:
                        continue
                if entry.seq > after:
                    self._queue(feed(event))

    def _queue(self, spans: list[SpanRecord]) -> None:
        for span in spans:
            if len(self.spans) >= self.max_spans:
                self.dropped += 1
                continue
            self.spans.append(span)
        if len(self.spans) >= EXPORT_BATCH:
            self._space.set()

    async def _export_forever(self) -> None:
        while True:
            with trio.move_on_after(EXPORT_EVERY):
                await self._space.wait()
            self._space = trio.Event()
            await self._export_some()

    async def _drain(self) -> None:
        while self.spans:
            await self._export_some()

    async def _export_some(self) -> None:
        while self.spans:
            count = min(len(self.spans), EXPORT_BATCH)
            batch = [self._readable(self.spans.popleft()) for _ in range(count)]
            try:
                result = await trio.to_thread.run_sync(
                    self.exporter.export, batch, abandon_on_cancel=True
                )
            except Exception:
                logger.warning("telemetry: exporting %d spans failed", count, exc_info=True)
                result = SpanExportResult.FAILURE
            if result is SpanExportResult.SUCCESS:
                self.exported += count
            else:
                self.failed += count

    def _readable(self, span: SpanRecord) -> ReadableSpan:
        trace_id = span.trace_id
        flags = TraceFlags(TraceFlags.SAMPLED)
        context = SpanContext(trace_id, span.span_id, is_remote=False, trace_flags=flags)
        parent = (
            SpanContext(trace_id, span.parent_id, is_remote=False, trace_flags=flags)
            if span.parent_id is not None
            else None
        )
        status = (
            Status(StatusCode.ERROR, span.error)
            if span.error is not None
            else Status(StatusCode.OK)
        )
        return ReadableSpan(
            name=span.name,
            context=context,
            parent=parent,
            resource=self.resource,
            attributes=span.attributes,
            kind=SpanKind.CLIENT if span.kind == "client" else SpanKind.INTERNAL,
            status=status,
            start_time=int(span.start * 1e9),
            end_time=int(max(span.end, span.start) * 1e9),
            instrumentation_scope=_SCOPE,
        )

    def stats(self) -> dict[str, int]:
        """Counters for /metrics."""
        return {
            "exported": self.exported,
            "dropped": self.dropped,
            "failed": self.failed,
            "dropped_events": self.dropped_events,
            "queued": len(self.spans),
        }


def _otlp_exporter(config: TelemetryConfig) -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    endpoint = config.otlp_endpoint.rstrip("/")
    if not endpoint.endswith("/v1/traces"):
        endpoint += "/v1/traces"
    headers = dict(config.headers)
    for header, variable in config.headers_from.items():
        value = os.environ.get(variable)
        if value is not None:
            headers[header] = value
    return OTLPSpanExporter(
        endpoint=endpoint, headers=headers, timeout=int(config.export_timeout_seconds)
    )


def model_info(specs: Any, models: Any) -> ModelInfo:
    """AgentId → (provider, model) from the subagents and the config's `models`."""

    def info(agent_id: str) -> tuple[str, str]:
        spec = specs.get(agent_id)
        model = models.get(spec.model) if spec is not None else None
        if model is None:
            return "unknown", ""
        return model.provider, model.model or model.provider

    return info


def model_key_info(models: Any) -> ModelInfo:
    """Model key of the config's `models` → (provider, model): an agent's fallback."""

    def info(key: str) -> tuple[str, str]:
        model = models.get(key)
        if model is None:
            return "unknown", key
        return model.provider, model.model or model.provider

    return info


@asynccontextmanager
async def open_telemetry(
    config: TelemetryConfig,
    journal: Journal,
    models: ModelInfo,
    exporter: SpanExporter | None = None,
    names: Callable[[str], str] | None = None,
    model_keys: ModelInfo | None = None,
) -> AsyncIterator[Telemetry]:
    """Trace the runs `journal` gets from now on, for the block (`model_keys`: the
    provider and model of a fallback model's key)."""
    hub = Telemetry(config, journal, models, exporter, names, model_keys)
    async with trio.open_nursery() as nursery:
        await nursery.start(hub.run)
        unsubscribe = journal.started.subscribe(hub.watch)
        try:
            yield hub
        finally:
            unsubscribe()
            nursery.cancel_scope.cancel()
