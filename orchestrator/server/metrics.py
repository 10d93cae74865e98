"""Prometheus metrics of a server (`/metrics`), read from its live state at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sized
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from orchestrator.core.events import RUN_STATUSES
from orchestrator.storage.journal import Journal

if TYPE_CHECKING:
    from orchestrator.cluster.node import Node
    from orchestrator.cluster.worker import Worker
    from orchestrator.telemetry.export import Telemetry
    from orchestrator.webhooks.outbox import Outbox

__all__ = [
    "CLUSTER",
    "SERVER",
    "TELEMETRY",
    "WEBHOOKS",
    "WORKER",
    "AppCollector",
    "Metric",
    "MetricsContext",
]

T = TypeVar("T")


class Watching(Protocol):
    """A connection, as the metrics count it: its subscriptions."""

    @property
    def feeds(self) -> Sized: ...


class MetricsContext(Protocol):
    """What the metrics read of the server at scrape time."""

    @property
    def connections(self) -> Collection[Watching]: ...
    @property
    def journal(self) -> Journal: ...
    @property
    def node(self) -> Node | None: ...
    @property
    def telemetry(self) -> Telemetry | None: ...
    @property
    def outbox(self) -> Outbox | None: ...
    def slowest_lag(self) -> int: ...
    def stalled_agents(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Metric(Generic[T]):
    """One number of /metrics: its name, help, kind, and how it is read from `T`."""

    name: str
    help: str
    read: Callable[[T], float]
    counter: bool = False
    """A counter (only goes up), else a gauge."""

    def family(self, source: T) -> GaugeMetricFamily | CounterMetricFamily:
        """The metric family, read now."""
        kind = CounterMetricFamily if self.counter else GaugeMetricFamily
        return kind(self.name, self.help, value=self.read(source))


SERVER: tuple[Metric[MetricsContext], ...] = (
    Metric(
        "orchestrator_events_journaled",
        "Events written to the journal",
        lambda app: app.journal.writer.events_written,
        counter=True,
    ),
    Metric(
        "orchestrator_connections", "Open WebSocket connections", lambda app: len(app.connections)
    ),
    Metric(
        "orchestrator_subscriptions",
        "Active subscriptions",
        lambda app: sum(len(c.feeds) for c in list(app.connections)),
    ),
    Metric(
        "orchestrator_slowest_client_lag_events",
        "Committed events the furthest-behind subscription has not read yet",
        lambda app: app.slowest_lag(),
    ),
    Metric(
        "orchestrator_agents_stalled",
        "Agents of runs executing here marked stalled now: running, waiting for nobody, "
        "silent for limits.stall_seconds (AGENT_STALLED)",
        lambda app: app.stalled_agents(),
    ),
    Metric(
        "orchestrator_storage_healthy",
        "1 while journal writes succeed, 0 while they fail (new runs are refused)",
        lambda app: 1 if app.journal.writer.healthy else 0,
    ),
    Metric(
        "orchestrator_journal_write_failures",
        "Journal write attempts that failed (each is retried)",
        lambda app: app.journal.writer.write_failures,
        counter=True,
    ),
    Metric(
        "orchestrator_journal_pending_events",
        "Events waiting to be written to storage",
        lambda app: app.journal.writer.pending_events,
    ),
    Metric(
        "orchestrator_events_truncated",
        "Events cut to limits.max_event_bytes",
        lambda app: app.journal.events_truncated,
        counter=True,
    ),
    Metric(
        "orchestrator_runs_deleted",
        "Finished runs deleted by the retention policy",
        lambda app: app.journal.retention.runs_deleted,
        counter=True,
    ),
)
"""What every server says, after the runs by status (docs/server.md lists them)."""

TELEMETRY: tuple[Metric[dict[str, int]], ...] = (
    Metric(
        "orchestrator_telemetry_events_dropped",
        "Events never turned into spans (the event queue was full)",
        lambda stats: stats["dropped_events"],
        counter=True,
    ),
    Metric(
        "orchestrator_telemetry_spans_queued",
        "Finished spans waiting for export",
        lambda stats: stats["queued"],
    ),
)
"""With telemetry on, after the spans by outcome (read from `Telemetry.stats`)."""

WEBHOOKS: tuple[Metric[Outbox], ...] = (
    Metric(
        "orchestrator_webhook_deliveries_delivered",
        "Deliveries their receiver took (2xx)",
        lambda outbox: outbox.delivered,
        counter=True,
    ),
    Metric(
        "orchestrator_webhook_attempts_failed",
        "Delivery attempts that failed (each is retried, up to limits.webhooks.max_attempts)",
        lambda outbox: outbox.failed_attempts,
        counter=True,
    ),
    Metric(
        "orchestrator_webhook_deliveries_waiting",
        "Deliveries in the outbox not yet taken by their receiver",
        lambda outbox: len(outbox.waiting),
    ),
    Metric(
        "orchestrator_webhook_dead_letters",
        "Dead deliveries kept (their last attempt failed), until a person redelivers them",
        lambda outbox: len(outbox.dead),
    ),
    Metric(
        "orchestrator_webhook_deliveries_died",
        "Deliveries that became dead",
        lambda outbox: outbox.dead_total,
        counter=True,
    ),
    Metric(
        "orchestrator_webhook_dead_letters_dropped",
        "Dead deliveries forgotten past limits.webhooks.max_dead",
        lambda outbox: outbox.dead_dropped,
        counter=True,
    ),
)
"""With the outbox on (webhooks, a client's own, A2A push)."""

CLUSTER: tuple[Metric[Node], ...] = (
    Metric(
        "orchestrator_cluster_queue_depth",
        "Queued runs no worker has taken yet (refreshed every 2 s)",
        lambda node: node.queue_depth,
    ),
)
"""In cluster mode."""

WORKER: tuple[Metric[Worker], ...] = (
    Metric("orchestrator_cluster_runs_owned", "Runs this worker executes", lambda w: len(w.owned)),
    Metric(
        "orchestrator_cluster_lease_renewals",
        "Leases this worker renewed",
        lambda w: w.lease_renewals,
        counter=True,
    ),
    Metric(
        "orchestrator_cluster_leases_lost",
        "Runs this worker stopped because it lost their lease",
        lambda w: w.leases_lost,
        counter=True,
    ),
    Metric(
        "orchestrator_cluster_takeovers",
        "Runs this worker took over from a worker that stopped renewing",
        lambda w: w.takeovers,
        counter=True,
    ),
    Metric(
        "orchestrator_cluster_takeover_failures",
        "Runs this worker took the lease of but could not execute (it let them go at once)",
        lambda w: w.takeover_failures,
        counter=True,
    ),
)
"""On a process that runs a cluster worker."""


class AppCollector(Collector):
    """Prometheus metrics read from the live server state at scrape time."""

    def __init__(self, app: MetricsContext) -> None:
        self.app = app

    def collect(self) -> Iterator[Any]:
        """The tables above, in order, with the two labelled families among them."""
        app = self.app
        runs = GaugeMetricFamily(
            "orchestrator_runs", "Runs known to the journal, by status", labels=["status"]
        )
        counts: dict[str, int] = dict.fromkeys(RUN_STATUSES, 0)
        for record in app.journal.records():
            counts[record.status] = counts.get(record.status, 0) + 1
        for status, count in counts.items():
            runs.add_metric([status], count)
        yield runs
        yield from (metric.family(app) for metric in SERVER)
        if app.telemetry is not None:
            stats = app.telemetry.stats()
            spans = CounterMetricFamily(
                "orchestrator_telemetry_spans",
                "Trace spans by outcome: exported, dropped (the queue was full: a slow or "
                "dead collector), failed (the export did not succeed)",
                labels=["outcome"],
            )
            for outcome in ("exported", "dropped", "failed"):
                spans.add_metric([outcome], stats[outcome])
            yield spans
            yield from (metric.family(stats) for metric in TELEMETRY)
        if app.outbox is not None:
            yield from (metric.family(app.outbox) for metric in WEBHOOKS)
        node = app.node
        if node is not None:
            yield from (metric.family(node) for metric in CLUSTER)
            if node.worker is not None:
                yield from (metric.family(node.worker) for metric in WORKER)
