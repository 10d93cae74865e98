"""One instance of a cluster: its gateway side, its worker side, or both."""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from orchestrator.cluster.gateway import ClusterGateway
from orchestrator.cluster.leases import Leases
from orchestrator.cluster.store import ClusterStore
from orchestrator.cluster.worker import Worker
from orchestrator.config import ClusterConfig, ConfigError, ServerConfig
from orchestrator.runs.host import RunHost
from orchestrator.runtime.engine import Orchestrator
from orchestrator.storage.journal import Journal
from orchestrator.storage.open import open_journal
from orchestrator.storage.redis import RedisStorage
from orchestrator.telemetry import traced

__all__ = ["Node", "instance_name", "open_node", "run_worker"]

logger = logging.getLogger(__name__)
LIVE_HEARTBEAT = 10.0
"""Seconds since a worker's last heartbeat (every 2 s) within which it counts as alive."""


def instance_name() -> str:
    """A name no other live instance has: host, pid and a random suffix."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:4]}"


class Node:
    """What this instance is in the cluster; `queue_depth` and `cluster_stalled` are
    refreshed every 2 s."""

    def __init__(
        self,
        config: ClusterConfig,
        store: ClusterStore,
        gateway: ClusterGateway | None,
        worker: Worker | None,
    ) -> None:
        self.config = config
        self.store = store
        self.gateway = gateway
        self.worker = worker
        self.queue_depth = 0
        self.cluster_stalled = 0
        """Agents marked stalled on every live worker (their heartbeats say): stalls are
        detected where runs execute, and a gateway's `/metrics` shows the cluster's."""

    @property
    def role(self) -> str:
        """`gateway+worker`, `gateway` or `worker`."""
        return "+".join(
            name for name, part in (("gateway", self.gateway), ("worker", self.worker)) if part
        )

    async def stop(self) -> None:
        """Leave gracefully: a worker hands its runs over to the cluster's other workers
        (`Worker.hand_over`); the caller bounds the wait."""
        if self.worker is not None:
            await self.worker.hand_over()

    async def _stats_loop(self) -> None:
        while True:
            try:
                self.queue_depth = await self.store.queue_depth()
                now = time.time()
                self.cluster_stalled = sum(
                    int(beat.get("stalled", 0))  # type: ignore[call-overload]
                    for beat in (await self.store.workers()).values()
                    if now - float(beat.get("at", 0)) < LIVE_HEARTBEAT  # type: ignore[arg-type]
                )
            except Exception as exc:
                logger.debug("cluster figures: %s", exc)
            await trio.sleep(2.0)


@asynccontextmanager
async def open_node(
    config: ClusterConfig,
    journal: Journal,
    host: RunHost,
    *,
    gateway: bool,
    leases: Leases | None = None,
) -> AsyncIterator[Node]:
    """Join the cluster for the block: tail watched runs (gateway), execute runs (worker).

    `leases`: the fence the journal was opened with (`open_journal(fence=leases.fence)`);
    needed when `config.worker` is set.
    """
    storage = journal.storage
    if not isinstance(storage, RedisStorage):  # the config validator makes this impossible
        raise TypeError("cluster mode needs redis storage")
    store = ClusterStore(storage, config.name)
    await store.ensure_group()
    node = Node(
        config,
        store,
        ClusterGateway(store, journal, host.orchestrator.specs) if gateway else None,
        _worker(config, store, host, leases) if config.worker else None,
    )
    async with trio.open_nursery() as nursery:
        if node.gateway is not None:
            nursery.start_soon(node.gateway.tail_loop)
        if node.worker is not None:
            await nursery.start(node.worker.run)
        nursery.start_soon(node._stats_loop)
        logger.info(
            "joined cluster %r as %s%s",
            config.name,
            node.role,
            f" ({node.worker.name}, up to {config.max_runs} runs)" if node.worker else "",
        )
        try:
            yield node
        finally:
            nursery.cancel_scope.cancel()


def _worker(
    config: ClusterConfig, store: ClusterStore, host: RunHost, leases: Leases | None
) -> Worker:
    if leases is None:
        raise TypeError("a worker's journal is opened with its leases' fence (cluster/leases.py)")
    return Worker(config, store, host, instance_name(), leases)


async def run_worker(
    config: ServerConfig, *, task_status: trio.TaskStatus[Node] = trio.TASK_STATUS_IGNORED
) -> None:
    """`orchestrator worker`: execute the cluster's runs, with no listening socket.

    Runs until cancelled. `Node.stop` first (as `orchestrator worker` does on SIGTERM)
    hands the runs it executes over to the cluster's other workers at once; runs still
    here when it is cancelled are stopped without journaling an end (bounded by
    `server.shutdown_timeout`), and another worker takes each over once its lease
    expires, as after a crash.
    """
    cluster = config.cluster
    if cluster is None or not cluster.worker:
        raise ConfigError("orchestrator worker: the config needs `cluster:` with `worker: true`")
    leases = Leases()
    async with (
        open_journal(config, fence=leases.fence) as journal,
        Orchestrator.open(config) as orch,
        traced(config, journal, orch.specs),
        trio.open_nursery() as run_nursery,
    ):
        host = RunHost(orch, journal, run_nursery)
        async with open_node(cluster, journal, host, gateway=False, leases=leases) as node:
            task_status.started(node)
            try:
                await trio.sleep_forever()
            finally:
                with (
                    trio.CancelScope(shield=True),
                    trio.move_on_after(config.server.shutdown_timeout),
                ):
                    await host.suspend_all()
                    await journal.writer.flush()
