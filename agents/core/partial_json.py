"""A streaming reader for JSON that arrives in pieces, with path subscriptions.

Feed it the fragments of a tool call's arguments as the model streams them; it
reports the values at the paths you subscribed to as soon as they are known —
strings while they grow, as the *new piece* only (so the bytes reported over a
whole value are linear in its size, not quadratic), numbers/booleans/null once
complete. Paths use a small JSONPath subset: `$.task`, `$.nodes[*].title`,
`$.items[0]`, `$.*.name`.

It never raises: on input that is not JSON it stops reporting (the final parse of
the whole arguments names the problem).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["PartialJson", "compile_path", "format_path"]

Path = tuple[str | int, ...]
_SEGMENT = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*|\*)|\[(\*|\d+)\]|\[\"([^\"]*)\"\]")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_DELIMS = frozenset(",}] \t\r\n")
_ANY = object()


def compile_path(pattern: str) -> tuple[object, ...]:
    """`$.nodes[*].title` → ("nodes", ANY, "title"); raises ValueError if malformed."""
    if not pattern.startswith("$"):
        raise ValueError(f"path must start with '$': {pattern!r}")
    out: list[object] = []
    pos = 1
    while pos < len(pattern):
        m = _SEGMENT.match(pattern, pos)
        if m is None:
            raise ValueError(f"bad path segment at {pattern[pos:]!r} in {pattern!r}")
        name, index, quoted = m.groups()
        if name is not None:
            out.append(_ANY if name == "*" else name)
        elif quoted is not None:
            out.append(quoted)
        else:
            out.append(_ANY if index == "*" else int(index))
        pos = m.end()
    return tuple(out)


def format_path(path: Path) -> str:
    """("nodes", 0, "title") → `$.nodes[0].title`."""
    out = "$"
    for seg in path:
        out += f"[{seg}]" if isinstance(seg, int) else f".{seg}"
    return out


class _Frame:
    __slots__ = ("index", "is_obj", "key", "state")

    def __init__(self, is_obj: bool) -> None:
        self.is_obj = is_obj
        self.key: str | int | None = None if is_obj else 0
        self.index = 0
        # obj: key_or_end, key, colon, value, comma_or_end; arr: value_or_end, value, comma_or_end
        self.state = "key_or_end" if is_obj else "value_or_end"


class PartialJson:
    """Incremental reader; `feed()` returns `{path: value so far}` for changed subscribed paths."""

    def __init__(self, paths: Iterable[str]) -> None:
        self._patterns = [compile_path(p) for p in paths]
        self._stack: list[_Frame] = []
        self._top_done = False
        self._broken = False
        # current scalar token
        self._in_string = False
        self._string_is_key = False
        self._buf: list[str] = []
        self._escape: str | None = None  # None, "\\", or "u" + hex digits so far
        self._high_surrogate: int | None = None
        self._literal: list[str] | None = None
        self.values: dict[str, Any] = {}
        """Complete value per concrete subscribed path (strings once they are closed)."""
        self._sent: dict[str, int] = {}
        """Characters of a growing string already reported, per path."""

    @property
    def broken(self) -> bool:
        """True once the input stopped being valid JSON."""
        return self._broken

    # -- paths -----------------------------------------------------------------

    def _path(self) -> Path:
        return tuple(f.key for f in self._stack if f.key is not None)

    def _watched(self, path: Path) -> bool:
        for pattern in self._patterns:
            if len(pattern) == len(path) and all(
                p is _ANY or p == s for p, s in zip(pattern, path, strict=True)
            ):
                return True
        return False

    def _report(self, value: Any, updates: dict[str, Any]) -> None:
        path = self._path()
        if self._watched(path):
            name = format_path(path)
            if self.values.get(name, _ANY) != value:
                self.values[name] = value
                updates[name] = value

    def _report_string(self, updates: dict[str, Any], *, done: bool) -> None:
        """Report what a watched string gained since it was last reported."""
        path = self._path()
        if not self._watched(path):
            return
        name = format_path(path)
        sent = self._sent.get(name, 0)
        if len(self._buf) > sent or (done and name not in self._sent):
            piece = "".join(self._buf[sent:])
            updates[name] = piece
            self._sent[name] = len(self._buf)
        if done:
            self.values[name] = "".join(self._buf)

    # -- feeding ---------------------------------------------------------------

    def feed(self, text: str) -> dict[str, Any]:
        """Consume a fragment; return what it added at subscribed paths.

        A string value's entry is the text it gained in this fragment (concatenate
        the pieces); any other value's entry is the value, once complete.
        """
        updates: dict[str, Any] = {}
        if self._broken:
            return updates
        try:
            for ch in text:
                self._char(ch, updates)
        except ValueError:
            self._broken = True
        if self._in_string and not self._string_is_key and not self._broken:
            self._report_string(updates, done=False)
        return updates

    def _char(self, ch: str, updates: dict[str, Any]) -> None:
        if self._in_string:
            self._string_char(ch, updates)
            return
        if self._literal is not None:
            if ch not in _DELIMS:
                self._literal.append(ch)
                return
            self._end_literal(updates)
        if ch in " \t\r\n":
            return
        if self._top_done:
            raise ValueError("data after the top-level value")
        frame = self._stack[-1] if self._stack else None
        if frame is None:
            self._value_start(ch, updates)
            return
        state = frame.state
        if frame.is_obj:
            if state in ("key_or_end", "key"):
                if ch == '"':
                    self._in_string, self._string_is_key, self._buf = True, True, []
                elif ch == "}" and state == "key_or_end":
                    self._close()
                else:
                    raise ValueError(f"expected a key, got {ch!r}")
            elif state == "colon":
                if ch != ":":
                    raise ValueError("expected ':'")
                frame.state = "value"
            elif state == "value":
                self._value_start(ch, updates)
            elif state == "comma_or_end":
                if ch == ",":
                    frame.state, frame.key = "key", None
                elif ch == "}":
                    self._close()
                else:
                    raise ValueError("expected ',' or '}'")
        else:
            if state in ("value_or_end", "value"):
                if ch == "]" and state == "value_or_end":
                    self._close()
                else:
                    self._value_start(ch, updates)
            elif state == "comma_or_end":
                if ch == ",":
                    frame.index += 1
                    frame.key = frame.index
                    frame.state = "value"
                elif ch == "]":
                    self._close()
                else:
                    raise ValueError("expected ',' or ']'")

    def _value_start(self, ch: str, updates: dict[str, Any]) -> None:
        if ch == "{":
            self._stack.append(_Frame(True))
        elif ch == "[":
            self._stack.append(_Frame(False))
        elif ch == '"':
            self._in_string, self._string_is_key, self._buf = True, False, []
        elif ch in "-0123456789tfn":
            self._literal = [ch]
        else:
            raise ValueError(f"unexpected {ch!r}")

    def _value_done(self) -> None:
        if self._stack:
            self._stack[-1].state = "comma_or_end"
        else:
            self._top_done = True

    def _close(self) -> None:
        self._stack.pop()
        self._value_done()

    def _end_literal(self, updates: dict[str, Any]) -> None:
        token = "".join(self._literal or ())
        self._literal = None
        if token == "true":
            value: Any = True
        elif token == "false":
            value = False
        elif token == "null":
            value = None
        else:
            if not re.fullmatch(r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?", token):
                raise ValueError(f"bad literal {token!r}")
            value = float(token) if any(c in token for c in ".eE") else int(token)
        self._report(value, updates)
        self._value_done()

    def _string_char(self, ch: str, updates: dict[str, Any]) -> None:
        esc = self._escape
        if esc is not None:
            if esc == "\\":
                if ch == "u":
                    self._escape = "u"
                    return
                if ch not in _ESCAPES:
                    raise ValueError(f"bad escape \\{ch}")
                self._buf.append(_ESCAPES[ch])
                self._escape = None
                return
            esc += ch
            if len(esc) < 5:
                self._escape = esc
                return
            self._escape = None
            code = int(esc[1:], 16)
            if 0xD800 <= code < 0xDC00:
                self._high_surrogate = code
                return
            if 0xDC00 <= code < 0xE000 and self._high_surrogate is not None:
                code = 0x10000 + ((self._high_surrogate - 0xD800) << 10) + (code - 0xDC00)
            self._high_surrogate = None
            self._buf.append(chr(code))
            return
        if ch == "\\":
            self._escape = "\\"
        elif ch == '"':
            self._in_string = False
            text = "".join(self._buf)
            if self._string_is_key:
                frame = self._stack[-1]
                frame.key = text
                frame.state = "colon"
            else:
                self._report_string(updates, done=True)
                self._value_done()
        else:
            self._buf.append(ch)
