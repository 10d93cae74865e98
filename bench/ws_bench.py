"""WebSocket fan-out benchmark: one run to 1 and to 100 clients, and SQLite replay speed.

The server runs in this process; the clients run in a second process (so they do
not share a core with the server), all on loopback. A `talker` agent streams T
text deltas with no delay. Client 0 starts the run with `run`; the others
`subscribe` to it. Each client reports its events/s (events received / time from
its first frame to `end`) and the latency from emission (`ts`) to receipt.

    python -m bench.ws_bench                 # 1 and 100 clients, 100k-event SQLite replay
    python -m bench.ws_bench --deltas 50000 --clients 1 10 100
"""

from __future__ import annotations

import argparse
import functools
import json
import selectors
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import trio
import yaml
from websockets.client import ClientProtocol
from websockets.extensions.permessage_deflate import enable_client_permessage_deflate
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.trio.client import connect
from websockets.uri import parse_uri

from orchestrator.config import load_config
from orchestrator.server.app import RunningServer, serve
from orchestrator.server.heap import settle_heap


class _Stamp(msgspec.Struct):
    ts: float


class _Frame(msgspec.Struct):
    """What the clients read of a frame (msgspec skips the rest: the client measures
    the server, it must not become the bottleneck itself)."""

    op: str
    events: list[_Stamp] = []
    runId: str | None = None
    status: str | None = None


_decode = msgspec.json.Decoder(_Frame).decode


SERVER_OPTIONS: dict[str, Any] = {}
"""Extra `server:` settings for every run (`--no-compression`, `--coalesce-ms`,
`--compression-threshold`)."""


def write_config(
    root: Path, deltas: int, storage: str, delay: float = 0.0, warmup: float = 0.0
) -> Path:
    """A server config whose `talker` waits `warmup` s, then streams `deltas` words."""
    (root / "subagents").mkdir(parents=True, exist_ok=True)
    talker = {
        "description": "streams a lot",
        "instructions": "talk",
        "script": {"token_delay": delay, "turns": [{"say": "w " * deltas, "sleep": warmup}]},
    }
    (root / "subagents" / "talker.yaml").write_text(yaml.safe_dump(talker))
    config = {
        "server": {"host": "127.0.0.1", "port": 0, "max_subscriptions": 4, **SERVER_OPTIONS},
        "storage": storage,
        "models": {"default": {"provider": "scripted"}},
        "subagents_dir": "subagents",
        "limits": {"max_concurrent_runs": 4},
    }
    path = root / "server.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


# -- client side (second process) ---------------------------------------------


class LeanClient:
    """A WebSocket client on websockets' Sans-I/O `ClientProtocol`, for measuring.

    `websockets.trio.client` spends two task switches and a queue per received
    message; with hundreds of connections in one process that, not the server,
    set the measured latency. Here one read hands every frame it holds to the
    protocol at once (framing and permessage-deflate still websockets' own), as a
    browser's native WebSocket does.
    """

    def __init__(self, url: str) -> None:
        self.protocol = ClientProtocol(
            parse_uri(url), extensions=enable_client_permessage_deflate(None), max_size=None
        )
        self.url = url
        self.stream: trio.SocketStream | None = None

    async def __aenter__(self) -> LeanClient:
        uri = parse_uri(self.url)
        self.stream = await trio.open_tcp_stream(uri.host, uri.port)
        self.protocol.send_request(self.protocol.connect())
        await self._flush()
        while not any(isinstance(e, Response) for e in await self._events()):
            pass
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.stream is not None
        await self.stream.aclose()

    async def _flush(self) -> None:
        assert self.stream is not None
        for data in self.protocol.data_to_send():
            if data:
                await self.stream.send_all(data)

    async def _events(self) -> list[Any]:
        assert self.stream is not None
        data = await self.stream.receive_some(1 << 18)
        if not data:
            raise EOFError("the server closed the connection")
        self.protocol.receive_data(data)
        await self._flush()  # pongs
        return self.protocol.events_received()

    async def send(self, text: str) -> None:
        self.protocol.send_text(text.encode())
        await self._flush()

    async def messages(self) -> list[bytes]:
        """The text messages of the next read (at least one)."""
        while True:
            out = [
                bytes(e.data)
                for e in await self._events()
                if isinstance(e, Frame) and e.opcode is Opcode.TEXT
            ]
            if out:
                return out


