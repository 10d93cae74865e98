"""Chaos in the production shape: runs under load while processes die, pause and return.

Two shapes (issue 31):

- `cluster`: 2 gateways (`orchestrator serve`, `cluster.worker: false`) and 3
  `orchestrator worker`s on Redis, all started before the first run,
  `lease_seconds: 3`.
- `single`: one `orchestrator serve` on SQLite with `resume_runs` (the default).

A steady load of runs: streaming trees (`planner`), a root with a background child
(`bg`), and a call that waits for approval (`boss` → `writer`, which appends its
task to `effects.txt` once approved), and a steered run (`steer`: a streamer and a
`victim` whose call waits for an approval nobody gives; the driver sends the
streamer a message, then cancels the victim). Each run has a watcher that drops its
connection now and then (no close handshake) and resumes by seq through a random
gateway; approvals are answered (some denied) through a random gateway. Meanwhile a
seeded driver SIGKILLs workers and starts new ones, SIGTERMs workers (a deploy:
they hand their runs over) and starts new ones, SIGSTOPs a worker past its lease
and resumes it, kills gateways and starts new ones (`single`: SIGKILL or SIGTERM
of the server, started again on its port).

When it stops, every process is brought back and every run is awaited; then
`verify` checks that every accepted run ended (completed, or failed `worker_lost`);
every watcher saw every seq exactly once, in order, and the same events as a final
replay; each agent started and ended once and no tool call has two results; each
approved write ran at most once, and exactly once when its result says it ran, and
a denied one never; a steered run's acked message was delivered once and its
victim ended by the cancel; `runs` agrees with each RUN_FINISHED; and (cluster) no lease,
waiting call or worker heartbeat is left for a run that ended.

    .venv/bin/python -m tests.chaos                          # cluster, 600 s, seed 1
    .venv/bin/python -m tests.chaos --mode single --seconds 300 --seed 2
    .venv/bin/python -m tests.chaos --seeds 1,2,3 --seconds 120

The test suite runs a short one of each shape (`tests/integration/test_chaos.py`).
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import random
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
import yaml
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.trio.client import ClientConnection, connect

from tests.cluster_helpers import REPO, Cluster, Instance, reap

LEASE_SECONDS = 3.0
DOCUMENTED_FAILURES = {
    "cluster": {"worker_lost"},  # taken by `cluster.max_attempts` workers that stopped
    "single": {"interrupted"},  # its server stopped more than MAX_RESTARTS times
}
"""How a run may end other than `completed` under this chaos (docs/cluster.md,
docs/server.md)."""
_DROPPED = (
    OSError,
    ConnectionClosed,
    InvalidHandshake,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    trio.TooSlowError,
)
"""What a client sees of a process that died, paused or dropped it."""


def _agent(turns: list[dict[str, Any]], tools: list[str], delay: float, **extra: Any) -> Any:
    script = {"turns": turns, "token_delay": delay}
    return {"description": "chaos", "instructions": "i", "tools": tools, "script": script, **extra}


def _spawn(agent_id: str, **args: Any) -> dict[str, Any]:
    return {"name": "agent_spawn", "args": {"agent_id": agent_id, "task": "{input}", **args}}


AGENTS = {
    "bg": _agent(
        [{"calls": [_spawn("streamer", timeout_seconds=0)], "say": "started it"}, {"say": "ok"}],
        ["agent_spawn"],
        0.02,
    ),
    "boss": _agent(
        [{"calls": [_spawn("writer"), _spawn("streamer")]}, {"say": "boss: {results}"}],
        ["agent_spawn"],
        0.02,
    ),
    "writer": _agent(
        [
            {
                "calls": [
                    {
                        "name": "write_file",
                        "args": {"path": "effects.txt", "content": "{input}\n", "append": True},
                    }
                ]
            },
            {"say": "wrote {input}"},
        ],
        ["write_file"],
        0.02,
        approval=["write_file"],
    ),
    "streamer": _agent([{"say": " ".join(f"w{i}" for i in range(60))}], [], 0.04),
    "steer": _agent(
        [{"calls": [_spawn("streamer"), _spawn("victim")]}, {"say": "steered: {results}"}],
        ["agent_spawn"],
        0.02,
    ),
    "victim": _agent(  # waits for an approval nobody gives: only a cancel ends it
        [
            {
                "calls": [
                    {
                        "name": "write_file",
                        "args": {
                            "path": "effects.txt",
                            "content": "{input} victim\n",
                            "append": True,
                        },
                    }
                ]
            },
            {"say": "unreachable"},
        ],
        ["write_file"],
        0.02,
        approval=["write_file"],
    ),
}
KINDS = ["planner", "bg", "boss", "steer"]
NOTE = "a note from a person"
"""What the driver sends to a `steer` run's streamer (before it cancels its victim)."""


