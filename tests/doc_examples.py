"""The fenced examples of README.md and docs/*.md, read from the docs themselves, so
that editing a doc changes what the tests run (tests/unit/test_doc_examples.py,
tests/integration/test_doc_examples_run.py).

A fence names its language: `sh`, `yaml`, `json`, `python`, `js`, `ts`, `tsx`, or
`text` (output, a diagram, a wire transcript: read, not copied). A marker on the line
above a fence says what else it is:

- `<!-- excerpt -->`: part of a file (a YAML block is checked with the rest filled in);
- `<!-- file: PATH -->`: the whole of the repository's file PATH, character for character;
- `<!-- run: node -->`, `<!-- run: browser -->`: a program the tests run as written
  (docs/js.md: with Node 22, or bundled into a page in Chromium).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import REPO

LANGUAGES = ("sh", "yaml", "json", "python", "js", "ts", "tsx", "text")
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
_MARKER = re.compile(r"<!--\s*(excerpt|file:\s*(\S+)|run:\s*(\S+))\s*-->\s*\n$")


@dataclass(frozen=True)
class Example:
    """One fenced block: where it is, its language, its text and its marker."""

    doc: str
    line: int
    language: str
    text: str
    excerpt: bool = False
    file: str | None = None
    run: str | None = None

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def docs() -> list[Path]:
    """README.md and every page of docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def examples(language: str | None = None) -> list[Example]:
    """Every fenced block of the docs (of one language)."""
    found: list[Example] = []
    for path in docs():
        text = path.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            before = text[max(0, match.start() - 200) : match.start()]
            marker = _MARKER.search(before)
            found.append(
                Example(
                    doc=str(path.relative_to(REPO)),
                    line=text.count("\n", 0, match.start()) + 1,
                    language=match.group(1).strip(),
                    text=match.group(2),
                    excerpt=marker is not None and marker.group(1) == "excerpt",
                    file=marker.group(2) if marker is not None else None,
                    run=marker.group(3) if marker is not None else None,
                )
            )
    return [e for e in found if language is None or e.language == language]


def shell_lines(example: Example) -> list[str]:
    """The commands of an `sh` block: comments dropped, continued lines joined, `&&`
    chains split."""
    commands: list[str] = []
    pending = ""
    for raw in example.text.splitlines():
        line = pending + _strip_comment(raw).strip()
        if line.endswith("\\"):  # continued on the next line
            pending = line[:-1] + " "
            continue
        pending = ""
        if line:
            commands.extend(part.strip() for part in line.split("&&"))
    return commands


def _strip_comment(line: str) -> str:
    """`line` without a trailing `# comment` (outside quotes)."""
    quote: str | None = None
    for i, char in enumerate(line):
        if quote is not None:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def client_frames(example: Example) -> list[str]:
    """The client ops (`→ {…}`) of a wire transcript, each without its comment."""
    return [
        _strip_comment(line[1:]).strip()
        for line in example.text.splitlines()
        if line.startswith("→")
    ]
