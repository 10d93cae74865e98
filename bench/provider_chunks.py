"""What one provider chunk costs to read: TLS, HTTP, SSE and the normalizer, all in.

The fake provider (bench/fake_provider.py) runs in a process of its own and streams
`--chunks` chunks (one SSE event and one write each; over HTTPS, one TLS record
each), in OpenAI's Chat Completions dialect or, with `--provider anthropic`, in
Anthropic's Messages dialect. This process reads them through the real provider
stack (`OpenAIProvider` or `AnthropicProvider`: httpx, `post_sse`, the SSE decoder,
the dialect's normalizer) and reports the CPU time of this process per chunk:

- at full speed (the provider writes as fast as it can, so a read holds many chunks);
- paced at `--paced-rate` chunks a second (about one chunk per read, as real streams
  arrive).

With `--profile`, the CPU of the full-speed read is broken down by where it is spent
(cProfile's own time, by module).

    .venv/bin/python -m bench.provider_chunks --https
    .venv/bin/python -m bench.provider_chunks            # plain HTTP
    .venv/bin/python -m bench.provider_chunks --https --provider anthropic
    .venv/bin/python -m bench.provider_chunks --https --stack httpcore  # as before
    .venv/bin/python -m bench.provider_chunks --https --stack floor     # trio alone
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import ssl
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import httpx
import trio

from agents.core.messages import ModelRequest, TextDelta, UserMessage
from agents.model_config import ModelConfig
from agents.providers.anthropic import AnthropicProvider
from agents.providers.openai_chat import OpenAIProvider
from agents.providers.transport import StreamTransport

REPO = Path(__file__).resolve().parent.parent


def start_provider(
    root: Path, pace: float, chunks: int, https: bool
) -> tuple[subprocess.Popen[bytes], str]:
    """The fake provider in a process of its own; it and its URL."""
    command = [
        sys.executable,
        "-m",
        "bench.fake_provider",
        str(pace),
        str(chunks),
        "1",
        "https" if https else "http",
    ]
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    return proc, line.split("listening on ")[1].split()[0]


def client_of(stack: str, root: Path, https: bool) -> httpx.AsyncClient:
    """The HTTP client: the server's (`stream`: agents/providers/transport.py) or
    httpx's own transport (`httpcore`, what the server used before issue 36)."""
    context = ssl.create_default_context(cafile=str(root / "ca.pem")) if https else None
    if stack == "httpcore":
        return httpx.AsyncClient(verify=context or True)
    return httpx.AsyncClient(transport=StreamTransport(ssl_context=context))


async def read_floor(url: str, root: Path, args: argparse.Namespace) -> tuple[int, int, float]:
    """The floor under any stack: the same response read with trio's own streams
    (`SocketStream`, `SSLStream`) and nothing else, no parsing; as `read_once`."""
    parts = httpx.URL(url)
    stream: trio.abc.Stream = await trio.open_tcp_stream(parts.host, parts.port or 80)
    if args.https:
        context = ssl.create_default_context(cafile=str(root / "ca.pem"))
        stream = trio.SSLStream(stream, context, server_hostname=parts.host)
    body = b'{"model":"paced","messages":[{"role":"system","content":"ROLE: leaf"},'
    body += b'{"role":"user","content":"talk"}],"stream":true}'
    path = b"/messages" if args.provider == "anthropic" else b"/chat/completions"
    await stream.send_all(
        b"POST %s%s HTTP/1.1\r\nHost: %s\r\ncontent-type: application/json"
        b"\r\ncontent-length: %d\r\n\r\n%s"
        % (parts.raw_path.rstrip(b"/"), path, parts.host.encode(), len(body), body)
    )
    reads = 0
    started = time.process_time()
    while (data := await stream.receive_some(65536)) and not data.endswith(b"0\r\n\r\n"):
        reads += 1
    cpu = time.process_time() - started
    await trio.aclose_forcefully(stream)
    return args.chunks, reads, cpu


