"""Every fenced example of README.md and docs/ is checked as what it is, read from the
doc itself (tests/doc_examples.py): YAML loads as a server config or a subagent, JSON
as an event or an MCP client's config, every client op of a wire transcript parses,
every shell command parses with the command line it names, and a `file:` block is
that file. The examples that run (Python, the MCP example, the CLI) run in
tests/integration/test_doc_examples_run.py."""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from agents.core.structured import check_schema
from agents.errors import SpecError
from agents.spec import AgentSpec, load_specs
from orchestrator import protocol
from orchestrator.cli.commands import parser as _parser
from orchestrator.config import ConfigError, ServerConfig, load_config
from orchestrator.core.events import decode_event
from orchestrator.runtime.engine import builtin_tool_names
from tests.doc_examples import LANGUAGES, Example, client_frames, examples, shell_lines
from tests.helpers import REPO


def ids(found: list[Example]) -> list[str]:
    return [e.where for e in found]


def test_every_fence_names_what_it_holds() -> None:
    unnamed = [e.where for e in examples() if e.language not in LANGUAGES]
    assert not unnamed, f"give these fences one of {LANGUAGES} ('text': not to copy): {unnamed}"


FILES = [e for e in examples() if e.file is not None]


@pytest.mark.parametrize("example", FILES, ids=ids(FILES))
def test_a_file_block_is_that_file(example: Example) -> None:
    assert example.file is not None
    path = REPO / example.file
    assert path.is_file(), f"{example.where}: no file {example.file}"
    assert example.text == path.read_text(encoding="utf-8"), (
        f"{example.where} differs from {example.file}: change both"
    )


# -- YAML ------------------------------------------------------------------------------

YAML = examples("yaml")
SERVER_KEYS = set(ServerConfig.model_fields) - {"base_dir"}
SPEC_KEYS = set(AgentSpec.model_fields)


def configured(key: str) -> set[str]:
    """The names the docs' server configs give under `key` (`mcp_servers`, `models`):
    a subagent example may use them."""
    names: set[str] = set()
    for example in YAML:
        try:
            data = yaml.safe_load(example.text)
        except yaml.YAMLError:
            continue  # (that block's own test says what is wrong)
        if isinstance(data, dict) and isinstance(data.get(key), dict):
            names |= set(data[key])
    return names


def as_server_config(example: Example, data: dict[str, Any], root: Path) -> None:
    (root / "subagents").mkdir(exist_ok=True)
    path = root / "server.yaml"
    path.write_text(example.text, encoding="utf-8")
    load_config(path)


def as_subagent(example: Example, data: dict[str, Any], root: Path) -> None:
    known = {"models": {"default"} | configured("models"), "tools": builtin_tool_names()}
    if example.file is not None:  # a subagent of the repository: with the files beside it
        load_specs((REPO / example.file).parent, **known, mcp_servers=configured("mcp_servers"))
        return
    named = re.match(r"#\s*subagents/(\w+)\.ya?ml", example.text)
    directory = root / "subagents"
    directory.mkdir(exist_ok=True)
    text = example.text
    if example.excerpt:  # the rest of a subagent file, as small as it may be
        rest = {"description": "d", "instructions": "i"}
        text = yaml.safe_dump({k: v for k, v in rest.items() if k not in data}) + text
    (directory / f"{named.group(1) if named else 'example'}.yaml").write_text(text)
    load_specs(directory, **known, mcp_servers=configured("mcp_servers"))


@pytest.mark.parametrize("example", YAML, ids=ids(YAML))
def test_yaml_loads_as_a_server_config_or_a_subagent(example: Example, tmp_path: Path) -> None:
    data = yaml.safe_load(example.text)
    assert isinstance(data, dict), f"{example.where}: not a YAML mapping"
    kinds = []
    if set(data) <= SERVER_KEYS:
        kinds.append(as_server_config)
    if set(data) <= SPEC_KEYS:
        kinds.append(as_subagent)
    assert kinds, (
        f"{example.where}: keys {sorted(set(data) - SERVER_KEYS - SPEC_KEYS)} are neither "
        "a server config's nor a subagent's"
    )
    errors = []
    for i, kind in enumerate(kinds):
        root = tmp_path / str(i)
        root.mkdir()
        try:
            kind(example, data, root)
            return
        except (ConfigError, SpecError) as exc:
            errors.append(f"as {kind.__name__[3:]}: {exc}")
    pytest.fail(f"{example.where}: " + "; ".join(errors))


# -- JSON and wire transcripts ---------------------------------------------------------

JSON = examples("json")


@pytest.mark.parametrize("example", JSON, ids=ids(JSON))
def test_json_is_an_event_an_mcp_client_config_or_an_ag_ui_input(example: Example) -> None:
    data = json.loads(example.text)
    if example.file is not None and "/schemas/" in example.file:  # an output_schema's file
        check_schema(data, where=example.where)
        return
    if "threadId" in data:  # an AG-UI RunAgentInput: its answers must be answers
        from ag_ui.core import RunAgentInput

        from orchestrator.agui.mapping import answer_of
        from orchestrator.core.approvals import Answer

        run_input = RunAgentInput.model_validate(data)
        for entry in run_input.resume or ():
            answer = answer_of(entry.status, entry.payload, tool_call_id="call")
            assert isinstance(answer, Answer), f"{example.where}: {answer}"
        return
    if "mcpServers" in data:
        for name, entry in data["mcpServers"].items():
            if entry.get("type") == "http":
                assert entry["url"].endswith("/mcp"), f"{example.where}: {name}: not /mcp"
                assert entry["headers"]["Authorization"].startswith("Bearer ")
            else:
                assert Path(entry["command"]).name == "orchestrator"
                args = _parser().parse_args(entry["args"])
                assert args.command == "mcp"
        return
    if "op" in data:  # a client op, as the server parses it
        from orchestrator.protocol import parse

        parse(example.text)
        return
    assert {"runId", "seq", "type"} <= set(data), f"{example.where}: neither kind"
    decode_event(example.text)


