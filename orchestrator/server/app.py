"""The server: WebSocket feeds on `/ws`, `/healthz` and `/metrics` on the same port.

async with trio.open_nursery() as nursery:
    server = await nursery.start(serve, config)   # a RunningServer
    ...
    await server.shutdown()                         # graceful, as on SIGTERM
"""

from __future__ import annotations

import functools
import gc
import json
import logging
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from http import HTTPStatus
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import trio
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from websockets.http11 import Request, Response
from websockets.trio.server import Server, ServerConnection
from websockets.trio.server import serve as ws_serve

from orchestrator.cluster.gateway import QueuedRun
from orchestrator.cluster.node import Node, open_node
from orchestrator.config import ClusterConfig, ConfigError, ServerConfig
from orchestrator.core.events import RUN_STATUSES
from orchestrator.runtime.engine import Orchestrator, UnknownAgent
from orchestrator.runtime.run import Run, RunResult
from orchestrator.server.auth import Auth, Principal, RedactTokens
from orchestrator.server.connection import Connection, release
from orchestrator.server.run_manager import RunManager, StorageUnavailable
from orchestrator.storage.base import RunRecord, Storage
from orchestrator.storage.journal import Journal
from orchestrator.storage.memory import MemoryStorage
from orchestrator.storage.redis import RedisStorage
from orchestrator.storage.sqlite import SqliteStorage

__all__ = ["RunningServer", "ServerApp", "open_storage", "serve"]

logger = logging.getLogger(__name__)
ws_logger = logging.getLogger("orchestrator.server.websockets")
"""websockets' own log lines (request lines at DEBUG), with tokens blanked."""
ws_logger.addFilter(RedactTokens())


def open_storage(config: ServerConfig) -> AbstractAsyncContextManager[Storage]:
    """Open the backend named by `storage:` (relative paths: the config's directory).

    Raises:
        ConfigError: an unsupported storage URL.
    """
    url = config.storage.url
    if url.startswith("memory://"):
        return MemoryStorage.open()
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        return SqliteStorage.open(path if path.is_absolute() else config.base_dir / path)
    if url.startswith("redis://"):
        return RedisStorage.open(url, durability=config.storage.durability)
    raise ConfigError(f"storage: {url!r} is not supported (memory://, sqlite:///PATH, redis://)")


@asynccontextmanager
async def open_journal(config: ServerConfig) -> AsyncIterator[Journal]:
    """The configured storage and the journal over it, with the configured bounds."""
    retention = config.storage.effective_retention
    async with (
        open_storage(config) as storage,
        Journal.open(
            storage,
            max_pending=config.storage.max_pending_events,
            max_event_bytes=config.limits.max_event_bytes,
            fail_runs_after=config.storage.fail_runs_after_seconds,
            retention=(retention.max_age_seconds, retention.max_runs, retention.max_run_events),
            cluster=config.cluster is not None,
        ) as journal,
    ):
        yield journal


