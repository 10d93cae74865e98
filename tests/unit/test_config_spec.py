"""Loading server.yaml and subagent YAML: one clear line naming file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.errors import SpecError
from agents.spec import load_spec, load_specs
from orchestrator.config import ConfigError, load_config
from tests.helpers import REPO, dedent


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dedent(text), encoding="utf-8")
    return path


def test_shipped_config_and_demo_agents_load() -> None:
    config = load_config(REPO / "configs" / "server.yaml")
    assert config.subagents_path == (REPO / "configs" / "subagents").resolve()
    specs = load_specs(config.subagents_path, models=config.models, tools=["agent_spawn"])
    assert sorted(specs) == ["critic", "planner", "researcher"]
    assert specs["planner"].display_name == "PlannerAgent"
    assert config.models["default"].provider == "scripted"


def test_the_shipped_cluster_example_loads() -> None:
    """configs/cluster.yaml, which the README and docs/cluster.md name."""
    config = load_config(REPO / "configs" / "cluster.yaml")
    assert config.cluster is not None and config.cluster.worker
    assert config.storage.url.startswith("redis://") and config.storage.durability == "strict"
    assert config.subagents_path == (REPO / "configs" / "subagents").resolve()


def test_spec_id_is_file_stem_and_defaults(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path / "researcher.yaml", "description: d\ninstructions: i\n"))
    assert spec.id == "researcher" and spec.display_name == "researcher"
    assert spec.model == "default" and spec.tools == [] and spec.max_turns == 8
    assert spec.timeout_seconds is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("description: d\ninstructions: i\nmax_turn: 3\n", "bad.yaml: max_turn: unknown key"),
        ("instructions: i\n", "bad.yaml: description: required key is missing"),
        (
            "description: d\ninstructions: i\nmax_turns: zero\n",
            "bad.yaml: max_turns: Input should be a valid integer",
        ),
        (
            "description: d\ninstructions: i\ntimeout_seconds: -1\n",
            "bad.yaml: timeout_seconds: Input should be greater than 0",
        ),
        (
            "description: d\ninstructions: i\nscript: {turns: [{say: hi, cals: []}]}\n",
            "bad.yaml: script.turns.0.cals: unknown key",
        ),
        ("description: [unclosed\n", "bad.yaml: invalid YAML at line"),
        ("- a list\n", "bad.yaml: expected a mapping of keys, got list"),
        ("description: d\ninstructions: i\nid: other\n", "bad.yaml: id: unknown key"),
    ],
)
def test_invalid_spec_is_one_line_naming_file_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(str(path))


def test_unknown_model_and_tool_named(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", "description: d\ninstructions: i\nmodel: gpt9\n")
    with pytest.raises(SpecError, match=r"a\.yaml: model: 'gpt9' is not a key"):
        load_specs(tmp_path, models=["default"])
    write(tmp_path / "a.yaml", "description: d\ninstructions: i\ntools: [agent_spawn, shell]\n")
    with pytest.raises(SpecError, match=r"a\.yaml: tools\[1\]: unknown tool 'shell'"):
        load_specs(tmp_path, models=["default"], tools=["agent_spawn"])


def test_bad_file_name_and_missing_dir(tmp_path: Path) -> None:
    write(tmp_path / "bad name!.yaml", "description: d\ninstructions: i\n")
    with pytest.raises(SpecError, match="not a valid agentId"):
        load_specs(tmp_path)
    with pytest.raises(SpecError, match="not a directory"):
        load_specs(tmp_path / "nope")


def test_yml_and_yaml_same_id_is_an_error(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", "description: d\ninstructions: i\n")
    write(tmp_path / "a.yml", "description: d\ninstructions: i\n")
    with pytest.raises(SpecError, match="defined twice"):
        load_specs(tmp_path)


def test_config_relative_paths_resolve_against_its_dir(tmp_path: Path) -> None:
    path = write(tmp_path / "conf" / "server.yaml", "subagents_dir: agents\n")
    config = load_config(path)
    assert config.subagents_path == (tmp_path / "conf" / "agents").resolve()
    assert config.limits.max_depth == 4 and config.server.port == 8765


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("limits: {max_depht: 3}\n", "server.yaml: limits.max_depht: unknown key"),
        (
            "limits: {max_depth: -1}\n",
            "server.yaml: limits.max_depth: Input should be greater than or equal to 0",
        ),
        ("storage: postgres://x\n", "server.yaml: storage.url: must start with"),
        ("storage: 'sqlite:///'\n", "server.yaml: storage.url: sqlite:/// needs"),
        (
            "storage: {url: 'redis://h', durability: maybe}\n",
            "server.yaml: storage.durability: Input should be 'strict' or 'relaxed'",
        ),
        ("server: {tokens: ['  ']}\n", "server.yaml: server.tokens.0.token: must not"),
        (
            "server: {tokens: ['']}\n",
            "server.yaml: server.tokens.0.token: String should have at least 1 character",
        ),
        (
            "server: {tokens: [{name: a, token: x1, role: root}]}\n",
            "server.yaml: server.tokens.0.role: Input should be 'admin', 'user' or 'viewer'",
        ),
        (
            "server: {tokens: [{name: a, token: x1}, {name: a, token: x2}]}\n",
            "server.yaml: server: tokens: two tokens have the same name",
        ),
        (
            "models: {m: {provider: gemini}}\n",
            "server.yaml: models.m.provider: Input should be 'openai', 'openai-responses', "
            "'anthropic' or 'scripted'",
        ),
        (
            "models: {m: {provider: openai, api_key: x}}\n",
            "server.yaml: models.m.api_key: unknown key",
        ),
        (
            "server: {port: 99999}\n",
            "server.yaml: server.port: Input should be less than or equal to 65535",
        ),
    ],
)
def test_invalid_config_names_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path / "server.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "none.yaml")


def test_approval_star_as_the_docs_write_it(tmp_path: Path) -> None:
    """`approval: "*"` (docs/configuration.md) is every tool, in server.yaml and in a
    subagent (it was refused: `Input should be a valid list`)."""
    config = load_config(write(tmp_path / "server.yaml", 'approval: "*"\n'))
    assert config.approval == ["*"]
    write(tmp_path / "agents" / "a.yaml", 'description: d\ninstructions: i\napproval: "*"\n')
    specs = load_specs(tmp_path / "agents", models=config.models, tools=["agent_spawn"])
    assert specs["a"].approval == ["*"]


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        (
            "description: d\nremote: {url: 'http://127.0.0.1:8765/ws', agent: planner}\n",
            "remote.url: String should match pattern '^wss?://",
        ),
        (
            "description: d\nremote: {a2a: 'ws://127.0.0.1:9999'}\n",
            "remote.a2a: String should match pattern '^https?://",
        ),
        (
            "description: d\ninstructions: i\ncompaction: {summarizer: a}\n",
            "compaction.summarizer: 'a' is this agent itself",
        ),
    ],
)
def test_remote_urls_and_summarizers_are_checked_at_load(
    tmp_path: Path, agent: str, message: str
) -> None:
    """Refused when the files are read, not at the first run that uses them."""
    write(tmp_path / "agents" / "a.yaml", agent)
    with pytest.raises(SpecError) as refused:
        load_specs(tmp_path / "agents", models=["default"], tools=["agent_spawn"])
    assert message in str(refused.value)


def test_an_otlp_endpoint_must_be_http(tmp_path: Path) -> None:
    path = write(tmp_path / "server.yaml", "telemetry: {otlp_endpoint: 'grpc://127.0.0.1:4317'}\n")
    with pytest.raises(ConfigError, match=r"telemetry\.otlp_endpoint: String should match"):
        load_config(path)


def test_every_config_error_at_once_with_a_suggestion(tmp_path: Path) -> None:
    """Issue 57, 24: all of a file's errors in one line, each once, an unknown key with
    the key it is closest to."""
    path = write(
        tmp_path / "server.yaml",
        "server: {prot: 8765}\n"
        "limits: {max_dpeth: 3, webhooks: {retry_frist_seconds: 1}}\n"
        "webhooks: {w: {url: 'https://x.example/h', events: [RUN_FINISH], secret_env: X}}\n",
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    said = str(caught.value)
    assert said.startswith(f"{path}: ")
    for part in (
        "server.prot: unknown key (did you mean 'port'?)",
        "limits.max_dpeth: unknown key (did you mean 'max_depth'?)",
        "limits.webhooks.retry_frist_seconds: unknown key (did you mean 'retry_first_seconds'?)",
        "webhooks.w: events: unknown event type 'RUN_FINISH'",
    ):
        assert part in said, said
    assert said.count("RUN_FINISH") == 1 and "\n" not in said


def test_a_start_reports_every_problem_with_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 57, 24: what only a start can check (a webhook's secret, a trigger's agent)
    in one line naming the file, all of it."""
    from orchestrator.server.app import starting_problems

    monkeypatch.delenv("NOT_SET_X", raising=False)
    sub = tmp_path / "subagents"
    sub.mkdir()
    (sub / "planner.yaml").write_text("description: p\ninstructions: i\n")
    path = write(
        tmp_path / "server.yaml",
        "models: {default: {provider: scripted}}\n"
        "webhooks: {w: {url: 'https://x.example/h', secret_env: NOT_SET_X}}\n"
        "triggers: {t: {agent: planer, input: hi, every: 1h}}\n",
    )
    with pytest.raises(ConfigError) as caught:
        starting_problems(load_config(path))
    said = str(caught.value)
    assert said.startswith(f"{path}: webhooks.w.secret_env: the environment has no NOT_SET_X; ")
    assert "triggers.t.agent: unknown agent 'planer' (did you mean 'planner'?)" in said
