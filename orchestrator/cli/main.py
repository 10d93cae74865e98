"""The `orchestrator` console script: the command line parsed (`cli/commands.py`, plain
argparse), then carried out (`cli/dispatch.py`, imported only then).

So `orchestrator --help`, a usage error and the first moments of every command import
nothing heavy (no trio, httpx, pydantic, websockets or runtime), and Ctrl-C says one
line at any moment, however far the imports have come.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from orchestrator.cli.commands import parser

__all__ = ["EXIT_CANCELLED", "STOPPED", "main"]

EXIT_CANCELLED = 130
STOPPED = {
    "start": "stopped following; the run goes on (`orchestrator cancel RUN_ID` stops it)",
    "fork": "stopped following; the fork goes on (`orchestrator cancel RUN_ID` stops it)",
    "watch": "stopped watching; the run goes on",
    "chat": "left the chat; the conversation goes on (`orchestrator chat AGENT --thread T`)",
    "pending": "stopped",
    "approve": "stopped",
    "run": "interrupted: the run was cancelled",
}
"""What Ctrl-C says, by command: one line, no traceback (exit 130)."""


def _interrupted(exc: BaseException) -> bool:
    """Ctrl-C, inside whatever groups trio wrapped it in."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_interrupted(inner) for inner in exc.exceptions)
    return False


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `orchestrator` console script."""
    command = None
    try:
        args = parser().parse_args(argv)
        command = args.command
        from orchestrator.cli.dispatch import run  # (the heavy part: only now)

        return run(args)
    except BaseException as exc:
        if not _interrupted(exc):
            raise
        print(STOPPED.get(command or "", "interrupted"), file=sys.stderr)
        return EXIT_CANCELLED