class ServerApp:
    """What every connection shares: config, agents, journal, runs, metrics."""

    def __init__(
        self, config: ServerConfig, orchestrator: Orchestrator, journal: Journal, runs: RunManager
    ) -> None:
        self.config = config
        self.orchestrator = orchestrator
        self.journal = journal
        self.runs = runs
        self.auth = Auth(config)
        self.connections: set[Connection] = set()
        self.subscriptions: Counter[str | None] = Counter()
        """Live subscriptions per token name (kept by the connections: O(1) limit checks)."""
        self.frame_bytes = max(config.server.client_buffer_bytes // 8, 4096)
        """Events frames are cut at about this size (one event per frame at least)."""
        self.closing = False
        self.feed_ended = trio.lowlevel.ParkingLot()
        """Unparked whenever a subscription ends (shutdown waits on it)."""
        self.registry = CollectorRegistry()
        self.registry.register(_AppCollector(self))
        self.node: Node | None = None
        """Cluster mode: this instance's part of the cluster (runs are queued there)."""

    # -- runs, here or in the cluster ---------------------------------------------

    async def start_run(
        self, agent_id: str, input: str, *, stream: bool, principal: Principal
    ) -> Run | QueuedRun:
        """Start a run here, or queue it for the cluster's workers.

        Raises:
            UnknownAgent, LimitExceeded, StorageUnavailable: as `RunManager.start`.
        """
        gateway = self.node.gateway if self.node is not None else None
        if gateway is None:
            return self.runs.start(agent_id, input, stream=stream, principal=principal)
        if agent_id not in self.orchestrator.specs:
            raise UnknownAgent(agent_id, sorted(self.orchestrator.specs))
        try:
            return await gateway.start(agent_id, input, principal=principal)
        except Exception as exc:
            raise StorageUnavailable(f"cannot queue the run: {type(exc).__name__}: {exc}") from exc

    async def cancel_run(self, run_id: str) -> None:
        """Cancel a run wherever it runs."""
        if self.node is not None and self.node.gateway is not None:
            await self.node.gateway.cancel(run_id)
        else:
            self.runs.cancel(run_id)

    async def send_to_run(self, run_id: str, agent_key: str | None, message: str) -> None:
        """Deliver a person's message to an agent of a run, wherever it runs.

        Raises:
            AgentNotRunning: (one process) the run or that agent is not running.
        """
        if self.node is not None and self.node.gateway is not None:
            await self.node.gateway.send(run_id, agent_key, message)
        else:
            self.runs.send(run_id, agent_key, message)

    async def wait_run(self, run: Run | QueuedRun) -> RunResult:
        """The result of a run this client started without streaming."""
        if isinstance(run, QueuedRun):
            assert self.node is not None and self.node.gateway is not None
            return await self.node.gateway.wait(run)
        return await self.runs.wait(run)

    async def page_runs(
        self, *, limit: int, before: str | None, owner: str | None
    ) -> tuple[list[RunRecord], bool]:
        """A page of runs, newest first (cluster mode: every run of the cluster)."""
        if self.node is not None:
            return await self.node.store.page(limit=limit, before=before, owner=owner)
        return self.journal.page(limit=limit, before=before, owner=owner)

    async def handler(self, ws: ServerConnection) -> None:
        """Serve one WebSocket connection; returns only once it is fully closed."""
        assert ws.request is not None
        url = urlsplit(ws.request.path)
        principal = self.auth.identify(ws.request.headers, url.query)
        if principal is None:  # pragma: no cover - process_request refused it
            return
        connection = Connection(self, ws, principal)
        self.connections.add(connection)
        try:
            await connection.serve()
        finally:
            self.connections.discard(connection)
            self.feed_ended.unpark_all()
            await release(ws)

    def subscriptions_of(self, principal: Principal) -> int:
        """Subscriptions a principal holds over all its connections."""
        return self.subscriptions[principal.name]

    def process_request(self, conn: ServerConnection, request: Request) -> Response | None:
        """Plain HTTP routes; origin, token and connection-count checks on the upgrade."""
        url = urlsplit(request.path)
        if url.path in ("/", "/index.html"):
            return _respond(conn, HTTPStatus.OK, _static("index.html"), "text/html; charset=utf-8")
        if url.path.startswith("/static/"):
            name = url.path.removeprefix("/static/")
            kind = STATIC_FILES.get(name)
            if kind is None:
                return conn.respond(HTTPStatus.NOT_FOUND, "not found\n")
            return _respond(conn, HTTPStatus.OK, _static(name), kind)
        if url.path == "/healthz":
            return self._health(conn)
        if url.path == "/auth":  # the console asks before connecting (200 either way:
            # a 401 would be a console error in every browser)
            principal = self.auth.identify(request.headers, url.query)
            body: dict[str, object] = {"authorized": principal is not None}
            if principal is not None:
                body["name"], body["admin"] = principal.name, principal.admin
            return _respond(conn, HTTPStatus.OK, json.dumps(body).encode(), "application/json")
        if url.path == "/metrics":
            if not self.auth.may_read_metrics(request.headers, url.query):
                return conn.respond(
                    HTTPStatus.UNAUTHORIZED,
                    "unauthorized: /metrics needs an admin token or server.metrics_token\n",
                )
            return _respond(
                conn,
                HTTPStatus.OK,
                generate_latest(self.registry),
                "text/plain; version=0.0.4; charset=utf-8",
            )
        if url.path != "/ws":
            return conn.respond(
                HTTPStatus.NOT_FOUND, "not found: use /, /ws, /auth, /healthz or /metrics\n"
            )
        if not self.auth.origin_allowed(request.headers):
            return conn.respond(
                HTTPStatus.FORBIDDEN,
                "forbidden: cross-site WebSocket (add the page's origin to "
                "server.allowed_origins)\n",
            )
        if self.auth.identify(request.headers, url.query) is None:
            return conn.respond(
                HTTPStatus.UNAUTHORIZED, "unauthorized: send Authorization: Bearer <token>\n"
            )
        if len(self.connections) >= self.config.server.max_connections:
            return conn.respond(
                HTTPStatus.SERVICE_UNAVAILABLE,
                f"too many connections (server.max_connections is "
                f"{self.config.server.max_connections})\n",
            )
        return None

    def _health(self, conn: ServerConnection) -> Response:
        body: dict[str, object] = (
            {"status": "ok"}
            if self.journal.healthy
            else {"status": "degraded", "storage": "failing", "runs": "refused"}
        )
        node = self.node
        if node is not None:
            body["cluster"] = node.config.name
            body["role"] = node.role
            if node.worker is not None:
                body["worker"] = node.worker.name
                body["runs"] = len(node.worker.owned) if self.journal.healthy else "refused"
        status = HTTPStatus.OK if self.journal.healthy else HTTPStatus.SERVICE_UNAVAILABLE
        return _respond(conn, status, json.dumps(body).encode(), "application/json")

    def slowest_lag(self) -> int:
        """How many committed events the furthest-behind subscription still has to read."""
        lag = 0
        for connection in list(self.connections):
            for feed in list(connection.feeds.values()):
                log = self.journal.get(feed.run_id)
                lag = max(lag, log.committed - feed.cursor)
        return lag


STATIC_FILES = {
    "app.js": "text/javascript; charset=utf-8",
    "conn.js": "text/javascript; charset=utf-8",
    "model.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
"""The console's files under /static/ (a fixed list: no path from a request reaches the disk)."""


@functools.cache
def _static(name: str) -> bytes:
    """A file of the live tree console (static; it talks to /ws like any client)."""
    return (resources.files("orchestrator.server") / "static" / name).read_bytes()


def _respond(
    conn: ServerConnection, status: HTTPStatus, body: bytes, content_type: str
) -> Response:
    response = conn.respond(status, "")
    response.body = body
    del response.headers["Content-Type"]
    del response.headers["Content-Length"]
    response.headers["Content-Type"] = content_type
    response.headers["Content-Length"] = str(len(body))
    return response


class _AppCollector(Collector):
    """Prometheus metrics read from the live server state at scrape time."""

    def __init__(self, app: ServerApp) -> None:
        self.app = app

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
            value=app.journal.events_written,
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
        journal = app.journal
        yield GaugeMetricFamily(
            "orchestrator_storage_healthy",
            "1 while journal writes succeed, 0 while they fail (new runs are refused)",
            value=1 if journal.healthy else 0,
        )
        yield CounterMetricFamily(
            "orchestrator_journal_write_failures",
            "Journal write attempts that failed (each is retried)",
            value=journal.write_failures,
        )
        yield GaugeMetricFamily(
            "orchestrator_journal_pending_events",
            "Events waiting to be written to storage",
            value=journal.pending_events,
        )
        yield CounterMetricFamily(
            "orchestrator_events_truncated",
            "Events cut to limits.max_event_bytes",
            value=journal.events_truncated,
        )
        yield CounterMetricFamily(
            "orchestrator_runs_deleted",
            "Finished runs deleted by the retention policy",
            value=journal.runs_deleted,
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


class RunningServer:
    """A started server: where it listens, and how to stop it gracefully."""

    def __init__(self, app: ServerApp, ws_server: Server, stop: trio.CancelScope) -> None:
        self.app = app
        self.ws_server = ws_server
        self._stop = stop
        sock = ws_server.listeners[0].socket
        self.host, self.port = sock.getsockname()[:2]

    @property
    def url(self) -> str:
        """The WebSocket URL."""
        return f"ws://{self.host}:{self.port}/ws"

    async def shutdown(self) -> None:
        """Stop accepting, end the runs `interrupted`, flush the journal, close clients (1001).

        Takes at most `server.shutdown_timeout` seconds whatever clients and storage
        do: then every connection is dropped and every task cancelled.
        """
        app = self.app
        app.closing = True
        # Stop accepting now (as Server.aclose() does first) but keep open connections,
        # so watchers still get the runs' last events and their `end`.
        self.ws_server.serve_nursery.cancel_scope.cancel()
        self.ws_server.closing = True
        budget = app.config.server.shutdown_timeout
        with trio.move_on_after(budget) as graceful:
            await app.runs.interrupt_all()
            with trio.move_on_after(max(budget - 4, budget / 2)):
                await app.journal.flush()
            # Give feeds a moment to deliver the runs' last events and their `end`.
            with trio.move_on_after(1):
                while any(c.feeds for c in list(app.connections)):
                    await app.feed_ended.park()
            with trio.move_on_after(2):
                async with trio.open_nursery() as nursery:
                    for connection in list(app.connections):
                        nursery.start_soon(connection.finish, 1001, "server shutting down")
            await self.ws_server.aclose(
                close_connections=True, code=1001, reason="server shutting down"
            )
        if graceful.cancelled_caught:
            logger.warning("shutdown took over %g s: dropping every connection", budget)
            for ws in list(self.ws_server.all_connections):
                await trio.aclose_forcefully(ws.stream)
        self._stop.cancel()


async def _join_cluster(
    config: ClusterConfig,
    journal: Journal,
    runs: RunManager,
    *,
    task_status: trio.TaskStatus[Node],
) -> None:
    async with open_node(config, journal, runs, gateway=True) as node:
        task_status.started(node)
        await trio.sleep_forever()


def settle_heap() -> None:
    """Move everything alive now out of the garbage collector's reach (`gc.freeze`).

    Call it once the server is up, in a process that is the server (the CLI does).
    A full collection walks every tracked object; right after start-up those are
    ~80k objects of imported modules, config models and schemas that never die,
    and walking them paused the server 50–60 ms several times a minute under load
    (the p99 of live delivery to 100 clients; docs/benchmarks.md). Frozen, a full
    collection walks only what the server allocated since, and pauses ~5 ms.
    With 1,000 connections even that heap is ~200k objects (a 90–120 ms full
    collection, every few seconds, from the short-lived objects of in-flight
    frames that a young collection happens to promote): collecting the young
    generation after 50,000 net allocations instead of 700 makes those rare (none
    in a 5 s live run of 1,000 watchers). Nearly everything here dies by reference
    counting; the collector only finds cycles, which wait a little longer.
    Not done by `serve()` itself: a host embedding the server (tests, an app)
    owns its process's collector.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


async def serve(
    config: ServerConfig,
    *,
    host: str | None = None,
    port: int | None = None,
    task_status: trio.TaskStatus[RunningServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the server until cancelled or `shutdown()`; `task_status` gets a RunningServer.

    Raises:
        StorageError: the storage cannot be opened (one line naming it and why).
        OSError: the address cannot be bound.
    """
    async with open_journal(config) as journal:
        if journal.interrupted:
            logger.warning(
                "ending %d runs left running by the last server: interrupted",
                len(journal.interrupted),
            )
        await _serve(config, journal, host, port, task_status)


async def _serve(
    config: ServerConfig,
    journal: Journal,
    host: str | None,
    port: int | None,
    task_status: trio.TaskStatus[RunningServer],
) -> None:
    with trio.CancelScope() as stop:
        async with (
            Orchestrator.open(config) as orch,
            trio.open_nursery() as nursery,
            trio.open_nursery() as run_nursery,
        ):
            runs = RunManager(orch, journal, run_nursery)
            app = ServerApp(config, orch, journal, runs)
            if config.cluster is not None:
                app.node = await nursery.start(_join_cluster, config.cluster, journal, runs)
            ws_server: Server = await nursery.start(
                functools.partial(
                    ws_serve,
                    app.handler,
                    config.server.port if port is None else port,
                    host=config.server.host if host is None else host,
                    process_request=app.process_request,
                    max_size=config.server.max_frame_bytes,
                    max_queue=8,
                    logger=ws_logger,
                    compression="deflate" if config.server.compression else None,
                )
            )
            task_status.started(RunningServer(app, ws_server, stop))
            await trio.sleep_forever()
