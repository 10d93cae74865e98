"""The root of every error raised on purpose, and the errors of the agents package.

OrchestratorError        `code` (data) says what kind: orchestrator/errors.py maps it
│                        to each door's own form (/ws error, HTTP status, JSON-RPC)
└── AgentsError
    ├── SpecError            a subagent YAML file is invalid (names file and key)
    ├── ProviderError        a model provider failed (HTTP status, stream error, …)
    │   └── StreamTruncated  the stream ended without its terminal event
    ├── ToolError            a tool failed in an expected way; an error tool result
    └── AgentFailed          an agent instance ended without a final answer

It lives here, at the bottom floor, so that both packages' errors share it (`agents`
never imports `orchestrator`).
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "AgentFailed",
    "AgentsError",
    "ErrorCode",
    "OrchestratorError",
    "ProviderError",
    "SpecError",
    "StreamTruncated",
    "ToolError",
]


ErrorCode = Literal[
    "bad_request",
    "unknown_op",
    "not_found",
    "unauthorized",
    "limit_exceeded",
    "unavailable",
    "internal",
]
"""What kind of error: the `/ws` protocol's codes, which every door maps its own way."""


class OrchestratorError(Exception):
    """Base of every error the orchestrator and its agents raise on purpose.

    Attributes:
        code: what kind of error (the class's own, or given to this one): one of
            `ErrorCode`, except for a client's own (`ClientError`: `unreachable`, …).
        message: one line saying what and why (what a client is shown).
    """

    code: str = "internal"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class AgentsError(OrchestratorError):
    """Base of every error this package raises on purpose."""


class SpecError(AgentsError):
    """A subagent definition is invalid; the message names the file and the key."""


class ProviderError(AgentsError):
    """A model provider failed.

    Attributes:
        provider: the provider kind (`openai`, `scripted`, …).
        status: the HTTP status, if the failure came with one.
        error_type: the provider's own error type (`server_error`, …), if any.
        retryable: worth retrying if nothing has been streamed yet (429, 5xx,
            529, overloaded, a truncated stream).
        retry_after: seconds the provider asked us to wait (`Retry-After`).
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status: int | None = None,
        error_type: str | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status
        self.error_type = error_type
        self.retryable = retryable
        self.retry_after = retry_after


class StreamTruncated(ProviderError):
    """The provider's stream stopped before its terminal event."""

    @classmethod
    def at_eof(cls, provider: str, terminal: str, *, after_output: bool) -> StreamTruncated:
        """The error for a body that ended before `terminal` (retryable if nothing went out)."""
        return cls(
            f"{provider} stream ended before {terminal}"
            + (" (after partial output)" if after_output else ""),
            provider=provider,
            error_type="stream_truncated",
            retryable=True,
        )


class ToolError(AgentsError):
    """A tool could not do its job; the message goes back to the model as an error result."""


class AgentFailed(AgentsError):
    """An agent instance failed; `error_type` is the AGENT_ERROR `errorType`."""

    def __init__(self, message: str, *, error_type: str) -> None:
        super().__init__(message)
        self.error_type = error_type
