"""The agent runner: one agent instance driven from its task to its final answer.

`agent.py` holds `AgentRunner` (the lifecycle, and the shell that carries out the
pure loop's steps, `agents/core/loop.py`); the rooms it carries them out with are
`turn.py` (one model turn's stream), `tools.py` (tool calls and approvals),
`compactor.py` (compaction) and `background.py` (the inbox and background work).
"""

from agents.runner.agent import AgentOutcome, AgentRunner, BackgroundAgain, Cancellation, Phase
from agents.runner.compactor import Summarizer
from agents.runner.tools import is_cancellation
from agents.runner.turn import TurnLimits

__all__ = [
    "AgentOutcome",
    "AgentRunner",
    "BackgroundAgain",
    "Cancellation",
    "Phase",
    "Summarizer",
    "TurnLimits",
    "is_cancellation",
]
