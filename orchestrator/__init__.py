"""Run trees of agents and watch every event of every agent live.

    from orchestrator import Orchestrator, load_config

    async with Orchestrator.open(load_config("configs/server.yaml")) as orch:
        async with orch.stream("planner", "compare trio and asyncio") as run:
            async for event in run:
                ...

The names below are the public face; everything else may move. Each loads on first
use, so in-process use does not import websockets, Redis or Prometheus clients (the
server's names), and the command line's `--help` imports none of them.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.config import ConfigError as ConfigError
    from orchestrator.config import ServerConfig as ServerConfig
    from orchestrator.config import load_config as load_config
    from orchestrator.core.events import Event as Event
    from orchestrator.core.events import EventType as EventType
    from orchestrator.core.events import RunStatus as RunStatus
    from orchestrator.core.events import Source as Source
    from orchestrator.core.events import Usage as Usage
    from orchestrator.core.fork import ForkError as ForkError
    from orchestrator.runtime.approvals import ApprovalError as ApprovalError
    from orchestrator.runtime.approvals import PendingApproval as PendingApproval
    from orchestrator.runtime.engine import Orchestrator as Orchestrator
    from orchestrator.runtime.engine import RunStream as RunStream
    from orchestrator.runtime.engine import UnknownAgent as UnknownAgent
    from orchestrator.runtime.run import RunResult as RunResult
    from orchestrator.server.app import RunningServer as RunningServer
    from orchestrator.server.app import serve as serve

_WHERE = {
    "ConfigError": "orchestrator.config",
    "ServerConfig": "orchestrator.config",
    "load_config": "orchestrator.config",
    "Event": "orchestrator.core.events",
    "EventType": "orchestrator.core.events",
    "RunStatus": "orchestrator.core.events",
    "Source": "orchestrator.core.events",
    "Usage": "orchestrator.core.events",
    "ForkError": "orchestrator.core.fork",
    "ApprovalError": "orchestrator.runtime.approvals",
    "PendingApproval": "orchestrator.runtime.approvals",
    "Orchestrator": "orchestrator.runtime.engine",
    "RunStream": "orchestrator.runtime.engine",
    "UnknownAgent": "orchestrator.runtime.engine",
    "RunResult": "orchestrator.runtime.run",
    "RunningServer": "orchestrator.server.app",
    "serve": "orchestrator.server.app",
}
"""Where each public name lives: each loads on first use (PEP 562), so the command
line's `--help` imports none of them."""

__all__ = [
    "ApprovalError",
    "ConfigError",
    "Event",
    "EventType",
    "ForkError",
    "Orchestrator",
    "PendingApproval",
    "RunResult",
    "RunStatus",
    "RunStream",
    "RunningServer",
    "ServerConfig",
    "Source",
    "UnknownAgent",
    "Usage",
    "load_config",
    "serve",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value
