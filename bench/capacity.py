"""How many agents streaming at a model's pace one server carries, with people watching.

For each N (agents streaming at once): a fresh `orchestrator serve` process (its
default SQLite journal, or `--storage`), N/C runs of a root that spawns C children
(`--children`, 4) which each stream `--seconds` × `--pace` words at `--pace` words a
second, the runs starting spread over `--ramp` seconds (2: not all in one instant,
nor all ending in one); one WebSocket watcher per run (it starts the run) plus one all-runs watcher
that does what the console does (`runs` and `pending` every 3 s). The watchers run in
this process — not the server's — on one `selectors` loop (websockets' Sans-I/O
protocol, as bench/ws_bench.py: a task per connection would make the *client* the
bottleneck).

The children's words come from the `scripted` model (`--provider scripted`), or from
a fake provider in a third process (bench/fake_provider.py) speaking OpenAI's Chat
Completions (`--provider openai`) or Anthropic's Messages (`--provider anthropic`)
over SSE, so a real provider's HTTP and SSE parsing are counted; there each word is
the time the fake server wrote it, which is what the latency is measured from. With
`scripted`, it is measured from the event's `ts` (stamped when the scripted model's
word is published: a server that falls behind emits late, which shows as delivered below
offered rather than as latency).

Reported per N: children's deltas delivered/s (over the time from asking for the
first run to the last word received, less the ramp: a server that keeps up takes
`--seconds`) against offered
(N × pace), the watcher latency p50/p99, the server's CPU (of one core, over the
streaming window) and peak RSS, and this client process's CPU (if it nears 100%,
the client, not the server, limits the figures). The knee is the largest N whose
p99 is at most 100 ms.

    python -m bench.capacity                          # 250, 500, 1000 agents; scripted
    python -m bench.capacity --agents 100 200 --provider openai --storage redis://127.0.0.1:6379/5
    python -m bench.capacity --agents 150 250 --provider openai --https   # as users run it
    python -m bench.capacity --agents 150 250 --provider anthropic --https
    python -m bench.capacity --storage redis://127.0.0.1:6379/0 --workers 2   # a cluster
"""

from __future__ import annotations

import argparse
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import yaml
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode

from bench.ws_bench import Watchers

REPO = Path(__file__).resolve().parent.parent
CONSOLE_EVERY = 3.0


class _Source(msgspec.Struct):
    depth: int


class _Event(msgspec.Struct):
    ts: float
    type: str
    source: _Source | None = None
    last: bool = False
    data: dict[str, Any] = {}


class _Frame(msgspec.Struct):
    op: str
    events: list[_Event] = []
    runId: str | None = None
    status: str | None = None


_decode = msgspec.json.Decoder(_Frame).decode


# -- the server's side ------------------------------------------------------------


