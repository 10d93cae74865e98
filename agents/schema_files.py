"""An `output_schema` may keep its parts in files beside the subagent's YAML.

`{"$ref": "verdict.json"}` anywhere in the schema is replaced by that file's content
(JSON, or YAML), read relative to the file that holds the reference and never from
outside the subagents' folder. A reference inside a schema (`#/$defs/x`) is left to
the validator; any other (a URL) is refused by `check_schema`: nothing is fetched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["MAX_SCHEMA_FILES", "inline_file_refs"]

MAX_SCHEMA_FILES = 32
"""Files one schema may read (each counted every time it is referenced)."""


def inline_file_refs(schema: Any, base: Path, root: Path) -> Any:
    """`schema` with every file `$ref` replaced by the file's content.

    Args:
        schema: a schema as read from a file.
        base: the folder of the file that holds `schema`.
        root: the folder no referenced file may be outside of.

    Raises:
        ValueError: a file is missing, outside `root`, not a schema, or references
            itself (directly or not), or too many files are read.
    """
    return _Inliner(root.resolve()).inline(schema, base, ())


class _Inliner:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.read = 0

    def inline(self, node: Any, base: Path, chain: tuple[Path, ...]) -> Any:
        if isinstance(node, list):
            return [self.inline(item, base, chain) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and _is_file(ref):
            content = self._read(ref, base, chain)
            rest = {k: self.inline(v, base, chain) for k, v in node.items() if k != "$ref"}
            return {"allOf": [content], **rest} if rest else content
        return {key: self.inline(value, base, chain) for key, value in node.items()}

    def _read(self, ref: str, base: Path, chain: tuple[Path, ...]) -> Any:
        import yaml

        path = (base / ref).resolve()
        if not path.is_relative_to(self.root):
            raise ValueError(f"$ref {ref!r}: outside the subagents folder")
        if path in chain:
            raise ValueError(f"$ref {ref!r}: refers back to itself")
        self.read += 1
        if self.read > MAX_SCHEMA_FILES:
            raise ValueError(f"$ref {ref!r}: more than {MAX_SCHEMA_FILES} schema files")
        try:
            content = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ValueError(f"$ref {ref!r}: cannot read {path} ({exc.strerror or exc})") from None
        except yaml.YAMLError as exc:
            raise ValueError(f"$ref {ref!r}: {path} is not JSON or YAML ({exc})") from None
        if not isinstance(content, dict):
            raise ValueError(f"$ref {ref!r}: {path} does not hold a schema object")
        return self.inline(content, path.parent, (*chain, path))


def _is_file(ref: str) -> bool:
    """A relative file path (not `#…` inside the schema, not a URL)."""
    return not ref.startswith("#") and "://" not in ref and "#" not in ref
