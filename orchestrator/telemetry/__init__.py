"""OpenTelemetry traces of runs (docs/integrations.md): `trace.py` turns a run's events
into GenAI spans (pure), `export.py` follows the runs and exports them (the `otel`
extra, imported only when `telemetry:` is configured)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from agents.spec import AgentSpec
from orchestrator.config import ServerConfig

if TYPE_CHECKING:
    from orchestrator.storage.journal import Journal
    from orchestrator.telemetry.export import Telemetry

__all__ = ["traced"]


@asynccontextmanager
async def traced(
    config: ServerConfig, journal: Journal, specs: Mapping[str, AgentSpec]
) -> AsyncIterator[Telemetry | None]:
    """Trace the runs `journal` executes, for the block, if `telemetry:` is configured
    (None otherwise: nothing is imported, nothing follows the runs)."""
    if config.telemetry is None:
        yield None
        return
    from orchestrator.telemetry.export import model_info, model_key_info, open_telemetry

    models = model_info(specs, config.models)

    def name(agent_id: str) -> str:
        spec = specs.get(agent_id)
        return spec.display_name if spec is not None else agent_id

    keys = model_key_info(config.models)
    async with open_telemetry(
        config.telemetry, journal, models, names=name, model_keys=keys
    ) as hub:
        yield hub
