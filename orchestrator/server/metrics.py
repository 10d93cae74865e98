"""Prometheus metrics of a server (`/metrics`), read from its live state at scrape time."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sized
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from orchestrator.core.events import RUN_STATUSES
from orchestrator.storage.journal import Journal

if TYPE_CHECKING:
    from orchestrator.cluster.node import Node
    from orchestrator.telemetry.export import Telemetry

__all__ = ["AppCollector", "MetricsContext"]


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
    def slowest_lag(self) -> int: ...
    def stalled_agents(self) -> int: ...


class AppCollector(Collector):
    """Prometheus metrics read from the live server state at scrape time."""

    def __init__(self, app: MetricsContext) -> None:
        self.app = app

    # Long on purpose: one metric family after another, each a few lines; the list of
    # what /metrics says reads best in one place (docs/server.md lists them).
    def collect(self) -> Iterator[Any]:
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
        yield CounterMetricFamily(
            "orchestrator_events_journaled",
            "Events written to the journal",
            value=app.journal.writer.events_written,
        )
        yield GaugeMetricFamily(
            "orchestrator_connections", "Open WebSocket connections", value=len(app.connections)
        )
        yield GaugeMetricFamily(
            "orchestrator_subscriptions",
            "Active subscriptions",
            value=sum(len(c.feeds) for c in list(app.connections)),
        )
        yield GaugeMetricFamily(
            "orchestrator_slowest_client_lag_events",
            "Committed events the furthest-behind subscription has not read yet",
            value=app.slowest_lag(),
        )
        yield GaugeMetricFamily(
            "orchestrator_agents_stalled",
            "Agents of runs executing here marked stalled now: running, waiting for nobody, "
            "silent for limits.stall_seconds (AGENT_STALLED)",
            value=app.stalled_agents(),
        )
        journal, writer = app.journal, app.journal.writer
        yield GaugeMetricFamily(
            "orchestrator_storage_healthy",
            "1 while journal writes succeed, 0 while they fail (new runs are refused)",
            value=1 if writer.healthy else 0,
        )
        yield CounterMetricFamily(
            "orchestrator_journal_write_failures",
            "Journal write attempts that failed (each is retried)",
            value=writer.write_failures,
        )
        yield GaugeMetricFamily(
            "orchestrator_journal_pending_events",
            "Events waiting to be written to storage",
            value=writer.pending_events,
        )
        yield CounterMetricFamily(
            "orchestrator_events_truncated",
            "Events cut to limits.max_event_bytes",
            value=journal.events_truncated,
        )
        yield CounterMetricFamily(
            "orchestrator_runs_deleted",
            "Finished runs deleted by the retention policy",
            value=journal.retention.runs_deleted,
        )
        telemetry = app.telemetry
        if telemetry is not None:
            spans = CounterMetricFamily(
                "orchestrator_telemetry_spans",
                "Trace spans by outcome: exported, dropped (the queue was full: a slow or "
                "dead collector), failed (the export did not succeed)",
                labels=["outcome"],
            )
            stats = telemetry.stats()
            for outcome in ("exported", "dropped", "failed"):
                spans.add_metric([outcome], stats[outcome])
            yield spans
            yield CounterMetricFamily(
                "orchestrator_telemetry_events_dropped",
                "Events never turned into spans (the event queue was full)",
                value=stats["dropped_events"],
            )
            yield GaugeMetricFamily(
                "orchestrator_telemetry_spans_queued",
                "Finished spans waiting for export",
                value=stats["queued"],
            )
        node = app.node
        if node is None:
            return
        yield GaugeMetricFamily(
            "orchestrator_cluster_queue_depth",
            "Queued runs no worker has taken yet (refreshed every 2 s)",
            value=node.queue_depth,
        )
        worker = node.worker
        if worker is None:
            return
        yield GaugeMetricFamily(
            "orchestrator_cluster_runs_owned", "Runs this worker executes", value=len(worker.owned)
        )
        yield CounterMetricFamily(
            "orchestrator_cluster_lease_renewals",
            "Leases this worker renewed",
            value=worker.lease_renewals,
        )
        yield CounterMetricFamily(
            "orchestrator_cluster_leases_lost",
            "Runs this worker stopped because it lost their lease",
            value=worker.leases_lost,
        )
        yield CounterMetricFamily(
            "orchestrator_cluster_takeovers",
            "Runs this worker took over from a worker that stopped renewing",
            value=worker.takeovers,
        )
        yield CounterMetricFamily(
            "orchestrator_cluster_takeover_failures",
            "Runs this worker took the lease of but could not execute (it let them go at once)",
            value=worker.takeover_failures,
        )
