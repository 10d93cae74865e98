"""MCP's pure parts: the names models see, wildcard patterns, results as text, config."""

from __future__ import annotations

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from agents.approval import ApprovalPolicy
from agents.core.wildcard import wildcard_match
from orchestrator.config import McpServerConfig, ServerConfig
from orchestrator.mcp.names import MAX_NAME, exposed_names, server_of
from orchestrator.mcp.results import result_text


class Block:
    def __init__(self, **fields: object) -> None:
        self.__dict__.update(fields)


def test_names_are_valid_for_every_provider_unique_and_reported() -> None:
    long = "x" * 80
    names, notes = exposed_names("fs", ["read", "odd name!", "odd_name_", long])
    assert list(names.values()) == ["read", "odd name!", "odd_name_", long]
    assert names["fs__read"] == "read"
    for exposed in names:
        assert len(exposed) <= MAX_NAME and all(c.isalnum() or c in "_-" for c in exposed)
    assert len(set(names)) == 4  # the two that collide after cleaning got hash suffixes
    assert len(notes) == 3 and any("collides" in n for n in notes)
    assert any("too long" in n for n in notes)
    again, _ = exposed_names("fs", ["read", "odd name!", "odd_name_", long])
    assert again == names  # stable: the same names after a restart


@given(st.lists(st.text(min_size=1, max_size=100), min_size=1, max_size=20, unique=True))
def test_every_tool_gets_one_valid_name(tools: list[str]) -> None:
    names, _ = exposed_names("srv", tools)
    assert sorted(names.values()) == sorted(tools)
    assert all(len(n) <= MAX_NAME for n in names)


def test_wildcards() -> None:
    assert wildcard_match("fs__*", "fs__read")
    assert wildcard_match("*", "anything")
    assert wildcard_match("gh__search_*_issues", "gh__search_open_issues")
    assert not wildcard_match("fs__*", "gh__read")
    assert not wildcard_match("a*b*c", "acb")
    assert wildcard_match("a*a", "aa") and not wildcard_match("a*a", "a")
    assert wildcard_match("plain", "plain") and not wildcard_match("plain", "plainer")
    assert server_of("fs__read") == "fs" and server_of("read_file") is None
    assert server_of("__x") is None


@given(st.text(alphabet="ab*", max_size=12), st.text(alphabet="ab", max_size=12))
def test_wildcards_agree_with_fnmatch(pattern: str, name: str) -> None:
    import fnmatch

    assert wildcard_match(pattern, name) == fnmatch.fnmatchcase(name, pattern)


def test_approval_lists_may_use_mcp_patterns() -> None:
    policy = ApprovalPolicy(tools=frozenset({"fs__write_*"}))
    assert policy.requires("fs__write_file") and not policy.requires("fs__read_file")


def test_results_become_text() -> None:
    blocks = [
        Block(type="text", text="hello"),
        Block(type="image", data="aGVsbG8=", mime_type="image/png"),
        Block(type="resource", resource=Block(uri="file:///a", text="inside")),
        Block(type="resource", resource=Block(uri="file:///b", blob="AAAA", mime_type=None)),
        Block(type="resource_link", uri="file:///c", name="c"),
    ]
    assert result_text(blocks, None, 10_000) == (
        "hello\n\n[image image/png, 5 bytes]\n\n[resource file:///a]\ninside\n\n"
        "[resource file:///b application/octet-stream, 3 bytes]\n\n[resource link file:///c c]"
    )
    assert result_text([], {"n": 1}, 100) == '{"n":1}'
    assert result_text([Block(type="text", text="x" * 50)], None, 10) == (
        "x" * 10 + "…[truncated 40 characters]"
    )


def test_config_checks_each_server() -> None:
    with pytest.raises(ValidationError, match="either `command`"):
        McpServerConfig()
    with pytest.raises(ValidationError, match="either `command`"):
        McpServerConfig(command="x", url="http://h/mcp")
    with pytest.raises(ValidationError, match="token_env: not used by an stdio"):
        McpServerConfig(command="x", token_env="T")
    with pytest.raises(ValidationError, match="env, cwd: not used by an HTTP"):
        McpServerConfig(url="http://h/mcp", env={"A": "b"}, cwd="/")
    with pytest.raises(ValidationError, match="no '__'"):
        ServerConfig.model_validate({"mcp_servers": {"a__b": {"command": "x"}}})
    ServerConfig.model_validate({"mcp_servers": {"fs-1": {"command": "x"}}})


