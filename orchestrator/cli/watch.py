"""`orchestrator watch`: follow a run on a server, reconnecting and resuming by seq."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import msgspec
import trio
from rich.console import Console
from rich.live import Live
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.trio.client import connect

from orchestrator.cli.render import render_tree
from orchestrator.core.events import Event, encode_event
from orchestrator.core.tree import TreeView

__all__ = ["WatchResult", "follow", "watch_main"]


class _Events(msgspec.Struct, tag_field="op", tag="events"):
    sub: str
    events: list[Event]


class _End(msgspec.Struct, tag_field="op", tag="end", rename="camel"):
    sub: str
    run_id: str
    status: str


class _Gap(msgspec.Struct, tag_field="op", tag="gap", rename="camel"):
    sub: str
    from_seq: int
    to_seq: int


class _Error(msgspec.Struct, tag_field="op", tag="error"):
    code: str
    message: str
    id: Any = None


class _Ack(msgspec.Struct, tag_field="op", tag="ack"):
    id: Any = None
    sub: str | None = None


_decode_frame = msgspec.json.Decoder(_Events | _End | _Gap | _Error | _Ack).decode


class WatchResult(msgspec.Struct):
    """How watching ended: the run's status, or an error from the server."""

    status: str | None = None
    error: str | None = None
    reconnects: int = 0


async def follow(
    url: str,
    run_id: str,
    on_events: Callable[[list[Event]], None],
    *,
    token: str | None = None,
    filter: dict[str, Any] | None = None,
    after_seq: int = 0,
    max_reconnects: int = 20,
    on_reconnect: Callable[[int, BaseException], None] | None = None,
) -> WatchResult:
    """Subscribe to a run and feed its events to `on_events` until its `end`.

    A dropped connection is retried with backoff; the new subscription asks for
    `afterSeq` = the last seq received, so nothing is lost or repeated.
    """
    cursor = after_seq
    reconnects = 0
    headers = {"Authorization": f"Bearer {token}"} if token else None
    request: dict[str, Any] = {"op": "subscribe", "id": 1, "runId": run_id}
    if filter:
        request["filter"] = filter
    while True:
        try:
            async with connect(url, additional_headers=headers, max_size=None) as ws:
                await ws.send(msgspec.json.encode({**request, "afterSeq": cursor}).decode())
                while True:  # recv(), not `async for`: leaving early needs no cleanup
                    frame = _decode_frame(await ws.recv())
                    if isinstance(frame, _Events):
                        if frame.events:
                            cursor = frame.events[-1].seq
                            on_events(frame.events)
                    elif isinstance(frame, _End):
                        return WatchResult(status=frame.status, reconnects=reconnects)
                    elif isinstance(frame, _Error):
                        return WatchResult(
                            error=f"{frame.code}: {frame.message}", reconnects=reconnects
                        )
                    elif isinstance(frame, _Gap):
                        cursor = max(cursor, frame.to_seq)
        except InvalidStatus as exc:
            status = exc.response.status_code
            if status in (401, 403, 404):
                return WatchResult(error=f"HTTP {status} from {url}", reconnects=reconnects)
            failure: BaseException = exc
        except (ConnectionClosed, OSError) as exc:
            failure = exc
        reconnects += 1
        if reconnects > max_reconnects:
            return WatchResult(error=f"gave up after {max_reconnects} reconnects: {failure}")
        if on_reconnect is not None:
            on_reconnect(reconnects, failure)
        await trio.sleep(min(10.0, 0.25 * 2 ** min(reconnects, 6)))


async def watch_main(
    url: str,
    run_id: str,
    *,
    token: str | None,
    filter: dict[str, Any] | None,
    after_seq: int,
    json_lines: bool,
) -> int:
    """The `watch` command: draw the live tree (or print JSON lines); exit by the run's status."""
    console = Console()

    def note(n: int, exc: BaseException) -> None:
        print(f"connection lost ({exc}); reconnecting (attempt {n})…", file=sys.stderr)

    if json_lines:
        out = sys.stdout.buffer

        def print_events(events: list[Event]) -> None:
            out.write(b"".join(encode_event(e) + b"\n" for e in events))
            out.flush()

        result = await follow(
            url,
            run_id,
            print_events,
            token=token,
            filter=filter,
            after_seq=after_seq,
            on_reconnect=note,
        )
    else:
        view = TreeView()
        with Live(render_tree(view, console.width), console=console, refresh_per_second=12) as live:

            def draw(events: list[Event]) -> None:
                for event in events:
                    view.apply(event)
                live.update(render_tree(view, console.width))

            result = await follow(
                url,
                run_id,
                draw,
                token=token,
                filter=filter,
                after_seq=after_seq,
                on_reconnect=note,
            )
        if result.status is not None and view.result:
            console.print()
            console.print(view.result, markup=False, highlight=False)
    if result.error is not None:
        print(f"error: {result.error}", file=sys.stderr)
        return 2
    return {"completed": 0, "cancelled": 130}.get(result.status or "", 1)
