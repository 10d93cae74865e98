"""Names with `*` wildcards (tool lists, approval lists): matched in linear time (pure)."""

from __future__ import annotations

__all__ = ["wildcard_match"]


def wildcard_match(pattern: str, name: str) -> bool:
    """`*` matches any run of characters (none too); everything else matches itself.

    The pattern is cut at its stars; each piece is found left to right with
    `str.find`, the first piece anchored at the start and the last at the end: no
    backtracking, so the time is linear in `len(name)` per piece.
    """
    if "*" not in pattern:
        return pattern == name
    pieces = pattern.split("*")
    first, last = pieces[0], pieces[-1]
    if not name.startswith(first) or len(name) < len(first) + len(last):
        return False
    if last and not name.endswith(last):
        return False
    at, stop = len(first), len(name) - len(last)
    for piece in pieces[1:-1]:
        if not piece:
            continue
        found = name.find(piece, at, stop)
        if found < 0:
            return False
        at = found + len(piece)
    return True
