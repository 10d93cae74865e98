"""What each `orchestrator` command does (contract §5): `run`, `agents`, `serve`,
`worker`, `start`, `chat`, `fork`, `watch`, `cancel`, `approve`, `runs`, `threads`,
`pending`, `mcp`. `cli/main.py` parses the command line first and imports this only
then: `--help` and a usage error load none of trio, httpx, pydantic or the runtime.
"""

from __future__ import annotations

import argparse
import errno
import functools
import json
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

import msgspec
import trio
from rich.console import Console
from rich.live import Live
from rich.table import Table

from agents.core.structured import check_schema
from agents.errors import SpecError
from agents.schema_files import inline_file_refs
from agents.spec import load_specs
from orchestrator.cli.approver import Mode, TerminalApprover, pausing
from orchestrator.cli.chat import chat_main, runs_main, threads_main, triggers_main, webhooks_main
from orchestrator.cli.control import approve_main, cancel_main, pending_main
from orchestrator.cli.render import render_tree
from orchestrator.cli.watch import check_url, fork_main, start_main, watch_main
from orchestrator.config import ConfigError, ServerConfig, load_config
from orchestrator.core.events import encode_event
from orchestrator.core.tree import TreeView
from orchestrator.runtime.engine import (
    Orchestrator,
    RunStream,
    UnknownAgent,
    builtin_tool_names,
)
from orchestrator.server.app import CannotListen, serve
from orchestrator.server.heap import settle_heap
from orchestrator.storage.base import StorageError
from orchestrator.storage.open import journal_name

__all__ = ["ACCESS_LOGGERS", "run", "task_text"]

DEFAULT_CONFIG = Path("configs/server.yaml")
EXIT_FAILED, EXIT_USAGE, EXIT_CANCELLED = 1, 2, 130
ACCESS_LOGGERS = (
    "orchestrator.server.websockets",  # each connection, handshake and HTTP response
    "mcp.server.streamable_http",  # each /mcp session
    "mcp.server.streamable_http_manager",
    "httpx",  # each model request (`HTTP Request: POST …`), each A2A and remote call
)
"""Loggers that speak once per request: quiet (WARNING) unless `serve --access-log`."""


def _load(config_path: Path | None) -> ServerConfig:
    path = config_path or DEFAULT_CONFIG
    if not path.exists():
        hint = "" if config_path else " (run from the project root or pass --config)"
        raise ConfigError(f"{path}: config file not found{hint}")
    return load_config(path)