def write_configs(root: Path, mode: str, redis_url: str | None) -> dict[str, Path]:
    """Subagents and configs for the shape: {"serve": …, "worker": …}."""
    sub = root / "subagents"
    sub.mkdir(parents=True, exist_ok=True)
    for spec_path in (REPO / "configs" / "subagents").glob("*.yaml"):
        spec = yaml.safe_load(spec_path.read_text())
        spec["script"]["token_delay"] = 0.02
        (sub / spec_path.name).write_text(yaml.safe_dump(spec))
    for agent_id, spec in AGENTS.items():
        (sub / f"{agent_id}.yaml").write_text(yaml.safe_dump(spec))
    (root / "workspace").mkdir(exist_ok=True)
    base: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": 0, "shutdown_timeout": 5},
        "models": {"default": {"provider": "scripted"}},
        "subagents_dir": "subagents",
        "limits": {"max_depth": 4},
    }
    if mode == "single":
        path = root / "server.yaml"
        path.write_text(yaml.safe_dump({**base, "storage": "sqlite:///journal.db"}))
        return {"serve": path}
    assert redis_url is not None
    paths = {}
    for kind, worker in (("serve", False), ("worker", True)):
        data = {
            **base,
            "storage": {"url": redis_url, "durability": "relaxed"},
            "cluster": {
                "name": "chaos",
                "worker": worker,
                "lease_seconds": LEASE_SECONDS,
                "max_runs": 16,
            },
        }
        paths[kind] = root / f"{kind}.yaml"
        paths[kind].write_text(yaml.safe_dump(data))
    return paths


@dataclass
class Watched:
    """One accepted run, as its watcher saw it."""

    run_id: str
    kind: str
    input: str
    events: list[dict[str, Any]] = field(default_factory=list)
    status: str | None = None
    duplicated: int = 0
    lost: int = 0
    reconnects: int = 0
    answered: set[str] = field(default_factory=set)
    gateway: str = ""
    """The URL its watcher last subscribed through."""
    steered: bool = False
    """(`steer`) The driver acked a `send` to its streamer, then a `cancel` of its victim."""
    unsure_sends: int = 0
    """(`steer`) `send`s whose ack was lost: each may have been delivered."""

    @property
    def last_seq(self) -> int:
        return self.events[-1]["seq"] if self.events else 0


@dataclass
class Report:
    """What a chaos run did and found."""

    mode: str
    seed: int
    seconds: float
    actions: collections.Counter[str] = field(default_factory=collections.Counter)
    runs: int = 0
    events: int = 0
    reconnects: int = 0
    lost: int = 0
    duplicated: int = 0
    statuses: collections.Counter[str] = field(default_factory=collections.Counter)
    resumed: int = 0
    """RUN_RESUMED events: runs continued mid-tree by another worker (or after a restart)."""
    effects: int = 0
    """Approved writes the journal says ran (each checked to be in the file once)."""
    problems: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    """How the runs that ended `failed` (for a documented reason) failed."""

    def row(self) -> str:
        actions = ", ".join(f"{n} {name}" for name, n in sorted(self.actions.items()))
        statuses = ", ".join(f"{n} {s}" for s, n in sorted(self.statuses.items()))
        return (
            f"| {self.mode} | {self.seed} | {self.seconds:.0f} | {sum(self.actions.values())} "
            f"({actions}) | {self.runs} ({statuses}) | {self.resumed} | {self.events:,} | "
            f"{self.reconnects} | {self.effects} | {self.lost} | {self.duplicated} | "
            f"{len(self.problems)} |"
        )


