"""The front door under a flood of half-sent request lines: how quickly `/healthz` and a
`/ws` handshake are answered meanwhile.

An `orchestrator serve` process (the demo config, memory storage) is started; this
process opens N connections that each send half a request line and then nothing, and
meanwhile (from 0.2 s after the flood begins) takes S samples of `GET /healthz` and of
a `/ws` handshake, one after the other, each given at most 2 s. Prints how many
answered in time, and their latencies.

    python -m bench.front_flood                    # 2,000 half-sent lines, 10 samples
    python -m bench.front_flood --flood 2000 --samples 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio
import yaml
from websockets.trio.client import connect

REPO = Path(__file__).resolve().parent.parent


async def sample(port: int, samples: int) -> list[float | None]:
    """Latencies of `samples` /healthz requests and /ws handshakes (None: over 2 s)."""
    out: list[float | None] = []
    head = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    for n in range(samples):
        began = time.perf_counter()
        with trio.move_on_after(2) as late:
            if n % 2:
                async with connect(f"ws://127.0.0.1:{port}/ws", open_timeout=None):
                    pass
            else:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                await stream.send_all(head)
                got = b""
                while b"\r\n\r\n" not in got and (chunk := await stream.receive_some()):
                    got += chunk
                await stream.aclose()
        out.append(None if late.cancelled_caught else time.perf_counter() - began)
        await trio.sleep(0.1)
    return out


async def main(flood: int, samples: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = {
            "server": {"host": "127.0.0.1", "port": 0},
            "storage": "memory://",
            "models": {"default": {"provider": "scripted"}},
            "subagents_dir": str(REPO / "configs" / "subagents"),
        }
        (root / "server.yaml").write_text(yaml.safe_dump(config))
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "orchestrator", "serve", "--config", str(root / "server.yaml")],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert proc.stdout is not None
        line = b""
        while b"\n" not in line:
            line += await proc.stdout.receive_some()
        port = int(line.split(b"listening on ws://127.0.0.1:")[1].split(b"/")[0])
        try:
            held: list[trio.SocketStream] = []

            async def flooding() -> None:
                while len(held) < flood:
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                    await stream.send_all(b"GET /ws HT")
                    held.append(stream)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(flooding)
                await trio.sleep(0.2)
                got = await sample(port, samples)
                nursery.cancel_scope.cancel()
            for stream in held:
                await trio.aclose_forcefully(stream)
        finally:
            proc.terminate()
            await proc.wait()
    answered = [t for t in got if t is not None]
    print(f"{flood} half-sent request lines: {len(answered)} of {samples} answered within 2 s")
    if answered:
        print(
            f"  latency: median {statistics.median(answered) * 1000:.1f} ms, "
            f"max {max(answered) * 1000:.1f} ms"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flood", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=10)
    options = parser.parse_args()
    trio.run(main, options.flood, options.samples)
