"""The server: WebSocket feeds on `/ws`, the console, `/healthz`, `/metrics` (and, with
`server.mcp`, MCP on `/mcp`) on one port.

async with trio.open_nursery() as nursery:
    server = await nursery.start(serve, config)   # a RunningServer
    ...
    await server.shutdown()                         # graceful, as on SIGTERM

Runs execute in this process (`runs.host.RunHost`) or, with `cluster:` in the
config, are queued for the cluster's workers (`cluster.gateway.ClusterGateway`):
either way the connections see one `RunService` (`ServerApp.runs`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
import trio
from prometheus_client import CollectorRegistry
from websockets.extensions.permessage_deflate import ServerPerMessageDeflateFactory
from websockets.trio.server import Server, ServerConnection
from websockets.trio.server import serve as ws_serve

from agents.errors import OrchestratorError
from agents.spec import AgentSpec, load_specs
from orchestrator.cluster.leases import Leases
from orchestrator.config import ClusterConfig, ConfigError, ServerConfig, ServerSection
from orchestrator.runs.host import RunHost
from orchestrator.runs.service import RunService
from orchestrator.runs.triggers import Triggers
from orchestrator.runtime.engine import Orchestrator, builtin_tool_names, config_problems
from orchestrator.server.auth import Auth, Principal, RedactTokens
from orchestrator.server.connection import Connection, release
from orchestrator.server.doors import open_doors
from orchestrator.server.front import Address, HandoffListener, route_connections
from orchestrator.server.http import Routes
from orchestrator.server.metrics import AppCollector
from orchestrator.storage.journal import Journal
from orchestrator.storage.open import open_journal
from orchestrator.storage.owner import this_server
from orchestrator.telemetry import traced
from orchestrator.webhooks.outbox import Outbox
from orchestrator.webhooks.sender import Sender

if TYPE_CHECKING:
    from orchestrator.cluster.node import Node
    from orchestrator.telemetry.export import Telemetry

__all__ = ["RunningServer", "ServerApp", "serve"]

logger = logging.getLogger(__name__)
ws_logger = logging.getLogger("orchestrator.server.websockets")
"""websockets' own log lines (request lines at DEBUG), with tokens blanked."""
ws_logger.addFilter(RedactTokens())