class Chaos:
    """Processes, load, watchers and the chaos driver of one chaos run."""

    def __init__(
        self,
        group: Cluster,
        root: Path,
        mode: str,
        *,
        seed: int,
        seconds: float,
        concurrency: int,
        redis_url: str | None,
        every: tuple[float, float] = (3.0, 7.0),
    ) -> None:
        self.group = group
        self.every = every
        self.root = root
        self.mode = mode
        self.rng = random.Random(seed)
        """The load's choices (runs, drops, answers)."""
        self.schedule = random.Random(seed)
        """When and which action: the schedule does not depend on timing."""
        self.shaker = random.Random(seed + 1)
        """Which process an action picks, and for how long."""
        self.seconds = seconds
        self.concurrency = concurrency
        self.redis_url = redis_url
        self.report = Report(mode, seed, seconds)
        self.watched: list[Watched] = []
        self.gateways: list[Instance] = []
        self.workers: list[Instance] = []
        self.busy: set[int] = set()
        """Processes an action is working on (stopped, being replaced)."""
        self.port = 0
        self.in_flight = 0
        self.submitted = 0
        self._nursery: trio.Nursery | None = None
        """Where answers to waiting calls run."""

    # -- processes ---------------------------------------------------------------

    async def start_all(self) -> None:
        if self.mode == "single":
            self.port = _free_port()
            self.gateways.append(await self.group.start("serve", port=self.port))
            return
        for _ in range(2):
            self.gateways.append(await self.group.start("serve"))
        for _ in range(3):
            self.workers.append(await self.group.start("worker"))

    def urls(self) -> list[str]:
        return [g.url for g in self.gateways if g.process.returncode is None and g.url]

    async def url(self) -> str:
        """A random live gateway's URL (waits while none is up)."""
        while not (urls := self.urls()):  # noqa: ASYNC110 - processes nobody signals
            await trio.sleep(0.1)
        return self.rng.choice(urls)

    async def restore(self) -> None:
        """After the chaos (its actions are over): every process back, none stopped."""
        for instance in self.group.instances:
            if instance.process.returncode is None:
                instance.cont()
        live = [g for g in self.gateways if g.process.returncode is None]
        want = 1 if self.mode == "single" else 2
        for _ in range(want - len(live)):
            self.gateways.append(await self.group.start("serve", port=self.port))
        live_workers = [w for w in self.workers if w.process.returncode is None]
        for _ in range(len(live_workers), 3 if self.mode == "cluster" else 0):
            self.workers.append(await self.group.start("worker"))

    # -- the chaos driver ----------------------------------------------------------

    async def drive(self, until: float) -> None:
        actions: list[Callable[[], Awaitable[None]]]
        if self.mode == "single":
            actions = [self.kill_server, self.kill_server, self.term_server]
        else:
            actions = [self.kill_worker, self.stop_worker, self.kill_gateway, self.term_worker]
        async with trio.open_nursery() as nursery:
            await trio.sleep(self.schedule.uniform(2, 4))
            while trio.current_time() < until:
                nursery.start_soon(self.schedule.choice(actions))
                await trio.sleep(self.schedule.uniform(*self.every))

    def _pick(self, instances: list[Instance]) -> Instance | None:
        free = [i for i in instances if i.process.returncode is None and id(i) not in self.busy]
        return self.shaker.choice(free) if free else None

    async def kill_worker(self) -> None:
        await self._shake("worker SIGKILL", self.workers, signal.SIGKILL, "worker", 3)

    async def term_worker(self) -> None:
        """A deploy: the worker hands its runs over, then a new one starts."""
        await self._shake("worker SIGTERM", self.workers, signal.SIGTERM, "worker", 2)

    async def stop_worker(self) -> None:
        await self._shake("worker SIGSTOP past its lease", self.workers, signal.SIGSTOP)

    async def kill_gateway(self) -> None:
        await self._shake("gateway SIGKILL", self.gateways, signal.SIGKILL, "serve", 2)

    async def kill_server(self) -> None:
        await self._shake("server SIGKILL", self.gateways, signal.SIGKILL, "serve", 1.5)

    async def term_server(self) -> None:
        await self._shake("server SIGTERM", self.gateways, signal.SIGTERM, "serve", 1.5)

    async def _shake(
        self,
        name: str,
        instances: list[Instance],
        signum: signal.Signals,
        again: str | None = None,
        within: float = 0.0,
    ) -> None:
        """Signal one live process of `instances`: SIGSTOP it past its lease and resume
        it, or stop it and start a new `again` (`serve` on the same port) within
        `within` seconds."""
        instance = self._pick(instances)
        if instance is None:
            return
        self.busy.add(id(instance))
        try:
            self.report.actions[name] += 1
            instance.process.send_signal(signum)
            if signum == signal.SIGSTOP:
                await trio.sleep(LEASE_SECONDS + self.shaker.uniform(0.5, 2.5))
                instance.cont()
                return
            with trio.move_on_after(30):  # (a SIGTERM that takes longer: SIGKILL)
                await instance.process.wait()
            instance.kill()
            await trio.sleep(self.shaker.uniform(0, within))
            assert again is not None
            instances.append(await self.group.start(again, port=self.port))
        finally:
            self.busy.discard(id(instance))

    # -- load --------------------------------------------------------------------

    async def load(self, until: float) -> None:
        """Keep `concurrency` runs in flight until `until`; then wait for them all."""
        async with trio.open_nursery() as nursery:
            while trio.current_time() < until:
                if self.in_flight < self.concurrency:
                    self.in_flight += 1
                    nursery.start_soon(self.one_run, self.rng.choice(KINDS))
                await trio.sleep(self.rng.uniform(0.05, 0.4))

    async def one_run(self, kind: str) -> None:
        try:
            watched = await self.submit(kind)
            if watched is not None:
                self.watched.append(watched)
                await self.watch(watched)
        finally:
            self.in_flight -= 1

    async def submit(self, kind: str) -> Watched | None:
        """Start a run through a random gateway (each try a new input: a try whose ack
        was lost may still have started its run, checked through `runs` later)."""
        for _ in range(50):
            self.submitted += 1
            text = f"{kind}-{self.report.seed}-{self.submitted}"
            try:
                with trio.fail_after(10):
                    async with connect(await self.url(), max_size=None) as ws:
                        reply = await _request(ws, op="run", id=1, agent=kind, input=text)
            except _DROPPED:
                await trio.sleep(0.3)
                continue
            if reply.get("op") == "ack":
                return Watched(str(reply["runId"]), kind, text)
            self.report.problems.append(f"run refused: {reply}")
            return None
        self.report.problems.append("no gateway took a run in 50 tries")
        return None

    async def watch(self, watched: Watched) -> None:
        """Follow the run to its end through random gateways, dropping now and then."""
        while watched.status is None:
            drop_after = self.rng.randint(1, 40) if self.rng.random() < 0.5 else 1 << 30
            try:
                watched.gateway = await self.url()
                async with connect(watched.gateway, max_size=None, open_timeout=5) as ws:
                    await ws.send(
                        json.dumps(
                            {
                                "op": "subscribe",
                                "id": "w",
                                "runId": watched.run_id,
                                "afterSeq": watched.last_seq,
                            }
                        )
                    )
                    frames = 0
                    while watched.status is None and frames < drop_after:
                        with trio.fail_after(20):  # a paused or dead gateway
                            frame = json.loads(await ws.recv())
                        frames += 1
                        self._take(watched, frame)
                    if watched.status is None:
                        await trio.aclose_forcefully(ws.stream)  # no close handshake
            except _DROPPED:
                await trio.sleep(0.2)
            if watched.status is None:
                watched.reconnects += 1

    def _take(self, watched: Watched, frame: dict[str, Any]) -> None:
        op = frame.get("op")
        if op == "events":
            for event in frame["events"]:
                seq = event["seq"]
                if seq <= watched.last_seq:
                    watched.duplicated += 1
                    continue
                watched.lost += seq - watched.last_seq - 1
                watched.events.append(event)
                if event["type"] == "APPROVAL_REQUESTED":
                    call = event["data"]["toolCallId"]
                    if call not in watched.answered and self._nursery is not None:
                        watched.answered.add(call)
                        answer = self.steer if watched.kind == "steer" else self.answer
                        self._nursery.start_soon(answer, watched, call)
        elif op == "end":
            watched.status = frame["status"]
        elif op == "error":
            problem = f"{watched.run_id}: error frame {frame.get('code')}: {frame.get('message')}"
            if problem not in self.report.problems:
                self.report.problems.append(problem)
            raise trio.BrokenResourceError  # reconnect

    async def answer(self, watched: Watched, call_id: str) -> None:
        """Answer a waiting call through a random gateway, after a person's moment."""
        await trio.sleep(self.rng.uniform(0.2, 2.5))
        decision = "deny" if self.rng.random() < 0.2 else "approve"
        while watched.status is None:
            try:
                with trio.fail_after(10):
                    async with connect(await self.url(), max_size=None) as ws:
                        reply = await _request(
                            ws,
                            op="approve",
                            id="a",
                            runId=watched.run_id,
                            toolCallId=call_id,
                            decision=decision,
                            reason="chaos",
                        )
            except _DROPPED:
                await trio.sleep(0.3)
                continue
            message = str(reply.get("message", ""))
            if reply.get("op") == "ack" or "already answered" in message:
                return
            await trio.sleep(0.3)  # not yet published (or the run is over): try again

    async def steer(self, watched: Watched, _call_id: str) -> None:
        """A `steer` run's victim waits: send its streamer a message, then cancel the
        victim, each through a random gateway until acked (takeovers may come between:
        neither may be lost, and the message is delivered once)."""
        keys = {
            e["source"]["agentId"]: e["source"]["agentKey"]
            for e in watched.events
            if e["type"] == "AGENT_STARTED"
        }
        await trio.sleep(self.rng.uniform(0, 1.5))
        await self._control(
            watched, op="send", agentKey=keys["streamer"], message=NOTE, unsure="unsure_sends"
        )
        await trio.sleep(self.rng.uniform(0, 1.0))
        await self._control(watched, op="cancel", agentKey=keys["victim"], reason="chaos")
        watched.steered = True

    async def _control(self, watched: Watched, *, unsure: str | None = None, **op: Any) -> None:
        """One control op through random gateways until acked (`unsure`: the field of
        `watched` that counts tries whose ack was lost after the op went out)."""
        while True:
            sent = False
            try:
                with trio.fail_after(10):
                    async with connect(await self.url(), max_size=None) as ws:
                        await ws.send(json.dumps({**op, "id": "c", "runId": watched.run_id}))
                        sent = True
                        reply = await _request(ws)
            except _DROPPED:
                if sent and unsure is not None:
                    setattr(watched, unsure, getattr(watched, unsure) + 1)
                await trio.sleep(0.3)
                continue
            if reply.get("op") == "ack":
                return
            self.report.problems.append(f"{watched.run_id}: {op['op']} refused: {reply}")
            return

    # -- the whole run -------------------------------------------------------------

    async def run(self, drain: float) -> Report:
        """Start, load and shake for `seconds`, bring everything back, wait up to
        `drain` seconds for every run to end, then verify."""
        await self.start_all()
        until = trio.current_time() + self.seconds
        loaded = trio.Event()

        async def load() -> None:
            await self.load(until)
            loaded.set()

        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(load)
            await self.drive(until)
            await self.restore()
            with trio.move_on_after(drain):
                await loaded.wait()
            open_runs = [w.run_id for w in self.watched if w.status is None]
            if open_runs:
                self.report.problems.append(f"runs not ended {drain:.0f} s after: {open_runs}")
                self.report.problems.extend(
                    f"  watcher of {w.run_id}: last seq {w.last_seq}, {w.reconnects} reconnects,"
                    f" last gateway {w.gateway}"
                    for w in self.watched
                    if w.status is None
                )
                self.report.problems.extend(self._said_of(open_runs))
                if self.mode == "cluster":
                    self.report.problems.extend(await self._redis_state(open_runs))
            nursery.cancel_scope.cancel()
        await self.verify()
        return self.report

    # -- the checks --------------------------------------------------------------

    def _said_of(self, run_ids: list[str], most: int = 40) -> list[str]:
        """What the processes logged about these runs (the last `most` lines), to tell
        why one did not end."""
        said = [
            f"  {instance.kind} {instance.name or instance.url}: {line}"
            for instance in self.group.instances
            for line in instance.lines
            if any(run_id in line for run_id in run_ids)
        ]
        return said[-most:]

    async def _redis_state(self, run_ids: list[str]) -> list[str]:
        """What Redis holds of these runs (record, lease, journal, control stream) and
        of the workers, to tell why one did not end."""
        import coredis

        assert self.redis_url is not None
        prefix = self.redis_url.split("prefix=", 1)[1]
        lines = []
        async with coredis.Redis.from_url(self.redis_url.split("?", 1)[0]) as client:
            for run_id in run_ids:
                key = f"{prefix}run:{{{run_id}}}"
                record = await client.hget(f"{prefix}runs", run_id)
                lease = await client.get(f"{key}:lease")
                ttl = await client.pttl(f"{key}:lease")
                last = await client.xrevrange(f"{key}:ev", count=1)
                control = await client.xlen(f"{key}:ctl")
                done = await client.get(f"{key}:ctldone")
                lines.append(
                    f"  redis {run_id}: record {record!r}; lease {lease!r} ({ttl} ms); "
                    f"last event {last!r}; {control} control requests, done {done!r}"
                )
            pending = await client.xpending(f"{prefix}cluster:chaos:queue", "workers")
            beats = await client.hgetall(f"{prefix}cluster:chaos:workers")
        lines.append(f"  redis queue pending: {pending!r}; workers: {beats!r}")
        return lines

    async def verify(self) -> None:
        report = self.report
        report.runs = len(self.watched)
        url = await self.url()
        effects = self.root / "workspace" / "effects.txt"
        lines = effects.read_text().splitlines() if effects.exists() else []
        written = collections.Counter(lines)
        async with connect(url, max_size=None) as ws:
            listing = await _request(ws, op="runs", id="l", limit=1000)
            records = {r["runId"]: r for r in listing["runs"]}
            for watched in self.watched:
                report.reconnects += watched.reconnects
                report.lost += watched.lost
                report.duplicated += watched.duplicated
                report.events += len(watched.events)
                final = await _replay(url, watched.run_id, 30 if watched.status else 3)
                record = records.get(watched.run_id)
                for problem in check_run(watched, final, record, written, self.mode):
                    report.problems.append(f"{watched.run_id} ({watched.kind}): {problem}")
                if final and final[-1]["type"] == "RUN_FINISHED":
                    finished = final[-1]["data"]
                    report.statuses[finished["status"]] += 1
                    if finished["status"] != "completed":
                        report.failures.append(f"{watched.run_id}: {finished.get('error')}")
                report.effects += _ran(final)
                report.resumed += sum(e["type"] == "RUN_RESUMED" for e in final)
            for record in records.values():  # those whose ack was lost included
                if record["status"] in ("queued", "running"):
                    report.problems.append(f"{record['runId']} is still {record['status']}")
            extra = [line for line, n in written.items() if n > 1]
            if extra:
                report.problems.append(f"writes that ran more than once: {extra}")
            if self.mode == "cluster":
                await self._verify_cluster(ws)
        for instance in self.group.instances:
            tracebacks = sum("Traceback" in line for line in instance.lines)
            if tracebacks:
                report.problems.append(
                    f"{instance.kind} {instance.name or instance.url}: {tracebacks} traceback(s)"
                )
                first = next(i for i, line in enumerate(instance.lines) if "Traceback" in line)
                report.problems.extend(  # the line before it says what was being done
                    f"    {line}" for line in instance.lines[max(0, first - 1) : first + 40]
                )

    async def _verify_cluster(self, ws: ClientConnection) -> None:
        """No lease, waiting call or busy heartbeat left once every run ended."""
        import coredis

        assert self.redis_url is not None
        prefix = self.redis_url.split("prefix=", 1)[1]
        left: list[str] = []
        busy: dict[str, Any] = {}
        async with coredis.Redis.from_url(self.redis_url.split("?", 1)[0]) as client:
            with trio.move_on_after(LEASE_SECONDS + 5):  # heartbeats come every 2 s
                while True:
                    left = [
                        k.decode() async for k in client.scan_iter(match=f"{prefix}run:*:lease")
                    ]
                    beats = await client.hgetall(f"{prefix}cluster:chaos:workers")
                    live = {w.name for w in self.workers if w.process.returncode is None}
                    busy = {
                        name: info
                        for raw, value in beats.items()
                        if (name := raw.decode()) in live
                        and (info := json.loads(value))["runs"] != 0
                    }
                    if not left and not busy:
                        break
                    await trio.sleep(0.5)
        if left:
            self.report.problems.append(f"leases left after every run ended: {left}")
        if busy:
            self.report.problems.append(f"workers that still count runs: {busy}")
        pending = await _request(ws, op="pending", id="p")
        if pending.get("approvals"):
            self.report.problems.append(f"calls still listed as waiting: {pending['approvals']}")


