"""Server configuration (contract §6), validated with pydantic at the edge.

Relative paths in the file resolve against the directory of the config file:
`subagents_dir: subagents` in `configs/server.yaml` is `configs/subagents`, and
`sqlite:///data/orchestrator.db` is `configs/data/orchestrator.db`. An absolute
path (`sqlite:////var/lib/o.db`) is taken as it is.
"""

from __future__ import annotations

from pathlib import Path

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator

from agents.config import ModelConfig, describe_validation_error, read_yaml_mapping

__all__ = [
    "ConfigError",
    "LimitsConfig",
    "ServerConfig",
    "ServerSection",
    "load_config",
]


class ConfigError(Exception):
    """The server config is invalid; the message names the file and the key."""


class ServerSection(BaseModel):
    """`server:` — where `orchestrator serve` listens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    tokens: list[str] = Field(default_factory=list)
    """Bearer tokens accepted on the WebSocket upgrade (empty: no auth)."""
    allowed_origins: list[str] | None = None
    """Origin header values accepted on the upgrade (None: any, including none)."""
    max_frame_bytes: int = Field(default=1024 * 1024, ge=1024)
    """Largest client frame accepted; a bigger one closes the connection with 1009."""
    max_subscriptions: int = Field(default=32, ge=1)
    """Most subscriptions one connection may hold at once."""
    slow_client_timeout: float = Field(default=60.0, gt=0)
    """Seconds a send to a client may make no progress before the client is closed (4000)."""


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


class ToolsConfig(BaseModel):
    """`tools:` — settings of the built-in tools."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    root: str = "workspace"
    """Directory `read_file`/`write_file` are confined to (relative: the config's dir)."""
    http_timeout: float = Field(default=10.0, gt=0)
    """Seconds an `http_get` may take."""


class ServerConfig(BaseModel):
    """The whole server.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    server: ServerSection = Field(default_factory=ServerSection)
    storage: str = "sqlite:///data/orchestrator.db"
    """`memory://`, `sqlite:///PATH` or `redis://HOST:PORT/DB`."""
    models: dict[str, ModelConfig] = Field(
        default_factory=lambda: {"default": ModelConfig(provider="scripted")}
    )
    subagents_dir: str = "subagents"
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    base_dir: Path = Field(default=Path("."), exclude=True)
    """Directory of the config file; relative paths resolve against it."""

    @field_validator("storage")
    @classmethod
    def _storage_url(cls, value: str) -> str:
        if not value.startswith(("memory://", "sqlite:///", "redis://")):
            raise ValueError("must start with memory://, sqlite:/// or redis://")
        return value

    @property
    def tools_root(self) -> Path:
        """The built-in file tools' root, resolved against the config file's directory."""
        return (self.base_dir / self.tools.root).resolve()

    @property
    def subagents_path(self) -> Path:
        """The subagents directory, resolved against the config file's directory."""
        return (self.base_dir / self.subagents_dir).resolve()


def load_config(path: Path | str) -> ServerConfig:
    """Load and validate a server config file.

    Raises:
        ConfigError: one line naming the file and the bad key.
    """
    path = Path(path)
    try:
        data = read_yaml_mapping(path)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if "base_dir" in data:
        raise ConfigError(f"{path}: base_dir: unknown key")
    try:
        config = ServerConfig.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ConfigError(describe_validation_error(path, exc)) from None
    return config.model_copy(update={"base_dir": path.resolve().parent})