class ServerApp:
    """What every connection shares: config, agents, journal, runs, metrics."""

    def __init__(
        self,
        config: ServerConfig,
        orchestrator: Orchestrator,
        journal: Journal,
        host: RunHost,
        node: Node | None = None,
        port: int | None = None,
    ) -> None:
        self.config = config
        self.orchestrator = orchestrator
        self.journal = journal
        self.host = host
        """The runs executing in this process (none on a gateway without a worker)."""
        self.node = node
        """Cluster mode: this instance's part of the cluster (runs are queued there)."""
        self.runs: RunService = node.gateway if node is not None and node.gateway else host
        """Where clients' runs start, and are cancelled, messaged and listed."""
        self.auth = Auth(config, port)
        """Tokens, Origins and Hosts (`port`: the bound one, which Hosts must name)."""
        self.connections: set[Connection] = set()
        self.subscriptions: Counter[str | None] = Counter()
        """Live subscriptions per token name (kept by the connections: O(1) limit checks)."""
        self.frame_bytes = max(config.server.client_buffer_bytes // 8, 4096)
        """Events frames are cut at about this size (one event per frame at least)."""
        self.closing = False
        self.feed_ended = trio.lowlevel.ParkingLot()
        """Unparked whenever a subscription ends (shutdown waits on it)."""
        self.routes = Routes(self)
        self.telemetry: Telemetry | None = None
        """Traces of the runs this process executes (`telemetry:`; None: off)."""
        self.triggers: Triggers | None = None
        """The runs that start themselves (`triggers:`; None: none configured)."""
        self.outbox: Outbox | None = None
        """Webhooks out and A2A push notifications (None: none can be asked for)."""
        self.registry = CollectorRegistry()
        self.registry.register(AppCollector(self))

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

    def stalled_agents(self) -> int:
        """Agents of the runs executing here that are marked stalled (`/metrics`); on a
        cluster's gateway, of every live worker (their heartbeats say)."""
        if self.node is not None and self.node.gateway is not None:
            return self.node.cluster_stalled
        stalls = self.host.stalls
        return stalls.stalled if stalls is not None else 0

    def slowest_lag(self) -> int:
        """How many committed events the furthest-behind subscription still has to read."""
        lag = 0
        for connection in list(self.connections):
            for feed in list(connection.feeds.values()):
                log = self.journal.get(feed.run_id)
                lag = max(lag, log.committed - feed.cursor)
        return lag


class RunningServer:
    """A started server: where it listens, and how to stop it gracefully."""

    def __init__(
        self,
        app: ServerApp,
        ws_server: Server,
        stop: trio.CancelScope,
        front: trio.CancelScope | None = None,
        *,
        address: tuple[str, int],
    ) -> None:
        self.app = app
        self.ws_server = ws_server
        self._stop = stop
        self._front = front
        """The front door's accepting (front.py): stopped first at shutdown."""
        self.host, self.port = address

    @property
    def url(self) -> str:
        """The WebSocket URL."""
        return f"ws://{self.host}:{self.port}/ws"

    async def shutdown(self) -> None:
        """Stop accepting, stop the runs (suspended for the next start, handed over to
        the cluster's other workers, or ended `interrupted`), flush the journal, close
        clients (1001).

        Takes at most `server.shutdown_timeout` seconds whatever clients and storage
        do: then every connection is dropped and every task cancelled.
        """
        app = self.app
        app.closing = True
        # Stop accepting now (as Server.aclose() does first) but keep open connections,
        # so watchers still get the runs' last events and their `end`.
        self.ws_server.serve_nursery.cancel_scope.cancel()
        self.ws_server.closing = True
        if self._front is not None:
            self._front.cancel()
        budget = app.config.server.shutdown_timeout
        suspend = (  # the runs are resumed at the next start
            app.config.server.resume_runs and app.journal.storage.durable and app.node is None
        )
        worker = app.node.worker if app.node is not None else None
        with trio.move_on_after(budget) as graceful:
            if worker is not None:  # its runs go on on the cluster's other workers
                await worker.hand_over()
            elif suspend:
                await app.host.suspend_all()
            else:
                await app.host.interrupt_all()
            with trio.move_on_after(max(budget - 4, budget / 2)):
                await app.journal.writer.flush()
            # Give feeds a moment to deliver the runs' last events and their `end`.
            with trio.move_on_after(0 if suspend else 1):
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
    host: RunHost,
    leases: Leases | None,
    *,
    task_status: trio.TaskStatus[Node],
) -> None:
    from orchestrator.cluster.node import open_node  # (the Redis client: cluster mode only)

    async with open_node(config, journal, host, gateway=True, leases=leases) as node:
        task_status.started(node)
        await trio.sleep_forever()


class CannotListen(OrchestratorError):
    """The server's address cannot be bound (one line naming it and why)."""

    code = "unavailable"


def starting_problems(config: ServerConfig) -> dict[str, AgentSpec]:
    """Check, before the server binds or opens anything, what only a start can: the
    webhooks' secrets in the environment, and the config against its subagents (read
    here once: the server runs these).

    Raises:
        ConfigError: every problem found, in one line naming the file.
        SpecError: a subagent's file is invalid (its own file named).
    """
    problems = []
    for name, hook in config.webhooks.items():
        try:
            hook.secret(name)
        except ConfigError as exc:
            problems.append(str(exc))
    specs = load_specs(
        config.subagents_path,
        models=config.models,
        tools=builtin_tool_names(),
        mcp_servers=config.mcp_servers,
    )
    problems += config_problems(config, specs)
    if problems:
        raise ConfigError(config.described(problems))
    return specs