def check_run(
    watched: Watched,
    final: list[dict[str, Any]],
    record: dict[str, Any] | None,
    written: collections.Counter[str],
    mode: str = "cluster",
) -> list[str]:
    """What is wrong with one run, from its watcher's events and a final replay."""
    problems = []
    if watched.lost or watched.duplicated:
        problems.append(f"watcher lost {watched.lost}, duplicated {watched.duplicated}")
    if [e["seq"] for e in final] != list(range(1, len(final) + 1)):
        problems.append("the journal's seqs are not 1..n")
    if watched.events != final:
        problems.append(
            f"the watcher saw {len(watched.events)} events, the replay has {len(final)}"
            " (or they differ)"
        )
    if not final or final[-1]["type"] != "RUN_FINISHED":
        return [*problems, "no RUN_FINISHED"]
    finished = final[-1]["data"]
    documented = DOCUMENTED_FAILURES[mode]
    if finished["status"] != "completed" and finished.get("errorType") not in documented:
        problems.append(f"ended {finished['status']}: {finished.get('error')}")
    if watched.status != finished["status"]:
        problems.append(f"end frame {watched.status} but RUN_FINISHED {finished['status']}")
    starts = [e for e in final if e["type"] == "RUN_STARTED"]
    if len(starts) != 1 or starts[0]["data"].get("input") != watched.input:
        problems.append(f"RUN_STARTED: {[s['data'] for s in starts]}")
    problems += _tree_problems(final)
    if record is None:
        problems.append("not listed by `runs`")
    else:
        resumed = sum(e["type"] == "RUN_RESUMED" for e in final)
        attempt = record.get("attempt")  # (cluster mode only)
        if record["status"] != finished["status"] or (attempt or 1 + resumed) < 1 + resumed:
            problems.append(
                f"`runs` says {record['status']} attempt {attempt}, the journal "
                f"{finished['status']} after {resumed} RUN_RESUMED"
            )
    if watched.kind == "boss":
        problems += _effect_problems(watched, final, written)
    if watched.kind == "steer":
        problems += _steer_problems(watched, final, written)
    return problems


