"""Listeners: who hears of a change, subscribed rather than assigned.

A slot (`writer.on_fenced = …`) has one owner, and a second one silently replaces
the first. `Listeners` keeps every subscriber, in order, until it unsubscribes;
each is called at once, in the change itself (no task, no await), so what it does
must be quick and must not raise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, ParamSpec

__all__ = ["Listeners"]

P = ParamSpec("P")


class Listeners(Generic[P]):
    """Callables told of one kind of change, with its arguments."""

    __slots__ = ("_listeners",)

    def __init__(self) -> None:
        self._listeners: list[Callable[P, None]] = []

    def subscribe(self, listener: Callable[P, None]) -> Callable[[], None]:
        """Tell `listener` of every change from now; returns what unsubscribes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Tell every listener, in the order they subscribed."""
        for listener in list(self._listeners):
            listener(*args, **kwargs)
