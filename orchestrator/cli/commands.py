"""The command line's surface as a table: each `orchestrator` command, its help and its
arguments (contract §5), as `orchestrator --help` lists them; `parser` builds argparse
from it. What each command does is in `main.py` (and the modules it names)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["COMMANDS", "Arg", "Command", "parser"]


@dataclass(frozen=True, slots=True)
class Arg:
    """One argument: argparse's `add_argument(*flags, **options)`."""

    flags: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)


def arg(*flags: str, **options: Any) -> Arg:
    """An `Arg`, written as argparse's `add_argument` call."""
    return Arg(flags, options)


@dataclass(frozen=True, slots=True)
class Command:
    """One subcommand: its arguments, its choices of which one may be given (each group
    mutually exclusive), and whether it reaches a server (`--url`, `--token`, …)."""

    name: str
    help: str
    args: tuple[Arg, ...] = ()
    exclusive: tuple[tuple[Arg, ...], ...] = ()
    server: bool = False
    give_up: bool = False
    """It follows a run: `--give-up-after` bounds the time without a connection."""


CONFIG = arg("--config", type=Path, default=None, help="server config (YAML)")
JSON_LINES = arg("--json", action="store_true", help="print one event JSON per line")

SERVER_OPTIONS = (
    arg(
        "--url",
        default=None,
        help="the server's /ws URL (default: $ORCHESTRATOR_URL, else server.host/port of "
        "--config or configs/server.yaml)",
    ),
    CONFIG,
    arg("--token", default=None, help="bearer token (default: $ORCHESTRATOR_TOKEN)"),
    arg("--origin", default=None, help="send this Origin header"),
)
"""How a client command reaches a server."""
GIVE_UP = arg(
    "--give-up-after",
    type=float,
    default=60.0,
    help="seconds without a working connection before giving up (default 60)",
)

TASK_HELP = "the task for the root agent; `-` reads it from stdin, `@PATH` from a file"
OUTPUT_SCHEMA = arg(
    "--output-schema",
    default=None,
    metavar="FILE",
    help="a JSON Schema file the root's answer must match (docs/structured.md)",
)