def _steer_problems(
    watched: Watched, events: list[dict[str, Any]], written: collections.Counter[str]
) -> list[str]:
    """An acked message reached the streamer once (or once per try whose ack was
    lost); an acked cancel ended the victim, whose call never ran."""
    problems = []
    if written[f"{watched.input} victim"]:
        problems.append("the victim's write ran")
    if events[-1]["data"]["status"] != "completed":
        return problems  # (failed as documented: the run ended before it was steered)
    notes = [e for e in events if e["type"] == "USER_MESSAGE" and e["data"]["text"] == NOTE]
    if not watched.steered:
        problems.append("completed before the driver steered it")
    elif not 1 <= len(notes) <= 1 + watched.unsure_sends:
        problems.append(
            f"the message was delivered {len(notes)}x ({watched.unsure_sends} unsure tries)"
        )
    ends = [
        e
        for e in events
        if e["source"]
        and e["source"]["agentId"] == "victim"
        and e["type"] in ("AGENT_RESULT", "AGENT_ERROR")
    ]
    if [(e["data"].get("errorType"), e["data"].get("by")) for e in ends] != [("cancelled", "user")]:
        problems.append(f"the victim ended {[e['data'] for e in ends]}, not by the cancel")
    return problems


def _key(event: dict[str, Any]) -> str | None:
    return event["source"]["agentKey"] if event["source"] else None


