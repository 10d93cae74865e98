"""`orchestrator watch`: follow a run on a server, reconnecting and resuming by seq."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import msgspec
import trio
from rich.console import Console
from rich.live import Live
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
from websockets.trio.client import connect

from orchestrator.cli.render import render_tree
from orchestrator.core.events import Event, encode_event
from orchestrator.core.filters import FilterSpec
from orchestrator.core.tree import TreeView
from orchestrator.protocol import End, ErrorFrame, Events, Gap, Subscribe, decode_server_frame

__all__ = ["WatchResult", "check_url", "follow", "watch_main"]


class WatchResult(msgspec.Struct):
    """How watching ended: the run's status, or an error from the server."""

    status: str | None = None
    error: str | None = None
    reconnects: int = 0


def check_url(url: str) -> str | None:
    """What is wrong with a `--url` (None: fine)."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme in ("ws", "wss"):
        return None
    if scheme in ("http", "https"):
        fixed = "ws" + url[4:] if scheme == "http" else "wss" + url[5:]
        return f"--url must be a WebSocket URL, not {scheme}:// (try {fixed})"
    return f"--url must look like ws://HOST:PORT/ws (got {url!r})"


async def follow(
    url: str,
    run_id: str,
    on_events: Callable[[list[Event]], None],
    *,
    token: str | None = None,
    origin: str | None = None,
    filter: dict[str, Any] | None = None,
    after_seq: int = 0,
    give_up_after: float = 60.0,
    on_reconnect: Callable[[int, BaseException, bool], None] | None = None,
) -> WatchResult:
    """Subscribe to a run and feed its events to `on_events` until its `end`.

    A dropped connection is retried with backoff; the new subscription asks for
    `afterSeq` = the last seq received, so nothing is lost or repeated. After
    `give_up_after` seconds without a working connection it gives up.
    `on_reconnect(attempt, error, ever_connected)` is told about each retry.
    """
    cursor = after_seq
    reconnects = 0
    connected = False
    last_ok = trio.current_time()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if origin:
        headers["Origin"] = origin
    spec = msgspec.convert(filter, FilterSpec) if filter else None
    while True:
        try:
            async with connect(url, additional_headers=headers or None, max_size=None) as ws:
                connected = True
                last_ok = trio.current_time()
                request = Subscribe(
                    op="subscribe", id=1, run_id=run_id, after_seq=cursor, filter=spec
                )
                await ws.send(msgspec.json.encode(request).decode())
                while True:  # recv(), not `async for`: leaving early needs no cleanup
                    frame = decode_server_frame(await ws.recv())
                    last_ok = trio.current_time()
                    if isinstance(frame, Events):
                        if frame.events:
                            cursor = frame.events[-1].seq
                            on_events(frame.events)
                    elif isinstance(frame, End):
                        return WatchResult(status=frame.status, reconnects=reconnects)
                    elif isinstance(frame, ErrorFrame):
                        return WatchResult(
                            error=f"{frame.code}: {frame.message}", reconnects=reconnects
                        )
                    elif isinstance(frame, Gap):
                        cursor = max(cursor, frame.to_seq)
        except InvalidStatus as exc:
            status = exc.response.status_code
            if status in (401, 403, 404):
                why = {401: "a valid --token is needed", 403: "this origin is refused"}
                return WatchResult(
                    error=f"HTTP {status} from {url}: {why.get(status, 'not found')}",
                    reconnects=reconnects,
                )
            failure: BaseException = exc
        except (ConnectionClosed, OSError, InvalidURI, InvalidHandshake) as exc:
            failure = exc
        waited = trio.current_time() - last_ok
        if waited >= give_up_after:
            what = "connection lost" if connected else "could not connect"
            return WatchResult(
                error=f"{what}: {url}: {failure} (gave up after {give_up_after:g} s)",
                reconnects=reconnects,
            )
        reconnects += 1
        if on_reconnect is not None:
            on_reconnect(reconnects, failure, connected)
        delay = min(10.0, 0.25 * 2 ** min(reconnects, 6), give_up_after - waited)
        await trio.sleep(max(delay, 0.0))


async def watch_main(
    url: str,
    run_id: str,
    *,
    token: str | None,
    filter: dict[str, Any] | None,
    after_seq: int,
    json_lines: bool,
    origin: str | None = None,
    give_up_after: float = 60.0,
) -> int:
    """The `watch` command: draw the live tree (or print JSON lines); exit by the run's status."""
    console = Console()

    def note(n: int, exc: BaseException, ever_connected: bool) -> None:
        what = "connection lost" if ever_connected else "could not connect"
        print(f"{what} ({exc}); retrying (attempt {n})…", file=sys.stderr)

    common: dict[str, Any] = {
        "token": token,
        "origin": origin,
        "filter": filter,
        "after_seq": after_seq,
        "give_up_after": give_up_after,
        "on_reconnect": note,
    }

    if json_lines:
        out = sys.stdout.buffer

        def print_events(events: list[Event]) -> None:
            out.write(b"".join(encode_event(e) + b"\n" for e in events))
            out.flush()

        result = await follow(url, run_id, print_events, **common)
    else:
        view = TreeView()
        with Live(render_tree(view, console.width), console=console, refresh_per_second=12) as live:

            def draw(events: list[Event]) -> None:
                for event in events:
                    view.apply(event)
                live.update(render_tree(view, console.width))

            result = await follow(url, run_id, draw, **common)
        if result.status is not None and view.result:
            console.print()
            console.print(view.result, markup=False, highlight=False)
    if result.error is not None:
        print(f"error: {result.error}", file=sys.stderr)
        return 2
    return {"completed": 0, "cancelled": 130}.get(result.status or "", 1)
