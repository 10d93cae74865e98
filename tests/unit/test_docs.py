"""The docs name every config key and event type the code has (docs stay true)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from agents.model_config import ModelConfig
from agents.spec import AgentSpec, ScriptSpec, ScriptStep
from orchestrator.config import (
    LimitsConfig,
    RetentionConfig,
    ServerConfig,
    ServerSection,
    StorageConfig,
    TokenConfig,
    ToolsConfig,
)
from orchestrator.core.events import EventType
from tests.helpers import REPO


@pytest.mark.parametrize(
    ("model", "prefix"),
    [
        (ServerConfig, ""),
        (ServerSection, "server."),
        (LimitsConfig, "limits."),
        (ToolsConfig, "tools."),
        (StorageConfig, "storage."),
        (RetentionConfig, "storage.retention."),
        (TokenConfig, ""),
        (ModelConfig, ""),
        (AgentSpec, ""),
        (ScriptSpec, ""),
        (ScriptStep, "turns[]."),
    ],
)
def test_configuration_doc_names_every_key(model: type[BaseModel], prefix: str) -> None:
    doc = (REPO / "docs" / "configuration.md").read_text()
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        spellings = (f"`{prefix}{name}`", f"`{prefix}{name}.", f"`{prefix}{name}[].")
        assert any(s in doc for s in spellings), f"{model.__name__}.{name} is not documented"


def test_events_doc_names_every_type() -> None:
    doc = (REPO / "docs" / "events.md").read_text()
    for kind in EventType:
        assert f"| `{kind.value}` |" in doc