COMMANDS: tuple[Command, ...] = (
    Command(
        "run",
        "run an agent in-process and show its live tree",
        (
            arg("agent", help="agentId of the root agent (a subagent file's stem)"),
            arg("input", help=TASK_HELP),
            CONFIG,
            JSON_LINES,
            arg("--max-depth", type=int, default=None, help="override limits.max_depth"),
            arg(
                "--no-stream", action="store_true", help="blocking call: print only the final text"
            ),
            OUTPUT_SCHEMA,
        ),
        exclusive=(
            (
                arg(
                    "--approve-all",
                    action="store_true",
                    help="approve every call that waits for approval",
                ),
                arg(
                    "--deny-all",
                    action="store_true",
                    help="deny every call that waits for approval",
                ),
            ),
        ),
    ),
    Command("agents", "list the subagents", (CONFIG,)),
    Command(
        "serve",
        "run the WebSocket server",
        (
            CONFIG,
            arg("--host", default=None, help="override server.host"),
            arg("--port", type=int, default=None, help="override server.port"),
            arg(
                "--access-log",
                action="store_true",
                help="log every connection and HTTP response (off: only warnings and errors "
                "of them)",
            ),
        ),
    ),
    Command(
        "worker",
        "execute the runs of a cluster (no listening socket; needs `cluster:`)",
        (CONFIG,),
    ),
    Command(
        "start",
        "start a run on a server; print its runId (or follow it)",
        (
            arg("agent", help="agentId of the root agent"),
            arg("input", help=TASK_HELP),
            arg(
                "--follow", action="store_true", help="then follow it, as `watch` does, to its end"
            ),
            arg("--json", action="store_true", help="with --follow: JSON lines"),
            arg("--thread", default=None, help="go on in this thread (docs/threads.md)"),
            arg(
                "--multitask",
                default="reject",
                choices=["reject", "enqueue", "interrupt", "rollback", "steer"],
                help="what the input does while a run of the thread runs (default reject)",
            ),
            OUTPUT_SCHEMA,
        ),
        server=True,
        give_up=True,
    ),
    Command(
        "chat",
        "talk with an agent on a server: each line of input is the next run of a thread",
        (
            arg("agent", help="agentId of the root agent"),
            arg("--thread", default=None, help="go on in this thread (default: a new one)"),
        ),
        server=True,
        give_up=True,
    ),
    Command(
        "fork",
        "start a new run from a run as it stood at one event, and follow it",
        (
            arg("run_id", help="the run to fork (it is never changed)"),
            arg("--at", type=int, required=True, help="the seq of the event to fork at"),
            arg("--agent", default=None, help="agentKey of who gets --message (default: root)"),
            arg("--message", default=None, help="a message for that agent at the fork"),
            arg(
                "--replay",
                action="store_true",
                help="answer turns asked the same as in the original from its recording",
            ),
            arg("--detach", action="store_true", help="print the new runId, do not follow"),
            JSON_LINES,
        ),
        server=True,
        give_up=True,
    ),
    Command(
        "watch",
        "follow a run on a server, live",
        (
            arg("run_id", help="the run to follow"),
            arg("--max-depth", type=int, default=None, help="only events up to this depth"),
            arg("--path-prefix", default=None, help="only this subtree (whole segments)"),
            arg("--after-seq", type=int, default=0, help="start after this seq"),
            JSON_LINES,
        ),
        server=True,
        give_up=True,
    ),
    Command(
        "cancel",
        "cancel a run on a server, or one agent and its subtree (--agent)",
        (
            arg("run_id", help="the run"),
            arg("--agent", default=None, help="agentKey of the agent to stop with its subtree"),
            arg("--reason", default=None, help="why (shown in the AGENT_ERRORs)"),
        ),
        server=True,
    ),
    Command(
        "approve",
        "answer a tool call that waits for approval",
        (
            arg("run_id", help="the run"),
            arg("tool_call_id", help="the waiting call (its APPROVAL_REQUESTED)"),
            arg(
                "--agent",
                default=None,
                help="agentKey of the calling agent (`root`: the root agent), when calls of "
                "several agents of the run have that id",
            ),
            arg("--deny", action="store_true", help="deny it (default: approve)"),
            arg("--reason", default=None, help="why (the agent sees it)"),
            arg(
                "--args",
                default=None,
                help="changed arguments, a JSON object (where edits are allowed)",
            ),
        ),
        server=True,
    ),
    Command(
        "mcp",
        "serve a server's subagents as MCP tools over stdio (for MCP clients)",
        server=True,
    ),
    Command(
        "runs",
        "list the runs on a server, newest first",
        (
            arg("--limit", type=int, default=20, help="how many (default 20)"),
            arg("--json", action="store_true", help="print them as one JSON array"),
        ),
        server=True,
    ),
    Command(
        "webhooks",
        "show a server's outbox: its webhooks, deliveries waiting, dead ones; redeliver",
        (
            arg("--json", action="store_true", help="print the reply as one JSON object"),
            arg(
                "--redeliver",
                metavar="ID",
                default=None,
                help="send a dead delivery again (`all`: every dead one; an admin's token)",
            ),
        ),
        server=True,
    ),
    Command(
        "triggers",
        "list a server's triggers (next and last fire, last run); pause, resume or fire one",
        (arg("--json", action="store_true", help="print them as one JSON array"),),
        server=True,
        exclusive=(
            (
                arg("--pause", metavar="NAME", default=None, help="pause this trigger"),
                arg("--resume", metavar="NAME", default=None, help="resume this trigger"),
                arg("--fire", metavar="NAME", default=None, help="fire this trigger now"),
            ),
        ),
    ),
    Command(
        "threads",
        "list your threads on a server, or one thread's runs",
        (
            arg("thread_id", nargs="?", default=None, help="only this thread, with its runs"),
            arg("--json", action="store_true", help="print them as one JSON array"),
        ),
        server=True,
    ),
    Command(
        "pending",
        "list the tool calls that wait for approval",
        (
            arg("run_id", nargs="?", default=None, help="only this run"),
            arg("--json", action="store_true", help="print them as one JSON array"),
        ),
        server=True,
    ),
)
"""Every command, in the order `orchestrator --help` lists them."""


def parser() -> argparse.ArgumentParser:
    """The `orchestrator` command's argument parser, built from `COMMANDS`."""
    top = argparse.ArgumentParser(prog="orchestrator", description="Run and watch trees of agents.")
    sub = top.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        each = sub.add_parser(command.name, help=command.help)
        args = list(command.args)
        if command.server:
            args += [a for a in SERVER_OPTIONS if a not in args]
        if command.give_up:
            args.append(GIVE_UP)
        for one in args:
            each.add_argument(*one.flags, **one.options)
        for group in command.exclusive:
            choice = each.add_mutually_exclusive_group()
            for one in group:
                choice.add_argument(*one.flags, **one.options)
    return top
