"""Server configuration (contract §6), validated with pydantic at the edge.

Relative paths in the file resolve against the directory of the config file:
`subagents_dir: subagents` in `configs/server.yaml` is `configs/subagents`, and
`sqlite:///data/orchestrator.db` is `configs/data/orchestrator.db`. An absolute
path (`sqlite:////var/lib/o.db`) is taken as it is.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agents.core.attachments import AttachmentLimits
from agents.errors import OrchestratorError
from agents.model_config import ModelConfig
from agents.spec import CompactionSpec
from agents.yaml_loader import load_yaml_model
from orchestrator.core.schedule import Schedule, parse_duration
from orchestrator.core.webhooks import WebhookSpec, secret_key

__all__ = [
    "ClusterConfig",
    "ConfigError",
    "LimitsConfig",
    "RetentionConfig",
    "ServerConfig",
    "ServerSection",
    "StorageConfig",
    "TokenConfig",
    "load_config",
]


_TRIGGER_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_MCP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")


class ConfigError(OrchestratorError):
    """The server config is invalid; the message names the file and the key."""

    code = "bad_request"


class TokenConfig(BaseModel):
    """One entry of `server.tokens`: a named bearer token with a role."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.@-]+$")
    """Who holds it: the owner recorded on the runs it starts (never the token itself)."""
    token: str = Field(min_length=1, max_length=512)
    """The secret, sent as `Authorization: Bearer <token>`."""
    role: Literal["admin", "user", "viewer"] = "user"
    """`admin` sees and controls every run; `user` only the runs its token started;
    `viewer` sees every run, read-only (never starts, cancels or sends)."""
    max_concurrent_runs: int | None = Field(default=None, ge=1)
    """Runs this token may have running at once (default: `limits.max_runs_per_token`)."""
    max_subscriptions: int | None = Field(default=None, ge=1)
    """Subscriptions this token may hold over all its connections (default: 4 ×
    `server.max_subscriptions`)."""

    @field_validator("token")
    @classmethod
    def _no_blank(cls, value: str) -> str:
        if not value.strip() or value != value.strip():
            raise ValueError("must not be empty or have surrounding whitespace")
        return value