async def _watch_signals(stream: RunStream) -> None:
    """First Ctrl-C cancels the run gracefully; the run then reports `cancelled`."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            stream.cancel()


TELEMETRY_NOT_FROM_RUN = (
    "note: `telemetry:` is set, but `orchestrator run` exports no traces (serve and worker "
    "do): to trace this run, start it on a server (orchestrator start AGENT INPUT --follow)"
)


async def _run(args: argparse.Namespace, config: ServerConfig) -> int:
    console = Console(stderr=False)
    if config.telemetry is not None:  # said, not silently skipped
        print(TELEMETRY_NOT_FROM_RUN, file=sys.stderr, flush=True)
    schema = _output_schema(args.output_schema)
    async with Orchestrator.open(config) as orch:
        if args.no_stream:
            called = await orch.call(
                args.agent, args.input, max_depth=args.max_depth, output_schema=schema
            )
            if called.status == "completed":
                print(called.text)
                return 0
            print(f"run {called.status}: {called.error}", file=sys.stderr)
            return EXIT_CANCELLED if called.status == "cancelled" else EXIT_FAILED

        view = TreeView()
        async with (
            orch.stream(
                args.agent, args.input, max_depth=args.max_depth, output_schema=schema
            ) as stream,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(_watch_signals, stream)
            approver = TerminalApprover(stream, _approval_mode(args))
            nursery.start_soon(approver.run)
            try:
                if args.json:
                    out = sys.stdout.buffer
                    try:
                        async for batch in stream.batches():
                            out.write(b"".join(encode_event(e) + b"\n" for e in batch))
                            out.flush()
                            for event in batch:
                                approver.see(event)
                    except BrokenPipeError:  # `| head`: stop the run, exit quietly
                        stream.cancel()
                        # Point stdout at /dev/null so the exit-time flush stays quiet.
                        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                        return 0
                else:
                    with Live(
                        render_tree(view, console.width),
                        console=console,
                        refresh_per_second=12,
                        transient=False,
                    ) as live:
                        approver.pause = pausing(live)
                        async for batch in stream.batches():
                            for event in batch:
                                view.apply(event)
                                approver.see(event)
                            live.update(render_tree(view, console.width))
            finally:
                nursery.cancel_scope.cancel()
        result = stream.result
        if result is None:  # pragma: no cover - the run always sets it
            return EXIT_FAILED
        if not args.json and result.status == "completed" and result.text is not None:
            console.print()
            console.print(result.text, markup=False, highlight=False)
        if result.status == "completed":
            return 0
        return EXIT_CANCELLED if result.status == "cancelled" else EXIT_FAILED


def _approval_mode(args: argparse.Namespace) -> Mode:
    if args.approve_all:
        return "approve"
    if args.deny_all:
        return "deny"
    return "ask" if sys.stdin.isatty() else "no-terminal"


def _agents(config: ServerConfig) -> int:
    specs = load_specs(
        config.subagents_path,
        models=config.models,
        tools=builtin_tool_names(),
        mcp_servers=config.mcp_servers,  # as `run` and `serve` accept them
    )
    table = Table(title=f"subagents in {config.subagents_path}")
    for column in ("id", "name", "model", "tools", "description"):
        table.add_column(column)
    for spec in specs.values():
        table.add_row(
            spec.id,
            spec.display_name,
            spec.model,
            ", ".join(spec.tools) or "-",
            " ".join(spec.description.split()),
        )
    Console().print(table)
    return 0


async def _worker(config: ServerConfig) -> int:
    from orchestrator.cluster.node import run_worker  # (the Redis client: workers only)

    async with trio.open_nursery() as nursery:
        node = await nursery.start(functools.partial(run_worker, config))
        settle_heap()
        assert node.worker is not None
        print(
            f"orchestrator worker {node.worker.name} in cluster {node.config.name!r} "
            f"(storage: {journal_name(node.store.storage, config.storage.url)})",
            flush=True,
        )
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                print(
                    f"{signal.Signals(signum).name}: handing runs over and stopping…",
                    file=sys.stderr,
                    flush=True,
                )
                with trio.move_on_after(config.server.shutdown_timeout):
                    await node.stop()
                nursery.cancel_scope.cancel()
                break
    return 0


async def _serve(config: ServerConfig, host: str | None, port: int | None) -> int:
    async with trio.open_nursery() as nursery:
        server = await nursery.start(functools.partial(serve, config, host=host, port=port))
        settle_heap()
        storage = journal_name(server.app.journal.storage, config.storage.url)
        print(f"orchestrator listening on {server.url} (storage: {storage})", flush=True)
        print(f"console: {console_url(server.url)}", flush=True)
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                print(f"{signal.Signals(signum).name}: shutting down…", file=sys.stderr, flush=True)
                await server.shutdown()
                break
    return 0


def console_url(ws_url: str) -> str:
    """The console's address for the server listening at `ws_url` (ws://H:P/ws): the
    same host and port over HTTP; a server bound to every address is opened on
    loopback."""
    scheme, rest = ws_url.split("://", 1)
    hostport = rest.split("/", 1)[0]
    for wildcard, loopback in (("0.0.0.0:", "127.0.0.1:"), ("[::]:", "[::1]:")):
        if hostport.startswith(wildcard):
            hostport = loopback + hostport.removeprefix(wildcard)
    return f"{'https' if scheme == 'wss' else 'http'}://{hostport}/"


def _watch_url(args: argparse.Namespace) -> str:
    """Where a client command connects: `--url`, else `$ORCHESTRATOR_URL`, else the
    server address of `--config`, else of configs/server.yaml, else the default. Told
    on stderr when nothing named it (`--url`, `$ORCHESTRATOR_URL`, `--config`)."""
    for given, name in ((args.url, "--url"), (os.environ.get("ORCHESTRATOR_URL"), None)):
        if given:
            problem = check_url(given)
            if problem is not None:
                raise ConfigError(problem if name else "$ORCHESTRATOR_URL: " + problem[6:])
            return str(given)
    path = args.config or DEFAULT_CONFIG
    if args.config is None and not path.exists():
        url, origin = "ws://127.0.0.1:8765/ws", "the default"
    else:
        server = _load(args.config).server
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(server.host, server.host)
        if ":" in host:
            host = f"[{host}]"
        url, origin = f"ws://{host}:{server.port}/ws", f"server.host/port of {path}"
    if args.config is None:
        print(
            f"connecting to {url} ({origin}; --url or $ORCHESTRATOR_URL to choose)",
            file=sys.stderr,
            flush=True,
        )
    return url


def _watch(args: argparse.Namespace) -> int:
    url = _watch_url(args)
    if args.give_up_after <= 0:
        raise ConfigError("--give-up-after must be more than 0")
    flt: dict[str, object] = {}
    if args.max_depth is not None:
        flt["maxDepth"] = args.max_depth
    if args.path_prefix is not None:
        flt["pathPrefix"] = args.path_prefix
    return trio.run(
        functools.partial(
            watch_main,
            url,
            args.run_id,
            token=args.token or os.environ.get("ORCHESTRATOR_TOKEN") or None,
            origin=args.origin,
            filter=flt or None,
            after_seq=args.after_seq,
            json_lines=args.json,
            give_up_after=args.give_up_after,
        )
    )


_USAGE_ERRORS = (CannotListen, ConfigError, SpecError, StorageError, UnknownAgent)


def _usage_error(exc: BaseException) -> BaseException | None:
    """The configuration/start-up error inside `exc` (trio wraps it in groups), if any."""
    if isinstance(exc, _USAGE_ERRORS):
        return exc
    if isinstance(exc, OSError) and exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _usage_error(inner)
            if found is not None:
                return found
    return None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError):  # trio's message names the address
        return f"cannot listen: {exc}"
    return str(exc)


def run(args: argparse.Namespace) -> int:
    """Carry out the parsed command line `args`: its exit status (a configuration or
    start-up error: one line, `EXIT_USAGE`; Ctrl-C is `cli/main.py`'s to say)."""
    try:
        return _main(args)
    except BaseException as exc:
        found = _usage_error(exc)
        if found is None:
            raise
        print(f"error: {_describe(found)}", file=sys.stderr)
        return EXIT_USAGE


def _control(
    options: argparse.Namespace, command: Callable[..., Awaitable[int]], /, *a: Any, **kw: Any
) -> int:
    """Run a client command against the server `options` name (`--url`/`--config`, token)."""
    token = options.token or os.environ.get("ORCHESTRATOR_TOKEN") or None
    url = _watch_url(options)
    return trio.run(functools.partial(command, url, *a, token=token, origin=options.origin, **kw))


def _start(args: argparse.Namespace) -> int:
    if args.give_up_after <= 0:
        raise ConfigError("--give-up-after must be more than 0")
    if args.json and not args.follow:
        raise ConfigError("--json goes with --follow")
    return _control(
        args,
        start_main,
        args.agent,
        args.input,
        follow=args.follow,
        json_lines=args.json,
        give_up_after=args.give_up_after,
        thread_id=args.thread,
        multitask=args.multitask,
        output_schema=_output_schema(args.output_schema),
    )


def _output_schema(path: str | None) -> dict[str, Any] | None:
    """`--output-schema FILE`: the JSON Schema in FILE (file `$ref`s beside it read)."""
    if path is None:
        return None
    file = Path(path)
    try:
        schema = json.loads(file.read_text(encoding="utf-8"))
        schema = inline_file_refs(schema, file.parent.resolve(), file.parent.resolve())
        return check_schema(schema, where=f"--output-schema {path}")
    except OSError as exc:
        raise ConfigError(f"--output-schema {path}: cannot read ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--output-schema {path}: not JSON ({exc})") from None
    except ValueError as exc:  # SchemaError, or a `$ref` that cannot be read
        raise ConfigError(str(exc)) from None


def _fork(args: argparse.Namespace) -> int:
    if args.give_up_after <= 0:
        raise ConfigError("--give-up-after must be more than 0")
    if args.agent is not None and args.message is None:
        raise ConfigError("--agent names who gets --message: give one")
    if args.json and args.detach:
        raise ConfigError("--json goes with following the fork (not --detach)")
    return _control(
        args,
        fork_main,
        args.run_id,
        args.at,
        agent_key=args.agent,
        message=args.message,
        replay=args.replay,
        follow=not args.detach,
        json_lines=args.json,
        give_up_after=args.give_up_after,
    )


def _cancel(args: argparse.Namespace) -> int:
    return _control(args, cancel_main, args.run_id, agent_key=args.agent, reason=args.reason)


def _approve(args: argparse.Namespace) -> int:
    changed = None
    if args.args is not None:
        try:
            changed = json.loads(args.args)
        except ValueError as exc:
            raise ConfigError(f"--args is not JSON: {exc}") from None
        if not isinstance(changed, dict):
            raise ConfigError("--args must be a JSON object")
    return _control(
        args,
        approve_main,
        args.run_id,
        args.tool_call_id,
        deny=args.deny,
        reason=args.reason,
        args=changed,
        agent_key=msgspec.UNSET
        if args.agent is None
        else None
        if args.agent == "root"
        else args.agent,
    )


def _pending(args: argparse.Namespace) -> int:
    return _control(args, pending_main, args.run_id, as_json=args.json)


def task_text(given: str, stdin: TextIO | None = None) -> str:
    """A task argument as curl reads a body: `-` is stdin, `@PATH` the file at PATH
    (UTF-8), anything else the text itself (`@@x` is the text `@x`).

    Raises:
        ConfigError: the file cannot be read.
    """
    if given == "-":
        return (stdin or sys.stdin).read()
    if given.startswith("@@"):
        return given[1:]
    if given.startswith("@"):
        try:
            return Path(given[1:]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read the task from {given[1:]!r}: {exc}") from None
    return given


def _main(args: argparse.Namespace) -> int:
    if getattr(args, "input", None) is not None and args.command in ("run", "start"):
        args.input = task_text(args.input)
    if args.command == "watch":
        return _watch(args)
    if args.command == "chat":
        return _control(
            args, chat_main, args.agent, thread_id=args.thread, give_up_after=args.give_up_after
        )
    if args.command == "runs":
        if not 1 <= args.limit <= 1000:
            raise ConfigError("--limit must be 1 to 1000")
        return _control(args, runs_main, limit=args.limit, as_json=args.json)
    if args.command == "threads":
        return _control(args, threads_main, args.thread_id, as_json=args.json)
    if args.command == "webhooks":
        return _control(args, webhooks_main, args.redeliver, as_json=args.json)
    if args.command == "triggers":
        acted = [(a, n) for a in ("pause", "resume", "fire") if (n := getattr(args, a))]
        action, name = acted[0] if acted else ("list", None)
        return _control(args, triggers_main, action, name, as_json=args.json)
    if args.command == "start":
        return _start(args)
    if args.command == "fork":
        return _fork(args)
    if args.command == "cancel":
        return _cancel(args)
    if args.command == "approve":
        return _approve(args)
    if args.command == "pending":
        return _pending(args)
    if args.command == "mcp":
        try:
            from orchestrator.cli.mcp_serve import mcp_main  # the `mcp` extra, only here
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.split(".")[0] != "mcp":
                raise
            raise ConfigError(
                "`orchestrator mcp` needs the mcp extra: pip install 'agent-orchestrator[mcp]'"
            ) from None
        return _control(args, mcp_main)
    config = _load(args.config)
    if args.command in ("serve", "worker"):
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        logging.getLogger("coredis").setLevel(logging.WARNING)  # one line per retry
        if not getattr(args, "access_log", False):  # per request: an access log, off
            for name in ACCESS_LOGGERS:
                logging.getLogger(name).setLevel(logging.WARNING)
        if args.command == "worker":
            return trio.run(_worker, config)
        return trio.run(_serve, config, args.host, args.port)
    if args.command == "agents":
        return _agents(config)
    if args.max_depth is not None and args.max_depth < 0:
        raise ConfigError("--max-depth must be 0 or more")
    return trio.run(_run, args, config)
