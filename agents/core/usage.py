"""Token accounting up the agent tree, with budgets (pure).

Each agent instance has a `UsageNode`. A model turn's usage is charged to the
instance and, at once, to every ancestor's subtree total — so a budget is checked
while children are still running, not when they report back. The first time a
node's subtree total goes over its budget, its `on_trip` callback runs (the
runtime cancels that subtree).
"""

from __future__ import annotations

from collections.abc import Callable

from agents.core.events import Usage

__all__ = ["UsageNode"]


class UsageNode:
    """Own usage, subtree usage and an optional budget of one agent instance."""

    __slots__ = ("budget", "budget_source", "on_trip", "own", "parent", "subtree", "tripped")

    def __init__(
        self,
        parent: UsageNode | None = None,
        *,
        budget: int | None = None,
        budget_source: str = "budget_tokens",
        on_trip: Callable[[], None] | None = None,
    ) -> None:
        self.parent = parent
        self.budget = budget
        self.budget_source = budget_source
        self.on_trip = on_trip
        self.own = Usage()
        self.subtree = Usage()
        self.tripped = False

    @property
    def spent(self) -> int:
        """Input plus output tokens of the whole subtree."""
        return self.subtree.input_tokens + self.subtree.output_tokens

    def charge(self, used: Usage) -> None:
        """Add one model turn's usage here and to every ancestor; trip budgets."""
        self.own.add(used)
        node: UsageNode | None = self
        while node is not None:
            node.subtree.add(used)
            if node.budget is not None and not node.tripped and node.spent > node.budget:
                node.tripped = True
                if node.on_trip is not None:
                    node.on_trip()
            node = node.parent

    def describe_trip(self) -> str:
        """Why this node tripped, for AGENT_ERROR and the parent's tool result."""
        return (
            f"token budget exceeded: {self.spent} tokens used, "
            f"{self.budget_source} is {self.budget}"
        )