class TelemetryConfig(BaseModel):
    """`telemetry:` — OpenTelemetry traces of runs, over OTLP/HTTP (docs/integrations.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    otlp_endpoint: str = Field(min_length=1, pattern=r"^https?://[^/?#\s]+")
    """The collector's OTLP/HTTP address (`http://HOST:4318`; `/v1/traces` is added
    unless the address ends with it)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Headers sent with every export (for example an API key)."""
    headers_from: dict[str, str] = Field(default_factory=dict)
    """Headers whose values come from environment variables (header → variable): secrets
    stay out of the file."""
    service_name: str = Field(default="agent-orchestrator", min_length=1)
    """The `service.name` of the traces."""
    capture_content: bool = False
    """Put message content on the spans (tasks, answers, model text, tool arguments and
    results, each cut at 16,000 characters); off: only names, ids, numbers."""
    max_queued_spans: int = Field(default=8192, ge=16, le=1_000_000)
    """Finished spans waiting for export; past it new ones are dropped (and counted)."""
    export_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    """How long one export may take (the exporter's retries included)."""


class ServerSection(BaseModel):
    """`server:` — where `orchestrator serve` listens, and who may talk to it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    tokens: list[TokenConfig] = Field(default_factory=list)
    """Named tokens (`{name, token, role}`); a plain string is an admin token named
    `token-<n>`. Empty: no auth, every client is an admin."""
    metrics_token: str | None = Field(default=None, min_length=1, max_length=512)
    """A token that may read `/metrics` only (admins may too). With `tokens` set,
    `/metrics` needs one of them; without, it is open."""
    allowed_origins: list[str] | None = None
    """`Origin` values accepted on the upgrade besides the server's own; None: same
    origin only. Clients that send no Origin (non-browsers) are always accepted."""
    allowed_hosts: list[str] | None = None
    """`Host` names the server is reachable by besides its own (`localhost`,
    `127.0.0.1`, `[::1]` with its port; on a non-loopback bind, any IP address): a
    name (any port) or `name:port`, for a DNS name or a proxy in front. Any other
    Host is refused (DNS rebinding)."""
    max_frame_bytes: int = Field(default=1024 * 1024, ge=1024)
    """Largest client frame accepted; a bigger one closes the connection with 1009."""
    max_subscriptions: int = Field(default=32, ge=1)
    """Most subscriptions one connection may hold at once."""
    max_connections: int = Field(default=1000, ge=1)
    """Most WebSocket connections at once; more are answered HTTP 503."""
    slow_client_timeout: float = Field(default=60.0, gt=0)
    """Seconds a send to a client may make no progress before the client is closed (4000)."""
    client_buffer_bytes: int = Field(default=512 * 1024, ge=32 * 1024)
    """Events frames are cut at an eighth of this; a client has at most one frame per
    subscription waiting for it (one event more when a single event is bigger)."""
    shutdown_timeout: float = Field(default=15.0, gt=0)
    """Seconds a graceful shutdown may take; then every connection is dropped."""
    compression: bool = True
    """Offer permessage-deflate. Compressing each small frame costs server CPU (about a
    tenth of it with 100 live watchers); off saves that on fast networks."""
    compression_level: int = Field(default=1, ge=1, le=9)
    """zlib's level for the frames it compresses: 1 is the cheapest per frame, 9 the
    smallest (bench/deflate_bench.py, docs/benchmarks.md)."""
    compression_threshold: int = Field(default=1024, ge=0)
    """Frames smaller than this many bytes go uncompressed even when the client accepts
    compression (RFC 7692 marks each message): live frames of a few events gain little
    from deflate, and an uncompressed frame is the same bytes for every watcher (the
    default is that of Node's `ws` library). 0: compress every frame."""
    live_coalesce_ms: float = Field(default=0.0, ge=0, le=50)
    """A caught-up subscription waits this long after new events arrive, so the events
    of that moment go out as one frame (0: a frame per wake-up; see benchmarks.md)."""
    mcp: bool = False
    """Serve the subagents as MCP tools over streamable HTTP at `/mcp` on this port,
    behind the same tokens (docs/mcp.md). Needs the `mcp` extra."""
    ag_ui: bool = False
    """Serve `POST /ag-ui/AGENT` on this port: an AG-UI RunAgentInput in, the run as the
    AG-UI event stream out, behind the same tokens (docs/integrations.md). Needs the
    `agui` extra."""
    hooks: bool = False
    """Serve `POST /hooks/AGENT` on this port: another system's event (a JSON body)
    starts a run, behind the same tokens, answered `202` with its runId; `hooks:` sets
    a hook's input template and signature secret (docs/webhooks.md)."""
    a2a: bool = False
    """Serve each subagent as an A2A agent at `/a2a/AGENT/` on this port (its card at
    `/a2a/AGENT/.well-known/agent-card.json`), behind the same tokens (docs/remote.md).
    Needs the `a2a` extra."""
    webhook_urls: list[str] = Field(default_factory=list, max_length=256)
    """URL prefixes a client's own webhooks may go to (the `run` op's `webhooks`): the
    same scheme, host and port, and a path at or below the prefix's. Empty: a client
    may not ask for webhooks (docs/webhooks.md#webhooks-out)."""
    resume_runs: bool = True
    """Runs still running when the server stops (SIGTERM) or crashes continue from their
    journal at its next start; false: they end `interrupted`. Needs durable storage."""
    direct_send: bool = True
    """Write a frame straight to the socket when nothing else is writing to it
    (orchestrator/server/direct_send.py); false: always `await ws.send()`."""

    @field_validator("tokens", mode="before")
    @classmethod
    def _plain_tokens(cls, value: Any) -> Any:
        """`tokens: [secret, …]` (the original form) = admin tokens named `token-<n>`."""
        if not isinstance(value, list):
            return value
        out = []
        for n, item in enumerate(value, 1):
            if isinstance(item, str):
                out.append({"name": f"token-{n}", "token": item, "role": "admin"})
            else:
                out.append(item)
        return out

    @model_validator(mode="after")
    def _unique_tokens(self) -> ServerSection:
        names = [t.name for t in self.tokens]
        if len(set(names)) != len(names):
            raise ValueError("tokens: two tokens have the same name")
        secrets = [t.token for t in self.tokens]
        if len(set(secrets)) != len(secrets):
            raise ValueError("tokens: two entries have the same token")
        if self.metrics_token is not None and not self.metrics_token.strip():
            raise ValueError("metrics_token must not be blank")
        return self


class AttachmentsConfig(BaseModel):
    """`limits.attachments:` — what a run may be given (docs/structured.md#attachments)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_bytes: int = Field(default=10 * 1024 * 1024, ge=1)
    """Bytes of one attachment (a WebSocket frame bounds a base64 one too:
    `server.max_frame_bytes`)."""
    max_run_bytes: int = Field(default=32 * 1024 * 1024, ge=1)
    """Bytes of the attachments of one request together; across a run, its input's and
    those its tools return or `agent_spawn` makes anew (past it: noted, not kept)."""
    max_count: int = Field(default=16, ge=0, le=256)
    """Attachments in one `run`, `send` or `agent_spawn` call (0: none are taken)."""
    media_types: list[str] = Field(
        default_factory=lambda: ["image/*", "application/pdf", "text/*", "application/json"]
    )
    """Media types taken (`*` wildcards); another is refused, naming it."""

    def limits(self) -> AttachmentLimits:
        """As the pure checks take them."""
        return AttachmentLimits(
            max_bytes=self.max_bytes,
            max_run_bytes=self.max_run_bytes,
            max_count=self.max_count,
            media_types=tuple(self.media_types),
        )


class WebhookLimits(BaseModel):
    """`limits.webhooks:` — how deliveries are sent and retried (docs/webhooks.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    """One attempt's deadline (connect, send, answer)."""
    max_attempts: int = Field(default=8, ge=1, le=100)
    """Attempts before a delivery is dead (listed, redelivered by a person)."""
    retry_first_seconds: float = Field(default=1.0, gt=0)
    """The wait after the first failed attempt; it doubles after each."""
    retry_max_seconds: float = Field(default=600.0, gt=0)
    """The longest wait between two attempts."""
    concurrency: int = Field(default=16, ge=1, le=1024)
    """Attempts under way at once, over every receiver."""
    max_outbox: int = Field(default=100_000, ge=10)
    """Deliveries waiting to be sent; past it, matching waits (the journal keeps the
    events, nothing is lost) and runs are never slowed."""
    max_dead: int = Field(default=10_000, ge=1)
    """Dead deliveries kept; past it the oldest is forgotten (counted in /metrics)."""
    max_per_run: int = Field(default=4, ge=0, le=64)
    """Webhooks one `run` op may ask for."""


class LimitsConfig(BaseModel):
    """`limits:` — bounds on every run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_depth: int = Field(default=4, ge=0, le=64)
    """Deepest allowed child depth; a spawn deeper than this is refused."""
    max_children: int = Field(default=16, ge=1)
    """Most children one agent instance may have running at once."""
    run_timeout_seconds: float = Field(default=900.0, gt=0)
    """Wall-clock bound on a whole run."""
    max_concurrent_runs: int = Field(default=32, ge=1)
    """Most runs the server executes at once; more is `limit_exceeded`."""
    max_tokens: int | None = Field(default=None, gt=0)
    """Most tokens (input + output) a whole run may use; over it the run fails `budget`."""
    max_agents: int = Field(default=256, ge=1)
    """Most agent instances one run may create (the root included); more spawns are refused."""
    max_runs_per_token: int = Field(default=8, ge=1)
    """Runs one token may have running at once (when tokens are configured)."""
    max_turn_events: int = Field(default=200_000, ge=100)
    """Most stream parts one model turn may produce; past it the agent fails `output_limit`."""
    max_turn_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    """Most bytes of text, reasoning and arguments one model turn may produce."""
    turn_timeout_seconds: float = Field(default=600.0, gt=0)
    """Wall-clock bound on one whole model turn (a provider that never stops)."""
    max_event_bytes: int = Field(default=256 * 1024, ge=4096)
    """Largest encoded event sent to clients; longer strings in `data` are cut with a
    marker (the agent and its tools still get the whole value)."""
    max_input_bytes: int = Field(default=256 * 1024, ge=1024)
    """Largest `input` of a run, and `message` of a `send`, in UTF-8 bytes."""
    attachments: AttachmentsConfig = Field(default_factory=lambda: AttachmentsConfig())
    """What a run may be given as images and files."""
    webhooks: WebhookLimits = Field(default_factory=lambda: WebhookLimits())
    approval_timeout_seconds: float = Field(default=3600.0, gt=0)
    """Seconds a tool call waits for its approval before it is answered `timeout`
    (a subagent's `approval_timeout_seconds` overrides it)."""
    stall_seconds: float = Field(default=60.0, ge=0)
    """An agent running with no event for this long, waiting for neither a person nor
    its children, is marked stalled (AGENT_STALLED); 0 turns it off."""
    max_pending_approvals: int = Field(default=10_000, ge=1)
    """Most tool calls waiting for a decision at once over the server; past it a call
    that needs one is denied at once (`by: server`)."""
    max_http_connections: int = Field(default=1024, ge=1)
    """HTTP connections the server keeps open at once to model providers (and for
    `http_get`): one per streaming agent. A request past it waits for one to free up
    (up to the model's connect timeout). httpx's own default, 100, capped a server at
    100 agents streaming from real providers."""


class ToolsConfig(BaseModel):
    """`tools:` — settings of the built-in tools."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    root: str = "workspace"
    """Directory `read_file`/`write_file` are confined to (relative: the config's dir)."""
    http_timeout: float = Field(default=10.0, gt=0)
    """Seconds a whole `http_get` may take (connect, headers and body)."""
    http_allow_private: bool = False
    """Let `http_get` reach loopback, private, link-local and other non-public addresses."""
    http_allowed_hosts: list[str] = Field(default_factory=list)
    """Host names `http_get` may reach even when they resolve to non-public addresses."""


class McpServerConfig(BaseModel):
    """One entry of `mcp_servers`: an MCP server whose tools agents may call.

    Either `command` (a process spoken to over stdio) or `url` (streamable HTTP).
    Secrets come from the environment (`env_from`, `headers_from`, `token_env`): they
    are never logged and never put in events.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str | None = Field(default=None, min_length=1)
    """The program to start (stdio)."""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    """Environment of the process, besides PATH (and a few harmless variables the
    `mcp` package passes: HOME, LOGNAME, SHELL, TERM, USER); nothing else of the
    server's own environment reaches it."""
    env_from: dict[str, str] = Field(default_factory=dict)
    """Environment of the process taken from the server's: `{NAME: SERVER_VARIABLE}`."""
    cwd: str | None = None
    """Working directory (default, and what a relative one is relative to: the config
    file's directory, so relative `args` are found there)."""
    url: str | None = Field(default=None, pattern=r"^https?://")
    """The server's streamable-HTTP endpoint."""
    headers: dict[str, str] = Field(default_factory=dict)
    headers_from: dict[str, str] = Field(default_factory=dict)
    """Request headers taken from the server's environment: `{Header: VARIABLE}`."""
    token_env: str | None = None
    """A variable holding a bearer token, sent as `Authorization: Bearer …`."""
    timeout_seconds: float = Field(default=60.0, gt=0)
    """Longest one tool call may take; then its agent gets an error result and the
    session is started again for the next call."""
    startup_timeout_seconds: float = Field(default=30.0, gt=0)
    """Longest starting a session (the process, the handshake, the tool list) may take."""
    max_result_chars: int = Field(default=256 * 1024, ge=1024)
    """A tool result longer than this is cut (with a marker) before the model sees it."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either `command` (stdio) or `url` (streamable HTTP)")
        stdio_only = ("args", "env", "env_from", "cwd")
        http_only = ("headers", "headers_from", "token_env")
        wrong = http_only if self.command is not None else stdio_only
        given = [key for key in wrong if getattr(self, key)]
        if given:
            kind = "stdio (`command`)" if self.command is not None else "HTTP (`url`)"
            raise ValueError(f"{', '.join(given)}: not used by an {kind} server")
        return self


class RetentionConfig(BaseModel):
    """`storage.retention:` — what the journal forgets, and when."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_age_seconds: float | None = Field(default=None, gt=0)
    """Finished runs older than this (by when they finished) are deleted."""
    max_runs: int | None = Field(default=None, ge=1)
    """Only the newest this-many finished runs are kept."""
    max_run_events: int | None = Field(default=None, ge=100)
    """Only the newest this-many events of a run are kept; a resume from below them
    gets a `gap` frame."""


MEMORY_RETENTION = RetentionConfig(max_runs=1000, max_run_events=200_000)
"""What `memory://` keeps when `retention` says nothing: RAM is its only store."""


class StorageConfig(BaseModel):
    """`storage:` — a URL, or `{url, durability, retention, …}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = "sqlite:///data/orchestrator.db"
    """`memory://`, `sqlite:///PATH` or `redis://HOST:PORT/DB[?prefix=aor:]`."""
    durability: Literal["strict", "relaxed"] = "strict"
    """`strict`: refuse a Redis without `appendonly yes` + `appendfsync always|everysec`;
    `relaxed`: warn and go on."""
    retention: RetentionConfig | None = None
    """None: keep everything (`memory://`: 1000 finished runs, 200k events per run)."""
    fail_runs_after_seconds: float = Field(default=30.0, gt=0)
    """Runs whose events could not be stored for this long are failed."""
    max_pending_events: int = Field(default=8192, ge=16)
    """Events of one run that may wait for a write; then the run waits."""

    @field_validator("url")
    @classmethod
    def _storage_url(cls, value: str) -> str:
        if not value.startswith(("memory://", "sqlite:///", "redis://")):
            raise ValueError("must start with memory://, sqlite:/// or redis://")
        if value.startswith("sqlite:///") and not value.removeprefix("sqlite:///").strip():
            raise ValueError("sqlite:/// needs a file path, e.g. sqlite:///data/orchestrator.db")
        return value

    @property
    def effective_retention(self) -> RetentionConfig:
        """The retention in force (memory:// has bounded defaults)."""
        if self.retention is not None:
            return self.retention
        return MEMORY_RETENTION if self.url.startswith("memory://") else RetentionConfig()


class ClusterConfig(BaseModel):
    """`cluster:` — many instances on one Redis share the runs (docs/cluster.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default="default", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    """Instances with the same storage and name form one cluster."""
    worker: bool = True
    """This instance executes runs (false: a gateway only)."""
    max_runs: int = Field(default=16, ge=1, le=10_000)
    """Runs one worker executes at once."""
    lease_seconds: float = Field(default=10.0, ge=1, le=3600)
    """A worker that stops renewing loses its runs after this long."""
    max_attempts: int = Field(default=3, ge=1, le=100)
    """A run whose workers stopped this many times before it ended (died, paused past
    their lease, failed to take it over; not graceful hand-overs) ends `failed`
    (`worker_lost`)."""


class TriggerConfig(BaseModel):
    """`triggers.<name>:` — a run that starts itself on a schedule (docs/triggers.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: str = Field(min_length=1)
    """The agentId it runs."""
    input: str = Field(min_length=1, max_length=4096)
    """The run's input; `{name}` and `{scheduled_for}` (the tick, ISO 8601 in the
    trigger's time zone) are filled in."""
    cron: str | None = None
    """A 5-field cron expression (`0 3 * * *`: at 03:00), in `timezone`."""
    every: float | str | None = None
    """Or an interval (`30s`, `5m`, `1h`, `1d`, or seconds): ticks at its multiples
    since the epoch."""
    timezone: str = "UTC"
    """The IANA time zone of `cron` (`Europe/Berlin`)."""
    catch_up: Literal["none", "one", "all"] = "one"
    """Ticks missed while the server was down: fired once, each (at most 100), or not."""
    overlap: Literal["skip", "enqueue", "allow"] = "skip"
    """A tick while the trigger's last run still runs: skipped, queued after it (in the
    trigger's thread), or started beside it."""
    thread: str | None = Field(default=None, min_length=1, max_length=256)
    """The thread its runs go on in (each starts from the last one's conversation);
    None: a new thread each run (`enqueue` then queues in `trigger-<name>`)."""

    @model_validator(mode="after")
    def _one_run_at_a_time_in_a_thread(self) -> TriggerConfig:
        if self.overlap == "allow" and self.thread is not None:
            raise ValueError(
                "overlap: 'allow' starts runs beside each other, but a thread runs one "
                "at a time: give 'enqueue' (or no thread)"
            )
        return self

    def schedule(self) -> Schedule:
        """Its ticks."""
        every = parse_duration(self.every) if self.every is not None else None
        return Schedule(cron=self.cron, every=every, timezone=self.timezone)

    @model_validator(mode="after")
    def _a_schedule(self) -> TriggerConfig:
        self.schedule()  # (raises ValueError naming what is wrong)
        return self


class HookConfig(BaseModel):
    """`hooks.<agentId>:` — how `POST /hooks/<agentId>` starts a run (docs/webhooks.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: str | None = Field(default=None, min_length=1, max_length=4096)
    """The run's input, `{body.a.b}` filled from the JSON body (`{body}`: all of it);
    None: the body's `input` field."""
    thread: str | None = Field(default=None, min_length=1, max_length=256)
    """The thread the run goes on in, filled as `input` is (`github-{body.repository.id}`:
    one conversation per repository); None: a new thread each time."""
    multitask: Literal["reject", "enqueue", "interrupt", "rollback", "steer"] = "enqueue"
    """What a hook's run does while a run of its thread runs."""
    secret_env: str | None = None
    """An environment variable holding the hook's HMAC secret: the request must carry
    `sha256=<hex HMAC-SHA256 of the body>` in `signature_header`, as GitHub signs (or,
    with `signature: slack`, Slack's signing secret)."""
    signature: Literal["github", "slack"] = "github"
    """How requests are signed: `github` (`sha256=` over the body in
    `signature_header`) or `slack` (`v0=` over `v0:timestamp:body` in
    `X-Slack-Signature`, the timestamp in `X-Slack-Request-Timestamp` within 5 minutes;
    Slack's `url_verification` challenge is answered, no run started)."""
    signature_header: str = "X-Hub-Signature-256"
    """Where the signature is (with `secret_env`, `signature: github`)."""


class WebhookConfig(BaseModel):
    """`webhooks.<name>:` — events sent to another system as they happen, signed as
    Standard Webhooks specifies (docs/webhooks.md#webhooks-out)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(pattern=r"^https?://[^/?#\s]+", max_length=2048)
    events: list[str] | None = Field(default=None, min_length=1)
    """Event types sent (`RUN_FINISHED`, `APPROVAL_REQUESTED`, …); absent: every type."""
    min_depth: int | None = Field(default=None, ge=0)
    """Only events of agents at least this deep (the root is 0: `2` is grandchildren
    and below)."""
    max_depth: int | None = Field(default=None, ge=0)
    path_glob: str | None = None
    """Only events of agents whose path matches (`*` one segment, `**` any number)."""
    agent_ids: list[str] | None = None
    """Only events of these subagents."""
    secret_env: str = Field(min_length=1)
    """An environment variable holding its `whsec_<base64>` secret (24-64 bytes)."""
    body_template: dict[str, Any] | list[Any] | None = None
    """The body sent instead of the Standard Webhooks one, for a receiver that wants
    its own shape (a chat's incoming webhook: `{text: "…"}`): a JSON value whose
    strings are filled from that body as `{body.runId}`, `{body.type}`,
    `{body.data.data.status}` (docs/webhooks.md#a-chat-channel)."""

    def spec(self, secret: str) -> WebhookSpec:
        """As the outbox matches and signs it."""
        return WebhookSpec(
            url=self.url,
            events=self.events,
            min_depth=self.min_depth,
            max_depth=self.max_depth,
            path_glob=self.path_glob,
            agent_ids=self.agent_ids,
            secret=secret,
            body_template=self.body_template,
        )

    @model_validator(mode="after")
    def _valid(self) -> WebhookConfig:
        problems = self.spec("").problems("webhook")
        problems = [p.removeprefix("webhook.") for p in problems if ".secret:" not in p]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def secret(self, name: str) -> str:
        """Its secret, read from the environment when the server starts (a client's
        command that only reads the config's URL does not need it).

        Raises:
            ConfigError: the variable is missing or not a `whsec_` secret.
        """
        secret = os.environ.get(self.secret_env)
        if secret is None:
            raise ConfigError(
                f"webhooks.{name}.secret_env: the environment has no {self.secret_env}"
            )
        try:
            secret_key(secret)
        except ValueError as exc:
            raise ConfigError(f"webhooks.{name}.secret_env ({self.secret_env}): {exc}") from None
        return secret


class ServerConfig(BaseModel):
    """The whole server.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    server: ServerSection = Field(default_factory=ServerSection)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    """A URL (`memory://`, `sqlite:///PATH`, `redis://…`) or a mapping with `url`."""
    models: dict[str, ModelConfig] = Field(
        default_factory=lambda: {"default": ModelConfig(provider="scripted")}
    )
    subagents_dir: str = "subagents"
    approval: list[str] = Field(default_factory=list)
    """Tools whose calls wait for a person's decision, for every subagent whose YAML
    has no `approval` key (`"*"`: every tool)."""

    @field_validator("approval", mode="before")
    @classmethod
    def _every_tool(cls, value: object) -> object:
        """`approval: "*"` (as the docs write it) is `["*"]`."""
        return ["*"] if value == "*" else value

    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    """MCP servers whose tools subagents may list as `<name>__<tool>` (docs/mcp.md)."""
    telemetry: TelemetryConfig | None = None
    """OpenTelemetry traces of runs (None: off, the default; docs/integrations.md)."""
    compaction: CompactionSpec = Field(default_factory=CompactionSpec)
    """How agents compact a long conversation, for every subagent whose YAML has no
    `compaction` key (docs/configuration.md#compaction)."""
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    cluster: ClusterConfig | None = None
    """None: one process, any storage. Set: a cluster on the `redis://` storage."""
    triggers: dict[str, TriggerConfig] = Field(default_factory=dict)
    """Runs that start themselves on a schedule, by name (docs/triggers.md)."""
    webhooks: dict[str, WebhookConfig] = Field(default_factory=dict)
    """Events sent to other systems as they happen, by name (docs/webhooks.md)."""
    hooks: dict[str, HookConfig] = Field(default_factory=dict)
    """`POST /hooks/<agentId>`'s input template and secret, by agentId (needs
    `server.hooks: true`; an agent not listed takes `{"input": …}`)."""
    base_dir: Path = Field(default=Path("."), exclude=True)
    """Directory of the config file; relative paths resolve against it."""
    source: Path | None = Field(default=None, exclude=True)
    """The config file it was loaded from (None: made in code)."""

    def described(self, problems: list[str]) -> str:
        """`problems` (each naming its key) as one line naming the file, if any."""
        said = "; ".join(problems)
        return f"{self.source}: {said}" if self.source is not None else said

    @field_validator("storage", mode="before")
    @classmethod
    def _storage_url(cls, value: Any) -> Any:
        return {"url": value} if isinstance(value, str) else value

    @field_validator("mcp_servers")
    @classmethod
    def _mcp_names(cls, value: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        for name in value:
            if not _MCP_NAME.match(name) or "__" in name:
                raise ValueError(
                    f"{name!r}: an MCP server name is 1-32 letters, digits, '_' or '-' "
                    "(no '__': it separates the server from the tool)"
                )
        return value

    @model_validator(mode="after")
    def _mcp_needs_extra(self) -> ServerConfig:
        key = "mcp_servers" if self.mcp_servers else "server.mcp" if self.server.mcp else None
        if key is not None and not _installed("mcp"):
            raise ValueError(
                f"{key}: MCP needs the `mcp` extra: pip install 'agent-orchestrator[mcp]'"
            )
        return self

    @field_validator("triggers")
    @classmethod
    def _trigger_names(cls, value: dict[str, TriggerConfig]) -> dict[str, TriggerConfig]:
        for name in value:
            if not _TRIGGER_NAME.match(name):
                raise ValueError(f"{name!r}: a trigger name is 1-64 letters, digits, '_.-'")
        return value

    @field_validator("webhooks")
    @classmethod
    def _webhook_names(cls, value: dict[str, WebhookConfig]) -> dict[str, WebhookConfig]:
        for name in value:
            if not _TRIGGER_NAME.match(name):
                raise ValueError(f"{name!r}: a webhook name is 1-64 letters, digits, '_.-'")
        return value

    @model_validator(mode="after")
    def _webhooks_on_one_process(self) -> ServerConfig:
        if (self.webhooks or self.server.webhook_urls) and self.cluster is not None:
            raise ValueError(
                "webhooks: not yet in cluster mode (one outbox must send each delivery): "
                "run them on a single server"
            )
        return self

    @model_validator(mode="after")
    def _hooks_need_their_door(self) -> ServerConfig:
        if self.hooks and not self.server.hooks:
            raise ValueError("hooks: configured, but server.hooks is false (the door is off)")
        return self

    @model_validator(mode="after")
    def _ag_ui_needs_extra(self) -> ServerConfig:
        if self.server.ag_ui and not _installed("ag_ui.core"):
            raise ValueError(
                "server.ag_ui: AG-UI needs the `agui` extra: pip install 'agent-orchestrator[agui]'"
            )
        return self

    @model_validator(mode="after")
    def _a2a_needs_extra(self) -> ServerConfig:
        if self.server.a2a and not _installed("a2a.server"):
            raise ValueError(
                "server.a2a: A2A needs the `a2a` extra: pip install 'agent-orchestrator[a2a]'"
            )
        return self

    @model_validator(mode="after")
    def _telemetry_needs_extra(self) -> ServerConfig:
        needed = ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http")
        if self.telemetry is not None and not all(_installed(name) for name in needed):
            raise ValueError(
                "telemetry: traces need the `otel` extra: pip install 'agent-orchestrator[otel]'"
            )
        return self

    @model_validator(mode="after")
    def _cluster_needs_redis(self) -> ServerConfig:
        if self.cluster is not None and not self.storage.url.startswith("redis://"):
            raise ValueError(
                f"cluster: needs redis:// storage (the cluster lives in it), not {self.storage.url}"
            )
        return self

    @property
    def tools_root(self) -> Path:
        """The built-in file tools' root, resolved against the config file's directory."""
        return (self.base_dir / self.tools.root).resolve()

    @property
    def subagents_path(self) -> Path:
        """The subagents directory, resolved against the config file's directory."""
        return (self.base_dir / self.subagents_dir).resolve()


def _installed(module: str) -> bool:
    """Is `module` importable (a missing parent package counts as not installed)?"""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def load_config(path: Path | str) -> ServerConfig:
    """Load and validate a server config file.

    Raises:
        ConfigError: one line naming the file and the bad key.
    """
    path = Path(path)
    try:
        config = load_yaml_model(path, ServerConfig, reserved={"base_dir": "", "source": ""})
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return config.model_copy(update={"base_dir": path.resolve().parent, "source": path})
