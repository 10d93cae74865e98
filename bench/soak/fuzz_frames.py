"""Frame fuzzing: hypothesis makes client messages; the server answers each, stays up.

Hypothesis draws messages shaped like the protocol (known and unknown ops, fields
of every JSON type, deep nesting, huge strings, invalid UTF-8 as binary frames,
non-JSON text). They go over one WebSocket connection to a live server; every
message must get exactly one reply frame (`error` or a normal answer), a `ping`
after each must answer `pong`, and /healthz must stay 200.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.trio.client import connect

from bench.soak.common import row, running_server, talker, write_config

OPS = ["run", "subscribe", "unsubscribe", "cancel", "send", "runs", "agents", "ping", "fly"]
FIELDS = [
    "op",
    "id",
    "agent",
    "input",
    "runId",
    "afterSeq",
    "filter",
    "detail",
    "sub",
    "message",
    "agentKey",
    "stream",
    "limit",
    "before",
    "x",
]

json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=50),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5)
    ),
    max_leaves=20,
)
message = st.one_of(
    st.fixed_dictionaries(
        {"op": st.sampled_from(OPS)}, optional={f: json_value for f in FIELDS if f != "op"}
    ),
    st.dictionaries(st.sampled_from(FIELDS), json_value, max_size=6),
    json_value,
)
frame = st.one_of(
    message.map(json.dumps),
    st.text(max_size=200),
    st.binary(max_size=200),
    st.integers(1, 5000).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 400).map(
        lambda n: json.dumps(
            {"op": "subscribe", "runId": "r", "filter": {"pathGlob": "*" * n + "Z"}}
        )
    ),
)


def draw_frames(count: int) -> list[str | bytes]:
    frames: list[str | bytes] = []

    @settings(max_examples=count, database=None, suppress_health_check=list(HealthCheck))
    @given(frame)
    def collect(value: str | bytes) -> None:
        frames.append(value)

    collect()
    return frames


async def main(count: int = 3000) -> list[str]:
    frames = draw_frames(count)
    root = Path(tempfile.mkdtemp())
    config = write_config(root, {"talker": talker(50)})
    replies: dict[str, int] = {}
    started = time.perf_counter()
    async with running_server(config) as server, httpx.AsyncClient() as http:
        async with connect(server.url, max_size=None) as ws:
            for n, item in enumerate(frames):
                await ws.send(item)
                answered = False
                while True:  # skip event frames of runs the fuzzer started
                    reply: dict[str, Any] = json.loads(await ws.recv())
                    if reply["op"] in ("events", "end", "gap", "result"):
                        continue
                    if not answered:
                        key = reply["op"] if reply["op"] != "error" else f"error {reply['code']}"
                        replies[key] = replies.get(key, 0) + 1
                        answered = True
                        await ws.send(json.dumps({"op": "ping", "id": f"p{n}"}))
                        continue
                    if reply == {"op": "pong", "id": f"p{n}"}:
                        break
        health = (await http.get(f"http://127.0.0.1:{server.port}/healthz")).status_code
        internal = replies.get("error internal", 0)
    elapsed = time.perf_counter() - started
    kinds = ", ".join(f"{k}: {v}" for k, v in sorted(replies.items()))
    return [
        row("frames", "replies by kind", "internal errors", "/healthz after", "seconds"),
        row("---:", ":-", "---:", ":-:", "---:"),
        row(f"{len(frames):,}", kinds, internal, health, f"{elapsed:.1f}"),
    ]