def test_mcp_without_the_extra_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mcp" else real(name, *a)
    )
    with pytest.raises(ValidationError, match=r"mcp_servers: MCP needs the `mcp` extra: pip"):
        ServerConfig.model_validate({"mcp_servers": {"fs": {"command": "x"}}})
    with pytest.raises(ValidationError, match=r"server.mcp: MCP needs the `mcp` extra"):
        ServerConfig.model_validate({"server": {"mcp": True}})
    ServerConfig.model_validate({})  # nothing asks for MCP: no error


def test_traces_and_ag_ui_without_their_extras_are_clear_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    missing = ("opentelemetry", "ag_ui")
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name.split(".")[0] in missing else real(name, *a),
    )
    with pytest.raises(ValidationError, match=r"telemetry: traces need the `otel` extra: pip"):
        ServerConfig.model_validate({"telemetry": {"otlp_endpoint": "http://c:4318"}})
    with pytest.raises(ValidationError, match=r"server.ag_ui: AG-UI needs the `agui` extra"):
        ServerConfig.model_validate({"server": {"ag_ui": True}})


class Progress:
    """A stand-in MCP `Context` that records the progress it is told."""

    def __init__(self) -> None:
        self.told: list[tuple[float, float | None, str | None]] = []

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        self.told.append((progress, total, message))


async def test_progress_says_when_the_run_waits_for_a_person(autojump_clock: object) -> None:
    """Regression: a call waiting for approval showed only "0/1 agents done"."""
    pytest.importorskip("mcp", reason="needs the `mcp` extra: pip install -e '.[dev]'")
    from orchestrator.mcp.expose import TreeProgress

    ctx = Progress()
    progress = TreeProgress(ctx, "boss")  # type: ignore[arg-type]
    progress.see("AGENT_STARTED", "s/writer")
    await progress.report()
    assert ctx.told[-1][2] == "0/2 agents done · s/writer"
    request = {"toolCallId": "call_0", "name": "write_file", "args": {}}
    progress.see("APPROVAL_REQUESTED", "s/writer", request)
    await progress.report()  # at once, however recent the last one
    assert ctx.told[-1][2] == (
        "0/2 agents done · waiting for a person to approve write_file by s/writer "
        "(orchestrator pending / approve)"
    )
    progress.see("APPROVAL_REQUESTED", None, {"toolCallId": "call_0", "name": "send_mail"})
    assert progress.message().endswith("by s/writer (and 1 more) (orchestrator pending / approve)")
    progress.see("APPROVAL_RESOLVED", "s/writer", {"toolCallId": "call_0", "decision": "approve"})
    progress.see("APPROVAL_RESOLVED", None, {"toolCallId": "call_0", "decision": "deny"})
    await progress.report()
    assert ctx.told[-1][2] == "0/2 agents done · s/writer"


async def test_progress_only_grows_and_ends_at_its_total(autojump_clock: object) -> None:
    """Regression: progress went 0,0,0,…,2,2,2,4,…: the spec says it MUST increase with
    each notification; and a run that ended did not end its progress at its total."""
    pytest.importorskip("mcp", reason="needs the `mcp` extra: pip install -e '.[dev]'")
    from orchestrator.mcp.expose import PROGRESS_EVERY, TreeProgress

    ctx = Progress()
    progress = TreeProgress(ctx, "boss")  # type: ignore[arg-type]
    for _ in range(5):  # nothing new: nothing said, however often it is asked
        await progress.report()
        await trio.sleep(PROGRESS_EVERY)
    assert len(ctx.told) == 1
    progress.see("AGENT_STARTED", "s/a")
    progress.see("AGENT_STARTED", "s/b")
    await progress.report()  # grew: said
    progress.see("AGENT_STARTED", "s/a/c")
    await progress.report()  # grew, but too soon after the last: waits
    progress.see("REASONING", "s/a/c")
    await trio.sleep(PROGRESS_EVERY)
    await progress.report()  # said now
    await progress.report()  # unchanged: nothing
    for kind, path in (("AGENT_RESULT", "s/a/c"), ("AGENT_RESULT", "s/a")):
        progress.see(kind, path)
    await progress.report()  # too soon: waits
    progress.see("AGENT_ERROR", "s/b")
    progress.see("AGENT_RESULT", None)
    await progress.report()  # done: said at once however soon, at its total
    values = [told[0] for told in ctx.told]
    assert values == [1, 3, 4, 8]
    assert ctx.told[-1] == (8, 8, "4/4 agents done · s/b")
