"""One error tree, and the one table of how each door shows an error.

Every error the orchestrator raises on purpose is an `OrchestratorError` (defined at
the bottom floor, `agents/errors.py`, so the agents' errors share it) whose `code`
says what kind it is. A door does not map error classes one by one: it catches
`OrchestratorError` once and looks the code up here — the `/ws` protocol's error
code, the HTTP status of the HTTP doors (AG-UI, hooks, the A2A and MCP transports),
and the JSON-RPC code of the JSON-RPC doors (A2A, MCP).

A new error takes the family it belongs to (`UnknownRun`, `ThreadError`, …), or
`OrchestratorError` with one of the codes below: it is then shown right on every door.
"""

from __future__ import annotations

from typing import NamedTuple

from agents.errors import ErrorCode, OrchestratorError

__all__ = ["SHOWN", "ErrorCode", "OrchestratorError", "Refused", "Shown", "http_status", "shown"]


class Shown(NamedTuple):
    """How one kind of error is shown on each door."""

    ws: ErrorCode
    """The `/ws` `error` frame's `code`."""
    http: int
    """The HTTP status."""
    jsonrpc: int
    """The JSON-RPC error code (A2A's own where it has one: -32001 task not found)."""


SHOWN: dict[str, Shown] = {
    "bad_request": Shown("bad_request", 400, -32602),
    "unknown_op": Shown("unknown_op", 400, -32601),
    "not_found": Shown("not_found", 404, -32001),
    "unauthorized": Shown("unauthorized", 403, -32600),
    "limit_exceeded": Shown("limit_exceeded", 429, -32600),
    "unavailable": Shown("unavailable", 503, -32600),
    "internal": Shown("internal", 500, -32603),
}
"""Error code → how each door shows it. A code not here (a client's own) is `internal`."""


def shown(error: OrchestratorError) -> Shown:
    """How `error` is shown on each door."""
    return SHOWN.get(error.code, SHOWN["internal"])


class Refused(OrchestratorError):
    """A request an HTTP door refuses with a status of its own choosing (413, say);
    `code` follows from the status."""

    def __init__(self, status: int, message: str) -> None:
        code = next((c for c, form in SHOWN.items() if form.http == status), "bad_request")
        super().__init__(message, code=code)
        self.status = status


def http_status(error: OrchestratorError) -> int:
    """The HTTP status of `error`: the one a door chose (`Refused`), else its code's."""
    return error.status if isinstance(error, Refused) else shown(error).http