def _tree_problems(events: list[dict[str, Any]]) -> list[str]:
    """Each agent starts and ends once; no tool call has two results."""
    problems = []
    started = collections.Counter(
        _key(e) for e in events if e["type"] in ("RUN_STARTED", "AGENT_STARTED")
    )
    ended = collections.Counter(
        _key(e) for e in events if e["type"] in ("AGENT_RESULT", "AGENT_ERROR")
    )
    if any(n > 1 for n in started.values()):
        problems.append(f"agents started twice: {[k for k, n in started.items() if n > 1]}")
    if started != ended:
        problems.append(f"agents started {dict(started)} but ended {dict(ended)}")
    results = collections.Counter(
        (_key(e), e["data"]["toolCallId"])
        for e in events
        if e["type"] == "TOOL_RESULT" and not e["data"].get("server")
    )
    twice = [k for k, n in results.items() if n > 1]
    if twice:
        problems.append(f"tool calls with two results: {twice}")
    return problems


def _writes(events: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """The journaled decision on the writer's call and the call's results."""
    decision = None
    results = []
    for event in events:
        source = event["source"]
        if not source or source["agentId"] != "writer":
            continue
        if event["type"] == "APPROVAL_RESOLVED":
            decision = event["data"]["decision"]
        elif event["type"] == "TOOL_RESULT" and event["data"]["name"] == "write_file":
            results.append(event)
    return decision, results


def _ran(events: list[dict[str, Any]]) -> int:
    decision, results = _writes(events)
    return int(decision == "approve" and any(not r["data"]["isError"] for r in results))


def _effect_problems(
    watched: Watched, events: list[dict[str, Any]], written: collections.Counter[str]
) -> list[str]:
    """An approved write ran at most once, exactly once when its result says it ran; a
    call not approved never ran."""
    decision, results = _writes(events)
    times = written[watched.input]
    if decision == "approve" and any(not r["data"]["isError"] for r in results):
        return [] if times == 1 else [f"approved write reported done but in the file {times}x"]
    if decision == "approve":
        return [] if times <= 1 else [f"approved write in the file {times}x"]
    return [] if times == 0 else [f"write with decision {decision} in the file {times}x"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _request(ws: ClientConnection, **message: Any) -> dict[str, Any]:
    """Send `message` (if any) and return the next reply that is not a feed's frame."""
    if message:
        await ws.send(json.dumps(message))
    while True:
        frame: dict[str, Any] = json.loads(await ws.recv())
        if frame.get("op") not in ("events", "end", "gap"):
            return frame


async def _replay(url: str, run_id: str, within: float) -> list[dict[str, Any]]:
    """The run's journal from seq 1 (what it holds within `within` s, if it never ends)."""
    events: list[dict[str, Any]] = []
    async with connect(url, max_size=None) as ws:
        await ws.send(json.dumps({"op": "subscribe", "id": "r", "runId": run_id}))
        with trio.move_on_after(within):
            while True:
                frame = json.loads(await ws.recv())
                if frame.get("op") == "events":
                    events.extend(frame["events"])
                elif frame.get("op") in ("end", "error"):
                    break
    return events


async def chaos(
    mode: str,
    *,
    seed: int,
    seconds: float,
    root: Path,
    redis_url: str | None = None,
    concurrency: int = 6,
    drain: float = 120,
    every: tuple[float, float] = (3.0, 7.0),
) -> Report:
    """One chaos run of `mode` (`cluster` needs `redis_url`, with a fresh `?prefix=`)."""
    configs = write_configs(root, mode, redis_url)
    async with trio.open_nursery() as nursery:
        group = Cluster(nursery, configs["serve"], configs.get("worker", configs["serve"]))
        try:
            shaker = Chaos(
                group,
                root,
                mode,
                seed=seed,
                seconds=seconds,
                concurrency=concurrency,
                redis_url=redis_url,
                every=every,
            )
            return await shaker.run(drain)
        finally:
            await reap(group.instances)
            nursery.cancel_scope.cancel()


HEADER = (
    "| shape | seed | s | actions | runs | resumed | events | reconnects | approved writes "
    "| lost | duplicated | problems |\n|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"
)


def parser() -> argparse.ArgumentParser:
    """The command line of `python -m tests.chaos` (docs/reliability.md)."""
    parser = argparse.ArgumentParser(
        prog="python -m tests.chaos", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--mode", choices=["cluster", "single"], default="cluster")
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seeds", default=None, help="comma-separated: one run per seed")
    parser.add_argument("--concurrency", type=int, default=6, help="runs in flight")
    parser.add_argument(
        "--every", default="3,7", help="seconds between two actions: MIN,MAX (random)"
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else [args.seed]
    low, high = (float(x) for x in args.every.split(","))
    every = (low, high)
    failed = False
    print(HEADER, flush=True)
    for seed in seeds:
        root = Path(tempfile.mkdtemp(prefix="chaos-"))
        url = (
            f"{args.redis}?prefix=chaos-{seed}-{int(time.time())}:"
            if args.mode == "cluster"
            else None
        )
        report = trio.run(
            functools.partial(
                chaos,
                args.mode,
                seed=seed,
                seconds=args.seconds,
                root=root,
                redis_url=url,
                concurrency=args.concurrency,
                every=every,
            )
        )
        print(report.row(), flush=True)
        for failure in report.failures:
            print(f"  - failed as documented: {failure}", flush=True)
        for problem in report.problems:
            print(f"  - PROBLEM: {problem}", flush=True)
        failed = failed or bool(report.problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
