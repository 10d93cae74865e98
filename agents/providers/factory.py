"""Builds the provider for an agent from its model config."""

from __future__ import annotations

import httpx

from agents.model_config import ModelConfig
from agents.providers.anthropic import AnthropicProvider
from agents.providers.base import Provider
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
        """The provider that runs `spec`'s model turns."""
        config = self._models[spec.model]
        if config.provider == "scripted":
            return ScriptedProvider(spec.script)
        provider = self._http.get(spec.model)
        if provider is None:
            kinds: dict[str, type[SseProvider]] = {
                "openai": OpenAIProvider,
                "openai-responses": OpenAIResponsesProvider,
                "anthropic": AnthropicProvider,
            }
            client = self._clients.get(spec.model, self._client)
            inner = kinds[config.provider](config, client)
            provider = RetryingProvider(
                inner, max_retries=config.max_retries, base_delay=config.retry_base_delay
            )
            self._http[spec.model] = provider
        return provider