class Watchers:
    """Many WebSocket clients in one loop over `selectors` (no task per connection).

    With a trio task per connection, 1,000 watchers of one live run cost the
    *client* process a scheduler round of 1,000 tasks per event, and that round,
    not the server, set the measured latency (p50 36 ms where the server had
    written every frame within 3 ms of the event). Here one `select` hands every
    readable socket to its connection's websockets `ClientProtocol` (framing and
    permessage-deflate still websockets' own), as a browser's event loop would.
    """

    def __init__(self, url: str, count: int) -> None:
        uri = parse_uri(url)
        self.conns: list[tuple[socket.socket, ClientProtocol]] = []
        for _ in range(count):
            sock = socket.create_connection((uri.host, uri.port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            protocol = ClientProtocol(
                uri, extensions=enable_client_permessage_deflate(None), max_size=None
            )
            protocol.send_request(protocol.connect())
            self._flush(sock, protocol)
            while not any(isinstance(e, Response) for e in protocol.events_received()):
                protocol.receive_data(sock.recv(1 << 16))
            self.conns.append((sock, protocol))

    @staticmethod
    def _flush(sock: socket.socket, protocol: ClientProtocol) -> None:
        for data in protocol.data_to_send():
            if data:
                sock.sendall(data)

    def send(self, index: int, message: dict[str, Any]) -> None:
        sock, protocol = self.conns[index]
        protocol.send_text(json.dumps(message).encode())
        self._flush(sock, protocol)

    def read(self, index: int) -> list[bytes]:
        """The text messages of one blocking read of one client (setup only)."""
        sock, protocol = self.conns[index]
        protocol.receive_data(sock.recv(1 << 18))
        self._flush(sock, protocol)
        return [
            bytes(e.data)
            for e in protocol.events_received()
            if isinstance(e, Frame) and e.opcode is Opcode.TEXT
        ]

    def serve(self, handle: Callable[[int, bytes, float], bool]) -> None:
        """Read every client until `handle(index, message, now)` said True for each."""
        selector = selectors.DefaultSelector()
        for index, (sock, _) in enumerate(self.conns):
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ, index)
        left = len(self.conns)
        while left:
            for key, _ in selector.select():
                index = key.data
                sock, protocol = self.conns[index]
                data = sock.recv(1 << 18)
                now = time.time()
                if not data:
                    raise EOFError(f"the server closed client {index}")
                protocol.receive_data(data)
                self._flush(sock, protocol)  # pongs
                for event in protocol.events_received():
                    if (
                        isinstance(event, Frame)
                        and event.opcode is Opcode.TEXT
                        and handle(index, bytes(event.data), now)
                    ):
                        selector.unregister(sock)
                        left -= 1

    def close(self) -> None:
        for sock, _ in self.conns:
            sock.close()


def clients_main(url: str, count: int) -> None:
    """Client 0 starts the run, the others subscribe; print what each measured."""
    settle_heap()  # the measuring client must not pause either
    watchers = Watchers(url, count)
    watchers.send(0, {"op": "run", "id": 0, "agent": "talker", "input": "x"})
    early: list[bytes] = []
    run_id = None
    while run_id is None:
        for message in watchers.read(0):
            frame = _decode(message)
            if frame.op == "ack":
                run_id = frame.runId
            else:
                early.append(message)
    for index in range(1, count):
        watchers.send(index, {"op": "subscribe", "id": 0, "runId": run_id})
    counts = [0] * count
    firsts: list[float | None] = [None] * count
    seconds = [0.0] * count
    latencies: list[list[float]] = [[] for _ in range(count)]

    def handle(index: int, raw: bytes, now: float) -> bool:
        frame = _decode(raw)
        if frame.op == "ack":
            return False
        first = firsts[index]
        if first is None:
            firsts[index] = first = now
        if frame.op == "events":
            counts[index] += len(frame.events)
            step = max(1, len(frame.events) // 16)
            latencies[index].extend(now - e.ts for e in frame.events[::step])
        elif frame.op == "end":
            seconds[index] = now - first
            return True
        return False

    for raw in early:
        handle(0, raw, time.time())
    watchers.serve(handle)
    watchers.close()
    print(
        json.dumps(
            [
                {"events": counts[i], "seconds": seconds[i], "latencies": latencies[i]}
                for i in range(count)
            ]
        )
    )


# -- server side ----------------------------------------------------------------


async def fan_out(deltas: int, clients: int, delay: float = 0.0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        # Paced: the talker waits until every client has subscribed, so the latency
        # measured is that of live events, not of the replay a late subscriber gets.
        warmup = 1 + clients * 0.003 if delay else 0.0
        config = load_config(write_config(Path(tmp), deltas, "memory://", delay, warmup))
        async with trio.open_nursery() as nursery:
            server: RunningServer = await nursery.start(functools.partial(serve, config, port=0))
            settle_heap()  # as `orchestrator serve` does
            proc = await trio.run_process(
                [
                    sys.executable,
                    "-m",
                    "bench.ws_bench",
                    "--client-url",
                    server.url,
                    "--client-count",
                    str(clients),
                ],
                capture_stdout=True,
            )
            await server.shutdown()
    per_client = json.loads(proc.stdout)
    latencies = sorted(x for c in per_client for x in c["latencies"])
    rates = [c["events"] / c["seconds"] for c in per_client if c["seconds"] > 0]
    span = max(c["seconds"] for c in per_client)
    return {
        "clients": clients,
        "events": per_client[0]["events"],
        "per_client_eps": statistics.median(rates),
        "slowest_client_eps": min(rates),
        "aggregate_eps": sum(c["events"] for c in per_client) / span,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
    }


async def sqlite_replay(deltas: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(write_config(Path(tmp), deltas, "sqlite:///journal.db"))
        async with trio.open_nursery() as nursery:
            server: RunningServer = await nursery.start(functools.partial(serve, config, port=0))
            async with connect(server.url, max_size=None) as ws:
                await ws.send(json.dumps({"op": "run", "id": 0, "agent": "talker", "input": "x"}))
                ack = _decode(await ws.recv(decode=False))
                while _decode(await ws.recv(decode=False)).op != "end":
                    pass
            await server.shutdown()
        # A fresh server: nothing of the run is in memory, every event comes from SQLite.
        async with trio.open_nursery() as nursery:
            server = await nursery.start(functools.partial(serve, config, port=0))
            log = server.app.journal.get(ack.runId or "")
            assert not log.entries
            start = time.perf_counter()
            count = 0
            async with connect(server.url, max_size=None) as ws:
                await ws.send(json.dumps({"op": "subscribe", "id": 0, "runId": ack.runId}))
                while True:
                    frame = _decode(await ws.recv(decode=False))
                    count += len(frame.events)
                    if frame.op == "end":
                        break
            elapsed = time.perf_counter() - start
            await server.shutdown()
    return {"events": count, "seconds": elapsed, "eps": count / elapsed}


async def main(args: argparse.Namespace) -> None:
    print(
        f"{'clients':>8}{'events':>9}{'per client ev/s':>17}{'slowest ev/s':>14}"
        f"{'aggregate ev/s':>16}{'p50 ms':>9}{'p99 ms':>9}"
    )
    for clients in args.clients:
        r = await fan_out(args.deltas, clients)
        print(
            f"{r['clients']:>8}{r['events']:>9}{r['per_client_eps']:>17,.0f}"
            f"{r['slowest_client_eps']:>14,.0f}{r['aggregate_eps']:>16,.0f}"
            f"{r['p50_ms']:>9.1f}{r['p99_ms']:>9.1f}"
        )
    print(
        f"\npaced: the agent streams {args.paced_deltas} deltas at one per "
        f"{args.paced_delay * 1000:g} ms (live latency, no backlog)"
    )
    for clients in args.clients:
        r = await fan_out(args.paced_deltas, clients, args.paced_delay)
        print(
            f"{r['clients']:>8}{r['events']:>9}{r['per_client_eps']:>17,.0f}"
            f"{r['slowest_client_eps']:>14,.0f}{r['aggregate_eps']:>16,.0f}"
            f"{r['p50_ms']:>9.1f}{r['p99_ms']:>9.1f}"
        )
    replay = await sqlite_replay(args.replay_deltas)
    print(
        f"\nSQLite replay: {replay['events']:,} events in {replay['seconds']:.2f} s "
        f"= {replay['eps']:,.0f} events/s to one client"
    )


def parser() -> argparse.ArgumentParser:
    """The command line (docs/benchmarks.md shows it; tests/unit/test_doc_examples.py parses it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deltas", type=int, default=100_000)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 100])
    parser.add_argument("--replay-deltas", type=int, default=100_000)
    parser.add_argument("--paced-deltas", type=int, default=3000)
    parser.add_argument("--paced-delay", type=float, default=0.001)
    parser.add_argument("--no-compression", action="store_true", help="server.compression: false")
    parser.add_argument("--coalesce-ms", type=float, default=None, help="server.live_coalesce_ms")
    parser.add_argument(
        "--compression-threshold", type=int, default=None, help="server.compression_threshold"
    )
    parser.add_argument("--client-url", help=argparse.SUPPRESS)
    parser.add_argument("--client-count", type=int, help=argparse.SUPPRESS)
    return parser


if __name__ == "__main__":
    parsed = parser().parse_args()
    if parsed.client_url:
        clients_main(parsed.client_url, parsed.client_count)
    else:
        if parsed.no_compression:
            SERVER_OPTIONS["compression"] = False
        if parsed.coalesce_ms is not None:
            SERVER_OPTIONS["live_coalesce_ms"] = parsed.coalesce_ms
        if parsed.compression_threshold is not None:
            SERVER_OPTIONS["compression_threshold"] = parsed.compression_threshold
        trio.run(main, parsed)