async def serve(
    config: ServerConfig,
    *,
    host: str | None = None,
    port: int | None = None,
    listeners: Sequence[trio.abc.Listener[trio.abc.Stream]] | None = None,
    task_status: trio.TaskStatus[RunningServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the server until cancelled or `shutdown()`; `task_status` gets a RunningServer.

    It binds `host`:`port` (the config's by default), unless it is given `listeners`
    to accept from (the test suite's memory streams): then `host` and `port` are only
    the address it says it has.

    The address is bound first, then the journal owned (storage/owner.py), and only
    then is anything read, resumed or written: a start that cannot listen, or finds
    its journal owned by a live server, changes nothing.

    Raises:
        CannotListen: the address cannot be bound.
        JournalInUse: another live server owns the journal.
        StorageError: the storage cannot be opened (one line naming it and why).
        ConfigError: a webhook's secret is missing from the environment, or malformed;
            a trigger's agent, a subagent's model, an approval's tool is unknown (all
            of them in one line, naming the file).
    """
    specs = starting_problems(config)  # (before anything is bound or opened)
    host = config.server.host if host is None else host
    port = config.server.port if port is None else port
    if listeners is None:
        listeners = bound = await listen(host, port)
        port = bound[0].socket.getsockname()[1]
    leases = Leases() if config.cluster is not None and config.cluster.worker else None
    try:
        async with open_journal(
            config,
            holder=this_server(f"{host}:{port}"),
            fence=leases.fence if leases is not None else None,
        ) as journal:
            if journal.interrupted:
                logger.warning(
                    "ending %d runs left running by the last server: interrupted",
                    len(journal.interrupted),
                )
            if config.server.resume_runs and not journal.storage.durable and config.cluster is None:
                logger.warning(
                    "server.resume_runs: the memory storage keeps nothing over a restart, so "
                    "runs still running when this server stops cannot be resumed (use "
                    "sqlite:// or redis://)"
                )
            await _serve(config, specs, journal, leases, listeners, (host, port), task_status)
    finally:
        for listener in listeners:
            with contextlib.suppress(OSError):
                await listener.aclose()


async def listen(host: str, port: int) -> list[trio.SocketListener]:
    """Bind the server's address.

    Raises:
        CannotListen: `cannot listen on HOST:PORT: <why>`.
    """
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        why = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        raise CannotListen(f"cannot listen on {host}:{port}: {why}") from None


async def _serve(
    config: ServerConfig,
    specs: dict[str, AgentSpec],
    journal: Journal,
    leases: Leases | None,
    listeners: Sequence[trio.abc.Listener[trio.abc.Stream]],
    address: tuple[str, int],
    task_status: trio.TaskStatus[RunningServer],
) -> None:
    with trio.CancelScope() as stop:
        async with (
            Orchestrator.open(config, specs) as orch,
            traced(config, journal, orch.specs) as telemetry,
            trio.open_nursery() as nursery,
            trio.open_nursery() as run_nursery,
        ):
            runs = RunHost(orch, journal, run_nursery)
            outbox = await nursery.start(_outbox, config, journal) if _outboxed(config) else None
            if journal.resumable:
                count = await runs.resume_left(journal.resumable)
                logger.warning("resumed %d runs left running by the last server", count)
            if journal.requeued:  # (after the runs they wait for have been resumed)
                await runs.requeue(journal.requeued)
                logger.warning("requeued %d runs queued by the last server", len(journal.requeued))
            node = None
            if config.cluster is not None:
                node = await nursery.start(_join_cluster, config.cluster, journal, runs, leases)
            app = ServerApp(config, orch, journal, runs, node, address[1])
            app.telemetry = telemetry
            app.outbox = outbox
            if config.triggers and (node is None or node.gateway is not None):
                app.triggers = await _start_triggers(config, app, node, nursery)
            ws_options: dict[str, Any] = {
                "process_request": app.routes.process_request,
                "max_size": config.server.max_frame_bytes,
                "max_queue": 8,
                "logger": ws_logger,
                "compression": None,
                "extensions": deflate(config.server) if config.server.compression else None,
            }
            await _serve_with_front_door(app, stop, listeners, address, ws_options, task_status)


async def _start_triggers(
    config: ServerConfig, app: ServerApp, node: Node | None, nursery: trio.Nursery
) -> Triggers:
    """The triggers, fired here (one process), or by the gateway holding the cluster's
    triggers lease (cluster/trigger_lease.py)."""
    triggers = Triggers(config.triggers, app.runs, app.journal, shared=node is not None)
    if node is None:
        await nursery.start(triggers.run)
        return triggers
    from orchestrator.cluster.node import instance_name
    from orchestrator.cluster.trigger_lease import TriggerLease, hold_triggers

    lease = TriggerLease(node.store.client, node.store.prefix, instance_name())
    await nursery.start(hold_triggers, triggers, lease, node.config.lease_seconds)
    return triggers


def _outboxed(config: ServerConfig) -> bool:
    """Can anything ask for a delivery: a webhook, a client's own, an A2A push config?"""
    asked = config.webhooks or config.server.webhook_urls or config.server.a2a
    return bool(asked) and config.cluster is None


async def _outbox(
    config: ServerConfig, journal: Journal, task_status: trio.TaskStatus[Outbox]
) -> None:
    """The outbox, with its HTTP client, until cancelled."""
    limits = config.limits.webhooks
    specs = {name: hook.spec(hook.secret(name)) for name, hook in config.webhooks.items()}
    async with httpx.AsyncClient(timeout=limits.timeout_seconds, follow_redirects=False) as client:
        sender = Sender(
            client,
            timeout=limits.timeout_seconds,
            allow_private=config.tools.http_allow_private,
            allowed_hosts=config.tools.http_allowed_hosts,
        )
        outbox = Outbox(specs, limits, journal, sender)
        if config.server.a2a:  # (before any run is matched: its push configs need it)
            from orchestrator.server.a2a_push import KIND, A2aPush

            outbox.kinds[KIND] = A2aPush
        await outbox.start()
        task_status.started(outbox)
        await outbox.run()


def deflate(server: ServerSection) -> list[ServerPerMessageDeflateFactory]:
    """permessage-deflate as websockets offers it by default (windows of 2^12, memLevel
    5), at `server.compression_level`."""
    return [
        ServerPerMessageDeflateFactory(
            server_max_window_bits=12,
            client_max_window_bits=12,
            compress_settings={"memLevel": 5, "level": server.compression_level},
        )
    ]


async def _serve_with_front_door(
    app: ServerApp,
    stop: trio.CancelScope,
    listeners: Sequence[trio.abc.Listener[trio.abc.Stream]],
    address: tuple[str, int],
    ws_options: dict[str, Any],
    task_status: trio.TaskStatus[RunningServer],
) -> None:
    """`/ws` and the streaming HTTP endpoints on one port: the front door routes each
    connection (front.py)."""
    to_ws, from_front = trio.open_memory_channel[trio.abc.Stream](0)
    first = listeners[0]
    sock = first.socket if isinstance(first, trio.SocketListener) else Address(*address)
    async with contextlib.AsyncExitStack() as stack:
        routes = await stack.enter_async_context(open_doors(app))
        handlers = await stack.enter_async_context(trio.open_nursery())
        nursery = await stack.enter_async_context(trio.open_nursery())
        ws_server: Server = await nursery.start(
            functools.partial(
                ws_serve,
                app.handler,
                listeners=[HandoffListener(sock, from_front)],  # type: ignore[list-item]
                **ws_options,
            )
        )
        http_slots = trio.CapacityLimiter(app.config.server.max_connections)
        async with trio.open_nursery() as front:  # cancelled by shutdown: stop accepting
            for listener in listeners:
                front.start_soon(route_connections, listener, to_ws, routes, handlers, http_slots)
            running = RunningServer(app, ws_server, stop, front.cancel_scope, address=address)
            task_status.started(running)
        await trio.sleep_forever()
