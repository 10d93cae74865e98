"""Model configuration: one entry of `models:` in server.yaml."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agents.core.structured import OutputMode

__all__ = ["ModelConfig", "TlsConfig"]


class TlsConfig(BaseModel):
    """How to trust a provider's certificate, and prove ours: `models.<key>.tls`.

    Certificates are always verified: against the system's trust store plus `ca_file`
    when it is given (a private CA, a self-signed gateway). Paths are relative to the
    server config's directory.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    ca_file: str | None = None
    """PEM file of the certificates (CAs, or the server's own self-signed one) to trust."""
    client_cert: str | None = None
    """PEM file of a client certificate, for a provider that asks for one (mutual TLS);
    it may hold the key too."""
    client_key: str | None = None
    """PEM file of the client certificate's key, when it is not in `client_cert`."""


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
    tls: TlsConfig | None = None
    """Certificates to trust (and to present) for this model's endpoint; None: the
    system's trust store."""
    structured_output: OutputMode | None = None
    """How an agent with an `output_schema` asks this model for it (docs/structured.md):
    `native` (OpenAI's `response_format`/`text.format` JSON schema), `tool` (a forced
    `final_answer` tool), `instruction` (said in the system prompt). Default: `native`
    for the OpenAI kinds, `tool` for Anthropic, `instruction` for `scripted`."""

    attachments: list[str] | None = None
    """Media types of attachments this model takes in its own blocks (`*` wildcards);
    another is given to it as a one-line note (a text file, as its text). Default:
    PNG, JPEG, GIF, WebP and PDF for the OpenAI kinds and Anthropic, none for
    `scripted` (docs/structured.md#attachments)."""

    def attachment_types(self) -> tuple[str, ...]:
        """`attachments`, or the provider's default."""
        if self.attachments is not None:
            return tuple(self.attachments)
        if self.provider == "scripted":
            return ()
        return ("image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf")

    @model_validator(mode="after")
    def _output_mode_offered(self) -> ModelConfig:
        if self.structured_output == "native" and self.provider in ("anthropic", "scripted"):
            raise ValueError(
                f"structured_output: 'native' is offered for the OpenAI kinds only; "
                f"{self.provider} takes 'tool' or 'instruction'"
            )
        return self

    def output_mode(self) -> OutputMode:
        """`structured_output`, or the provider's default."""
        if self.structured_output is not None:
            return self.structured_output
        if self.provider == "anthropic":
            return "tool"
        return "instruction" if self.provider == "scripted" else "native"

    def endpoint_root(self) -> str:
        """`base_url`, or the provider's public API root."""
        if self.base_url:
            return self.base_url
        if self.provider == "anthropic":
            return "https://api.anthropic.com/v1"
        return "https://api.openai.com/v1"
