"""`orchestrator watch`: follow a run on a server, reconnecting and resuming by seq."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import msgspec
from rich.console import Console
from rich.live import Live

from orchestrator.cli.render import render_tree
from orchestrator.client import Client, ClientError
from orchestrator.core.events import Event, encode_event
from orchestrator.core.threads import Multitask
from orchestrator.core.tree import TreeView

__all__ = ["WatchResult", "check_url", "follow", "refusal", "start_main", "watch_main"]


class WatchResult(msgspec.Struct):
    """How watching ended: the run's status, or an error from the server."""

    status: str | None = None
    error: str | None = None
    reconnects: int = 0


def refusal(exc: ClientError, token_hint: str = "--token") -> tuple[str, bool]:
    """How a client command says `exc` (without `error: `), and whether the server
    itself refused the request (exit 1) rather than not being reached or letting the
    connection in (exit 2). An unreachable server, a token no header can carry and an
    HTTP refusal say it all in their message; a refusal names the option to fix."""
    if exc.code in ("unreachable", "bad_token") or exc.message.startswith("HTTP"):
        return exc.message.replace("a valid token", f"a valid {token_hint}"), False
    return f"{exc.code}: {exc.message}", True


def check_url(url: str) -> str | None:
    """What is wrong with a `--url` (None: fine)."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme in ("ws", "wss"):
        return None
    if scheme in ("http", "https"):
        where = url.partition("://")[2].partition("/")[0]  # (the WebSocket is at /ws)
        fixed = f"{'ws' if scheme == 'http' else 'wss'}://{where}/ws"
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
    """Follow a run with the typed client (`orchestrator.client`), feeding its events to
    `on_events` until its `end`; a dropped connection is resumed by seq, and after
    `give_up_after` seconds without one it gives up."""
    try:
        client = Client(url, token=token, origin=origin, give_up_after=give_up_after)
        async with client.follow_batches(
            run_id, filter=filter, after_seq=after_seq, on_reconnect=on_reconnect
        ) as batches:
            async for batch in batches:
                on_events(batch)
    except ClientError as exc:
        return WatchResult(error=refusal(exc)[0])
    ended = client.ended
    assert ended is not None
    return WatchResult(status=ended.status, reconnects=ended.reconnects)


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
        live: Live | None = None  # drawn from the first events: none for an unknown run

        def draw(events: list[Event]) -> None:
            nonlocal live
            for event in events:
                view.apply(event)
            if live is None:
                live = Live(console=console, refresh_per_second=12)
                live.start()
            live.update(render_tree(view, console.width))

        try:
            result = await follow(url, run_id, draw, **common)
        finally:
            if live is not None:
                live.stop()
        if result.status is not None and view.result:
            console.print()
            console.print(view.result, markup=False, highlight=False)
    if result.error is not None:
        print(f"error: {result.error}", file=sys.stderr)
        return 2
    return {"completed": 0, "cancelled": 130}.get(result.status or "", 1)


async def start_main(
    url: str,
    agent: str,
    task: str,
    *,
    token: str | None,
    origin: str | None = None,
    follow: bool = False,
    json_lines: bool = False,
    give_up_after: float = 60.0,
    thread_id: str | None = None,
    multitask: Multitask = "reject",
    output_schema: dict[str, Any] | None = None,
) -> int:
    """The `start` command: start a run on the server (in the thread `thread_id`, with
    `multitask`). Without `follow`, print its runId (stdout holds nothing else, for
    `RUN=$(orchestrator start …)`); with it, say the runId on stderr and follow the run
    as `watch` does, exiting by its status."""
    try:
        client = Client(url, token=token, origin=origin, give_up_after=give_up_after)
        run_id = await client.start(
            agent, task, thread_id=thread_id, multitask=multitask, output_schema=output_schema
        )
    except ClientError as exc:
        message, refused = refusal(exc)
        print(f"error: {message}", file=sys.stderr)
        return 1 if refused else 2
    return await _then_follow(
        url,
        run_id,
        f"started {run_id}",
        token=token,
        origin=origin,
        follow=follow,
        json_lines=json_lines,
        give_up_after=give_up_after,
    )


async def fork_main(
    url: str,
    run_id: str,
    at_seq: int,
    *,
    token: str | None,
    origin: str | None = None,
    agent_key: str | None = None,
    message: str | None = None,
    replay: bool = False,
    follow: bool = True,
    json_lines: bool = False,
    give_up_after: float = 60.0,
) -> int:
    """The `fork` command: fork a run at one of its events (docs/fork.md), then follow
    the fork as `watch` does (its tree begins as the original's stood at `at_seq`);
    with `follow=False`, print its runId only."""
    try:
        client = Client(url, token=token, origin=origin, give_up_after=give_up_after)
        fork_id = await client.fork(
            run_id, at_seq, agent_key=agent_key, message=message, replay=replay
        )
    except ClientError as exc:
        why, refused = refusal(exc)
        print(f"error: {why}", file=sys.stderr)
        return 1 if refused else 2
    return await _then_follow(
        url,
        fork_id,
        f"forked {run_id} at seq {at_seq}: {fork_id}",
        token=token,
        origin=origin,
        follow=follow,
        json_lines=json_lines,
        give_up_after=give_up_after,
    )


async def _then_follow(
    url: str,
    run_id: str,
    said: str,
    *,
    token: str | None,
    origin: str | None,
    follow: bool,
    json_lines: bool,
    give_up_after: float,
) -> int:
    """A run was started: print its runId (stdout holds nothing else), or say `said`
    on stderr and follow it to its end, exiting by its status."""
    if not follow:
        print(run_id, flush=True)
        return 0
    print(said, file=sys.stderr, flush=True)
    return await watch_main(
        url,
        run_id,
        token=token,
        filter=None,
        after_seq=0,
        json_lines=json_lines,
        origin=origin,
        give_up_after=give_up_after,
    )
