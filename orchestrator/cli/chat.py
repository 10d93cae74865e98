"""`orchestrator chat | runs | threads | triggers | webhooks`: a conversation with a
server's agent, the runs and threads a token has, the server's triggers and outbox
(docs/threads.md, docs/triggers.md, docs/webhooks.md, docs/cli.md)."""

from __future__ import annotations

import datetime
import functools
import sys
import time
import zoneinfo
from collections.abc import Awaitable
from typing import Literal, TypeVar

import msgspec
import trio

from orchestrator.cli.watch import refusal, watch_main
from orchestrator.client import Client, ClientError
from orchestrator.core.threads import new_thread_id

__all__ = ["chat_main", "runs_main", "threads_main", "triggers_main", "webhooks_main"]

T = TypeVar("T")


async def chat_main(
    url: str,
    agent: str,
    *,
    token: str | None,
    origin: str | None = None,
    thread_id: str | None = None,
    give_up_after: float = 60.0,
) -> int:
    """Each line of standard input is the next run of one thread (`thread_id`, or a new
    one), followed as `watch` follows a run: the live tree, then the answer. An empty
    line or the end of input ends the chat (exit 0); a refusal ends it (1), and so
    does a server that cannot be reached (2)."""
    thread = thread_id or new_thread_id()
    print(f"thread {thread} (an empty line ends the chat)", file=sys.stderr, flush=True)
    client = Client(url, token=token, origin=origin, give_up_after=give_up_after)
    lines = trio.wrap_file(sys.stdin)
    while text := (await lines.readline()).strip():
        try:
            run_id = await client.start(agent, text, thread_id=thread)
        except ClientError as exc:
            message, refused = refusal(exc)
            print(f"error: {message}", file=sys.stderr)
            return 1 if refused else 2
        status = await watch_main(
            url,
            run_id,
            token=token,
            filter=None,
            after_seq=0,
            json_lines=False,
            origin=origin,
            give_up_after=give_up_after,
        )
        if status == 2:
            return 2
    return 0


async def _asked(request: Awaitable[T]) -> T | int:
    """The server's answer, or the exit code after saying why there is none (1: it
    refused; 2: it could not be reached)."""
    try:
        return await request
    except ClientError as exc:
        message, refused = refusal(exc)
        print(f"error: {message}", file=sys.stderr)
        return 1 if refused else 2


async def runs_main(
    url: str, *, token: str | None, origin: str | None = None, limit: int, as_json: bool
) -> int:
    """The token's runs, newest first: one line each, or one JSON array."""
    page = await _asked(Client(url, token=token, origin=origin).runs(limit=limit))
    if isinstance(page, int):
        return page
    if as_json:
        print(msgspec.json.encode(page.runs).decode())
        return 0
    for run in page.runs:
        thread = f"  {run.thread_id}" if run.thread_id else ""
        print(f"{run.run_id}  {run.status:<11} {run.agent_id:<12} {_when(run.created_at)}{thread}")
        print(f"    {run.input[:100]}")
    if not page.runs:
        print("no runs")
    return 0


async def triggers_main(
    url: str,
    action: Literal["list", "pause", "resume", "fire"],
    name: str | None,
    *,
    token: str | None,
    origin: str | None = None,
    as_json: bool,
) -> int:
    """The server's triggers (after pausing, resuming or firing one): a line each."""
    listed = await _asked(Client(url, token=token, origin=origin).triggers(action, name))
    if isinstance(listed, int):
        return listed
    if as_json:
        print(msgspec.json.encode(listed).decode())
        return 0
    for t in listed:
        at = functools.partial(_zoned, zone=t.timezone)
        upcoming = "paused" if t.paused or t.next_at is None else f"next {at(t.next_at)}"
        print(f"{t.name:<20} {t.agent:<12} {t.schedule:<28} {upcoming}")
        if t.last_fired_at is not None:
            run = f" {t.last_run}" if t.last_run else ""
            print(f"    last {at(t.last_fired_at)}: {t.last_outcome}{run}")
    if not listed:
        print("no triggers")
    return 0


async def webhooks_main(
    url: str,
    redeliver: str | None,
    *,
    token: str | None,
    origin: str | None = None,
    as_json: bool,
) -> int:
    """The outbox: the server's webhooks, deliveries waiting, dead ones (after
    redelivering one, or `all`)."""
    reply = await _asked(Client(url, token=token, origin=origin).webhooks(redeliver))
    if isinstance(reply, int):
        return reply
    if as_json:
        print(msgspec.json.encode(reply).decode())
        return 0
    if reply.redelivered is not None:
        print(f"redelivered {reply.redelivered}")
    for name, spec in reply.webhooks.items():
        print(f"{name:<20} {spec.url}  {', '.join(spec.events or ['every event'])}")
    if not reply.webhooks:
        print("no webhooks configured")
    print(f"{reply.waiting} waiting, {len(reply.dead)} dead")
    for d in reply.dead:
        print(f"  {d.id}  {d.type} of {d.run_id} seq {d.seq} to {d.webhook}")
        print(f"    {d.attempts} attempts, last: {d.last_error}")
    return 0


async def threads_main(
    url: str,
    thread_id: str | None,
    *,
    token: str | None,
    origin: str | None = None,
    as_json: bool,
) -> int:
    """The token's threads (most recently active first), or one thread's runs."""
    threads = await _asked(Client(url, token=token, origin=origin).threads(thread_id))
    if isinstance(threads, int):
        return threads
    if as_json:
        print(msgspec.json.encode(threads).decode())
        return 0
    for thread in threads:
        running = f"  running {thread.running}" if thread.running else ""
        print(
            f"{thread.thread_id}  {len(thread.runs)} runs  {_when(thread.last_activity)}{running}"
        )
        print(f"    {thread.first_input[:100]}")
        for run in thread.detail or ():
            print(f"    {run.run_id}  {run.status:<11} {run.input[:80]}")
    if not threads:
        print("no threads")
    return 0


def _zoned(ts: float, zone: str) -> str:
    """`ts` in the time zone `zone` (a trigger's), saying which: `2026-12-08 03:00:00
    CET (Europe/Berlin)`; UTC as `… UTC`."""
    try:
        tz: datetime.tzinfo = zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        tz, zone = datetime.UTC, "UTC"
    shown = datetime.datetime.fromtimestamp(ts, tz).strftime("%Y-%m-%d %H:%M:%S %Z")
    return shown if zone in ("UTC", "Etc/UTC") else f"{shown} ({zone})"


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
