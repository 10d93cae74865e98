"""Builds the provider for an agent from its model config."""

from __future__ import annotations

import httpx

from agents.core.structured import OutputMode
from agents.model_config import ModelConfig
from agents.providers.anthropic import AnthropicProvider
from agents.providers.base import Provider
from agents.providers.fallback import ModelChain
from agents.providers.openai_chat import OpenAIProvider
from agents.providers.openai_responses import OpenAIResponsesProvider
from agents.providers.retry import RetryingProvider
from agents.providers.scripted import ScriptedProvider
from agents.providers.sse_provider import SseProvider
from agents.spec import AgentSpec

__all__ = ["ProviderFactory"]


class ProviderFactory:
    """Maps (agent spec, model config) to a provider; HTTP providers share one client."""

    def __init__(
        self,
        models: dict[str, ModelConfig],
        client: httpx.AsyncClient,
        clients: dict[str, httpx.AsyncClient] | None = None,
    ) -> None:
        self._models = models
        self._client = client
        self._clients = clients or {}
        """Model key → a client of its own (a model with `tls:` settings)."""
        self._http: dict[str, Provider] = {}

    def for_agent(self, spec: AgentSpec) -> Provider:
        """The provider that runs `spec`'s model turns: its model's, or (with
        `fallback_models`) a `ModelChain` of one instance, its own model first."""
        if not spec.fallback_models:
            return self.for_model(spec.model, spec)
        keys = [spec.model, *spec.fallback_models]
        return ModelChain([(key, self.for_model(key, spec)) for key in keys], spec.fallback_on)

    def output_mode(self, spec: AgentSpec) -> OutputMode:
        """How `spec`'s model is asked for its `output_schema`."""
        return self._models[spec.model].output_mode()

    def for_model(self, key: str, spec: AgentSpec) -> Provider:
        """The provider of model `key` (a `scripted` one plays `spec`'s script)."""
        config = self._models[key]
        if config.provider == "scripted":
            return ScriptedProvider(spec.script)
        provider = self._http.get(key)
        if provider is None:
            kinds: dict[str, type[SseProvider]] = {
                "openai": OpenAIProvider,
                "openai-responses": OpenAIResponsesProvider,
                "anthropic": AnthropicProvider,
            }
            client = self._clients.get(key, self._client)
            inner = kinds[config.provider](config, client)
            provider = RetryingProvider(
                inner, max_retries=config.max_retries, base_delay=config.retry_base_delay
            )
            self._http[key] = provider
        return provider