async def read_once(url: str, root: Path, args: argparse.Namespace) -> tuple[int, int, float]:
    """Chunks read, the batches the provider yielded them in (one per read of the
    response), and this process's CPU s."""
    if args.stack == "floor":
        return await read_floor(url, root, args)
    config = ModelConfig(provider=args.provider, base_url=url, model="paced", read_timeout=60)
    request = ModelRequest(system="ROLE: leaf", messages=(UserMessage(text="talk"),))
    async with client_of(args.stack, root, args.https) as client:
        kind = AnthropicProvider if args.provider == "anthropic" else OpenAIProvider
        provider = kind(config, client)
        count = reads = 0
        started = time.process_time()
        async for batch in provider.stream(request):
            count += sum(1 for part in batch if type(part) is TextDelta)
            reads += 1
        return count, reads, time.process_time() - started


def measure(args: argparse.Namespace, pace: float, profile: bool) -> tuple[float, float]:
    """µs of this process's CPU per chunk read, the median of `--repeat` streams, and
    the chunks a batch held."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        proc, url = start_provider(root, pace, args.chunks, args.https)
        try:
            results, per_batch = [], 0.0
            profiler = cProfile.Profile() if profile else None
            for _ in range(args.repeat):
                if profiler is not None:
                    profiler.enable()
                count, reads, cpu = trio.run(read_once, url, root, args)
                if profiler is not None:
                    profiler.disable()
                assert count == args.chunks, count
                results.append(cpu / count * 1e6)
                per_batch = count / reads
            if profiler is not None:
                breakdown(profiler)
            return sorted(results)[len(results) // 2], per_batch
        finally:
            proc.kill()
            proc.wait()


def breakdown(profiler: cProfile.Profile) -> None:
    """Own time by module (site-packages' by package), largest first."""
    stats = pstats.Stats(profiler)
    by: dict[str, float] = defaultdict(float)
    for (path, _line, name), row in stats.stats.items():  # type: ignore[attr-defined]
        own = row[2]
        if "site-packages/" in path:
            where = path.split("site-packages/")[1].split("/")[0]
        elif path.startswith(str(REPO)):
            where = str(Path(path).relative_to(REPO))
        elif path == "~":
            where = name.split(" of ")[-1].strip("<>'") if " of " in name else name
        else:
            where = Path(path).name
        by[where] += own
    total = sum(by.values())
    for where, own in sorted(by.items(), key=lambda kv: -kv[1])[:14]:
        print(f"    {own / total:5.1%}  {where}")


def parser() -> argparse.ArgumentParser:
    """The command line (docs/benchmarks.md shows it; tests/unit/test_doc_examples.py parses it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--paced-rate", type=float, default=2_000.0, help="chunks/s when paced")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--https", action="store_true")
    parser.add_argument(
        "--provider",
        choices=["openai", "anthropic"],
        default="openai",
        help="the dialect streamed: Chat Completions chunks or Messages events",
    )
    parser.add_argument("--profile", action="store_true", help="where the full-speed CPU goes")
    parser.add_argument(
        "--stack",
        choices=["stream", "httpcore", "floor"],
        default="stream",
        help="the server's transport (default), httpx's own (as before issue 36), or "
        "the floor: trio's streams alone, no HTTP",
    )
    return parser


def main() -> None:
    args = parser().parse_args()
    scheme = f"{args.provider}, {'HTTPS' if args.https else 'HTTP'} ({args.stack})"
    full, held = measure(args, 1e9, False)
    print(f"{scheme}, full speed: {full:.1f} µs a chunk ({held:.1f} chunks a batch)")
    if args.profile:
        measure(args, 1e9, True)  # streams of their own: profiling slows them down
    paced, held = measure(args, args.paced_rate, False)
    print(f"{scheme}, {args.paced_rate:g} chunks/s: {paced:.1f} µs a chunk ({held:.1f} a batch)")


if __name__ == "__main__":
    main()