TRANSCRIPTS = [e for e in examples() if client_frames(e)]


@pytest.mark.parametrize("example", TRANSCRIPTS, ids=ids(TRANSCRIPTS))
def test_every_client_op_of_a_transcript_parses(example: Example) -> None:
    for frame in client_frames(example):
        try:
            protocol.parse(frame)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            pytest.fail(f"{example.where}: {frame}: {exc}")


# -- shell -----------------------------------------------------------------------------

SH = examples("sh")
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def variants(words: list[str]) -> list[list[str]]:
    """`[--deny]`, `[--threshold 0]` written in a synopsis: the command with and without
    the bracketed options."""
    bare: list[str] = []
    full: list[str] = []
    inside = False
    for word in words:
        inside = inside or word.startswith("[")
        full.append(word.strip("[]") if inside else word)
        if not inside:
            bare.append(word)
        inside = inside and not word.endswith("]")
    return [bare, full]


def check_orchestrator(words: list[str], where: str) -> None:
    for argv in variants(words):
        try:
            args = _parser().parse_args(argv)
        except SystemExit:
            pytest.fail(f"{where}: `orchestrator {' '.join(argv)}` does not parse")
        config = getattr(args, "config", None)
        if config is not None:
            assert (REPO / config).is_file(), f"{where}: no {config} in the repository"


def check_pip(words: list[str], where: str) -> None:
    extras = PYPROJECT["optional-dependencies"]
    for word in words:
        found = re.fullmatch(r"(\.|[\w-]+)(?:\[([\w,]+)\])?", word)
        if word.startswith("-") or found is None:
            continue
        name, wanted = found.groups()
        assert name in (".", PYPROJECT["name"]), f"{where}: installs {name}, not this project"
        for extra in (wanted or "").split(","):
            assert not extra or extra in extras, f"{where}: no extra {extra!r}"


def check_module(words: list[str], where: str) -> None:
    """`python -m MODULE ARGS`: the module is there and takes those arguments."""
    module, args = words[2], words[3:]
    if module in ("venv", "pytest"):
        return
    assert importlib.util.find_spec(module) is not None, f"{where}: no module {module}"
    if module == "bench.soak":
        scenarios = importlib.import_module("bench.soak.__main__").SCENARIOS
        assert set(args) <= set(scenarios), f"{where}: scenarios are {sorted(scenarios)}"
        return
    command_line = getattr(importlib.import_module(module), "parser", None)
    if command_line is None:
        assert not args, f"{where}: {module} takes no arguments"
        return
    for argv in variants(args):
        try:
            command_line().parse_args(argv)
        except SystemExit:
            pytest.fail(f"{where}: `python -m {module} {' '.join(argv)}` does not parse")


def check_npm(words: list[str], where: str) -> None:
    """`npm ci|run SCRIPT|test --prefix DIR`, `npm pack DIR`: that package and script."""
    assert words[0] in ("ci", "install", "pack", "run", "test"), f"{where}: npm {words[0]}?"
    prefix = words[words.index("--prefix") + 1] if "--prefix" in words else None
    package = prefix or next((w for w in words[1:] if w.startswith("./")), ".")
    manifest = REPO / package / "package.json"
    assert manifest.is_file(), f"{where}: no {package}/package.json"
    if words[0] == "run":
        assert words[1] in json.loads(manifest.read_text())["scripts"], f"{where}: {words[1]}?"


def command_words(line: str) -> list[str]:
    """The words of a command after `NAME=value` settings and a wrapping `valgrind …`."""
    words = shlex.split(line)
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        words = words[1:]
    if words and words[0] == "valgrind":
        words = words[next(i for i, w in enumerate(words) if "python" in w) :]
    return words


@pytest.mark.parametrize("example", SH, ids=ids(SH))
def test_every_shell_command_parses(example: Example) -> None:
    for line in shell_lines(example):
        words = command_words(line)
        program = words[0].removeprefix(".venv/bin/")
        if program == "orchestrator":
            check_orchestrator(words[1:], example.where)
        elif program == "pip":
            check_pip(words[2:], example.where)
        elif program in ("python", "python3") and words[1] == "-m":
            check_module(words, example.where)
        elif program == "npm":
            check_npm(words[1:], example.where)
        else:
            pytest.fail(f"{example.where}: `{line}`: teach this test the command, or mark it text")


def test_the_readme_test_command_is_what_ci_runs() -> None:
    readme = [e for e in examples("sh") if e.doc == "README.md" and "pytest" in e.text]
    (command,) = [line for e in readme for line in e.text.splitlines() if "pytest" in line]
    ci = (REPO / ".ci" / "run").read_text().replace(" install -q ", " install ")
    assert command in ci.splitlines(), f".ci/run does not run the README's test command: {command}"