def write_config(root: Path, args: argparse.Namespace, provider_url: str | None) -> Path:
    words = int(args.seconds * args.pace)
    spawn = {"name": "agent_spawn", "args": {"agent_id": "leaf", "task": "talk"}}
    lead: dict[str, Any] = {
        "description": "spawns the talkers",
        "instructions": "ROLE: lead",
        "tools": ["agent_spawn"],
        "script": {"turns": [{"calls": [spawn] * args.children}, {"say": "done"}]},
    }
    leaf: dict[str, Any] = {
        "description": "talks at a model's pace",
        "instructions": "ROLE: leaf",
        "script": {"token_delay": 1.0 / args.pace, "turns": [{"say": "w " * words}]},
    }
    (root / "subagents").mkdir(parents=True)
    for name, spec in (("lead", lead), ("leaf", leaf)):
        (root / "subagents" / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    model: dict[str, Any] = {"provider": "scripted"}
    if provider_url is not None:
        model = {"provider": args.provider, "base_url": provider_url, "model": "paced"}
        if provider_url.startswith("https:"):
            model["tls"] = {"ca_file": "ca.pem"}
    runs = max(1, args.agents_now // args.children)
    storage: Any = args.storage
    if storage.startswith("redis://"):  # a fresh key prefix; this machine's Redis keeps
        # nothing on disk, so `strict` durability would be refused
        storage = {"url": f"{storage}?prefix={args.prefix}", "durability": "relaxed"}
    config = {
        "server": {
            "host": "127.0.0.1",
            "port": 0,
            "max_connections": runs + 16,
            "max_subscriptions": 4,
        },
        "storage": storage,
        "models": {"default": model},
        "subagents_dir": "subagents",
        "limits": {
            "max_concurrent_runs": runs + 8,
            "max_children": max(16, args.children),
            **({} if args.stall_seconds is None else {"stall_seconds": args.stall_seconds}),
        },
    }
    path = root / "server.yaml"
    path.write_text(yaml.safe_dump(config))
    if args.workers:
        for name, worker in (("server.yaml", False), ("worker.yaml", True)):
            config["cluster"] = {"name": "capacity", "worker": worker, "max_runs": runs}
            (root / name).write_text(yaml.safe_dump(config))
    return path


def drop_prefix(url: str, prefix: str) -> None:
    """Delete the keys a cluster or Redis journal step left under `prefix`."""
    import trio

    from orchestrator.storage.redis import RedisStorage

    logging.getLogger("orchestrator.storage.redis").setLevel(logging.ERROR)  # (its warning)

    async def drop() -> None:
        async with RedisStorage.open(f"{url}?prefix={prefix}", durability="relaxed") as storage:
            client = storage._client
            assert client is not None
            keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
            for start in range(0, len(keys), 1000):
                await client.delete(keys[start : start + 1000])

    trio.run(drop)


def start(
    command: list[str], cwd: Path, ready: str = "listening on"
) -> tuple[subprocess.Popen[bytes], str]:
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if ready not in line:
        raise RuntimeError(f"{command[2:4]} did not start: {line!r}")
    if ready != "listening on":
        return proc, ""
    return proc, line.split("listening on ")[1].split()[0]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


# -- the watchers (this process) ------------------------------------------------------


def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Start the runs, watch them to their ends; what the watchers saw."""
    runs = max(1, args.agents_now // args.children)
    watchers = Watchers(url, runs + 1)
    console = runs  # the last connection: the all-runs watcher
    asked = time.time()
    starts = [asked + args.ramp * index / runs for index in range(runs)]  # (spread out)
    started = 0
    from_text = args.provider != "scripted"
    every = max(1, int(args.pace * args.agents_now // 20_000))  # ≤ ~20k samples/s kept
    lags: list[float] = []
    times: list[float] = []
    counted = 0
    last = 0.0
    ended = 0
    next_console = time.time()
    selector = selectors.DefaultSelector()
    for index, (sock, _) in enumerate(watchers.conns):
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, index)
    while ended < runs:
        now = time.time()
        while started < runs and starts[started] <= now:
            run = {"op": "run", "id": 0, "agent": "lead", "input": f"run {started}"}
            watchers.send(started, run)
            started += 1
        if now >= next_console:
            watchers.send(console, {"op": "runs", "id": 1, "limit": 100})
            watchers.send(console, {"op": "pending", "id": 2})
            next_console = now + CONSOLE_EVERY
        soonest = min(next_console, starts[started] if started < runs else next_console)
        for key, _ in selector.select(timeout=max(0.0, soonest - now)):
            index = key.data
            sock, protocol = watchers.conns[index]
            data = sock.recv(1 << 18)
            now = time.time()
            if not data:
                raise EOFError(f"the server closed watcher {index}")
            protocol.receive_data(data)
            _flush(sock, protocol)
            for event in protocol.events_received():
                if not isinstance(event, Frame) or event.opcode is not Opcode.TEXT:
                    continue
                if index == console:
                    continue
                frame = _decode(event.data)
                if frame.op == "end":
                    ended += 1
                    continue
                for e in frame.events:
                    if e.type != "REASONING" or e.last or e.source is None:
                        continue
                    counted += 1
                    last = now
                    if counted % every == 0:
                        emitted = float(e.data["delta"]) if from_text else e.ts
                        lags.append(now - emitted)
                        times.append(now - asked)
    watchers.close()
    if os.environ.get("CAPACITY_TIMELINE"):
        buckets: dict[int, list[float]] = {}
        for at, lag in zip(times, lags, strict=True):
            buckets.setdefault(int(at), []).append(lag)
        for second, found in sorted(buckets.items()):
            found.sort()
            print(
                f"  {second:3d}s n={len(found):6d} p50 {found[len(found) // 2] * 1000:7.1f} "
                f"p99 {found[int(len(found) * 0.99)] * 1000:7.1f} ms",
                file=sys.stderr,
            )
    lags.sort()
    return {
        "delivered": counted,
        "span": last - asked,  # from the first run asked for to the last word: ideally
        # `ramp` + `seconds`
        "p50_ms": lags[len(lags) // 2] * 1000 if lags else float("nan"),
        "p99_ms": lags[int(len(lags) * 0.99)] * 1000 if lags else float("nan"),
    }


def _flush(sock: socket.socket, protocol: ClientProtocol) -> None:
    for data in protocol.data_to_send():
        if data:
            sock.sendall(data)


def step(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        provider = provider_url = None
        if args.provider != "scripted":
            words = int(args.seconds * args.pace)
            provider, provider_url = start(
                [
                    sys.executable,
                    "-m",
                    "bench.fake_provider",
                    str(args.pace),
                    str(words),
                    str(args.children),
                    "https" if args.https else "http",
                ],
                root,
            )
        args.prefix = f"aor-capacity-{os.getpid()}-{args.agents_now}:"
        config = write_config(root, args, provider_url)
        server, url = start(
            [sys.executable, "-m", "orchestrator", "serve", "--config", str(config)], root
        )
        workers = [
            start(
                [
                    sys.executable,
                    "-m",
                    "orchestrator",
                    "worker",
                    "--config",
                    str(root / "worker.yaml"),
                ],
                root,
                "orchestrator worker",
            )[0]
            for _ in range(args.workers)
        ]
        servers = [server, *workers]
        try:
            time.sleep(0.5)
            cpu0 = [cpu_seconds(p.pid) for p in servers]
            wall0, mine0 = time.time(), time.process_time()
            seen = measure(url, args)
            wall = time.time() - wall0
            cpu = [(cpu_seconds(p.pid) - c) / wall for p, c in zip(servers, cpu0, strict=True)]
            mine = (time.process_time() - mine0) / wall
            rss = [peak_rss_mib(p.pid) for p in servers]
        finally:
            for proc in (*servers, provider):
                if proc is not None:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
            if args.storage.startswith("redis://"):
                drop_prefix(args.storage, args.prefix)
    span = max(seen["span"] - args.ramp * (1 - 1 / max(1, args.agents_now // args.children)), 1e-9)
    return {
        "agents": args.agents_now,
        "offered": args.agents_now * args.pace,
        "delivered_per_s": seen["delivered"] / span,
        "p50_ms": seen["p50_ms"],
        "p99_ms": seen["p99_ms"],
        "server_cpu": cpu,  # per process: the server (or gateway), then the workers
        "server_rss_mib": rss,
        "client_cpu": mine,
    }


def parser() -> argparse.ArgumentParser:
    """The command line (docs/benchmarks.md shows it; tests/unit/test_doc_examples.py parses it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[250, 500, 1000])
    parser.add_argument("--children", type=int, default=4)
    parser.add_argument("--pace", type=float, default=50.0, help="words/s per agent")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each streams")
    parser.add_argument(
        "--ramp", type=float, default=2.0, help="runs start spread over this many seconds"
    )
    parser.add_argument(
        "--provider",
        choices=["scripted", "openai", "anthropic"],
        default="scripted",
        help="where the leaves' words come from: the scripted model, or a fake provider "
        "process speaking OpenAI's Chat Completions or Anthropic's Messages over SSE",
    )
    parser.add_argument("--storage", default="sqlite:///journal.db")
    parser.add_argument(
        "--https",
        action="store_true",
        help="with --provider openai or anthropic: the provider speaks HTTPS (a certificate of "
        "its own "
        "CA, trusted through the model's tls.ca_file)",
    )
    parser.add_argument(
        "--stall-seconds",
        type=float,
        default=None,
        help="limits.stall_seconds of the server (default: the server's own, 60; 0: off)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="cluster mode: a gateway and this many workers on the --storage Redis",
    )
    return parser


def main() -> None:
    args = parser().parse_args()
    print(
        f"provider {args.provider}{' (https)' if args.https else ''}, storage {args.storage}, "
        f"children {args.children}, "
        f"{args.pace:g} words/s each for {args.seconds:g} s"
    )
    head = "| agents | offered/s | delivered/s | p50 ms | p99 ms | server CPU | server RSS MiB |"
    print(head + " client CPU |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    knee = None
    for agents in args.agents:
        args.agents_now = agents
        row = step(args)
        if row["p99_ms"] <= 100:
            knee = agents
        print(
            f"| {agents:,} | {row['offered']:,.0f} | {row['delivered_per_s']:,.0f} "
            f"| {row['p50_ms']:.1f} | {row['p99_ms']:.1f} "
            f"| {' + '.join(f'{c:.0%}' for c in row['server_cpu'])} "
            f"| {' + '.join(f'{r:.0f}' for r in row['server_rss_mib'])} "
            f"| {row['client_cpu']:.0%} |",
            flush=True,
        )
    print(f"knee (largest N with p99 ≤ 100 ms): {knee if knee is not None else 'none'}")


if __name__ == "__main__":
    main()
