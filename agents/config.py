"""Model configuration (an entry of `models:` in server.yaml) and the one-line
error format every YAML loader uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ModelConfig", "describe_validation_error", "read_yaml_mapping"]


class ModelConfig(BaseModel):
    """How to reach one model: `models.<key>` in server.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: Literal["openai", "openai-responses", "anthropic", "scripted"]
    """`openai` (any OpenAI-compatible Chat Completions endpoint), `openai-responses`,
    `anthropic` (Messages API) or `scripted` (offline)."""
    base_url: str | None = None
    """Endpoint root (`/chat/completions`, `/responses` or `/messages` is appended);
    default: the provider's public API."""
    api_key_env: str | None = None
    """Name of the environment variable that holds the API key (None: send no key)."""
    model: str = ""
    """The provider's model name, e.g. `gpt-4o-mini`."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Extra request fields passed as they are (`temperature`, `max_tokens`, …)."""
    connect_timeout: float = Field(default=10.0, gt=0)
    """Seconds to open the connection."""
    read_timeout: float = Field(default=120.0, gt=0)
    """Seconds to wait for the next bytes of a stream."""
    max_retries: int = Field(default=3, ge=0, le=20)
    """Retries of a model turn that failed retryably before streaming anything."""
    retry_base_delay: float = Field(default=1.0, ge=0)
    """First backoff in seconds (doubled each retry) when there is no Retry-After."""

    def endpoint_root(self) -> str:
        """`base_url`, or the provider's public API root."""
        if self.base_url:
            return self.base_url
        if self.provider == "anthropic":
            return "https://api.anthropic.com/v1"
        return "https://api.openai.com/v1"


def describe_validation_error(path: Path | str, exc: pydantic.ValidationError) -> str:
    """One line naming the file and every bad key: `f.yaml: limits.max_depth: …`."""
    problems = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            problems.append(f"{loc}: unknown key")
        elif err["type"] == "missing":
            problems.append(f"{loc}: required key is missing")
        else:
            problems.append(f"{loc}: {err['msg']} (got {err.get('input')!r})")
    return f"{path}: " + "; ".join(problems)


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """Read a YAML file that must hold a mapping.

    Raises:
        ValueError: one line naming the file and what is wrong with it.
    """
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ValueError(f"{path}: invalid YAML{where}: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of keys, got {type(data).__name__}")
    return data
