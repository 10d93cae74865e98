"""Run trees of agents and watch every event of every agent live.

    from orchestrator import Orchestrator, load_config

    async with Orchestrator.open(load_config("configs/server.yaml")) as orch:
        async with orch.stream("planner", "compare trio and asyncio") as run:
            async for event in run:
                ...

The names below are the public face; everything else may move. The server's
(`serve`, `RunningServer`) load on first use, so in-process use does not import
websockets, Redis or Prometheus clients.
"""

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from orchestrator.server.app import RunningServer as RunningServer
    from orchestrator.server.app import serve as serve

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
    if name in ("serve", "RunningServer"):
        from orchestrator.server import app

        return getattr(app, name)
    raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
