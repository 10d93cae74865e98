"""The `orchestrator` command against the shipped offline demo."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from tests.helpers import REPO


@pytest.fixture(autouse=True)
def _fast_demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the shipped demo with no token delays, run from the repo root."""
    conf = tmp_path / "configs"
    (conf / "subagents").mkdir(parents=True)
    (conf / "server.yaml").write_text((REPO / "configs" / "server.yaml").read_text())
    for spec in (REPO / "configs" / "subagents").glob("*.yaml"):
        text = spec.read_text()
        lines = [line for line in text.splitlines() if "token_delay" not in line]
        (conf / "subagents" / spec.name).write_text("\n".join(lines) + "\n")
    monkeypatch.chdir(tmp_path)
    return conf


def test_run_json_prints_one_event_per_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "planner", "trio", "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED"
    assert {e["source"]["depth"] for e in events if e["source"]} == {1, 2}


def test_run_max_depth_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "planner", "trio", "--json", "--max-depth", "1"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {e["source"]["depth"] for e in events if e["source"]} == {1}


def test_run_no_stream_prints_final_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "planner", "trio", "--no-stream"]) == 0
    out = capsys.readouterr().out
    assert out.startswith('Here is what the research team found about "trio"')
    assert "RUN_STARTED" not in out


def test_run_live_tree_shows_every_agent(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "planner", "trio"]) == 0
    out = capsys.readouterr().out
    assert "planner done" in out
    assert out.count("ResearcherAgent (researcher) done") >= 2
    assert out.count("CriticAgent (critic) done") >= 2
    assert "run completed" in out


def test_agents_lists_subagents(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agents"]) == 0
    out = capsys.readouterr().out
    for agent in ("planner", "researcher", "critic"):
        assert agent in out


def test_unknown_agent_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "nobody", "x"]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "error: unknown agent 'nobody' (known: critic, planner, researcher)"
    )


def test_invalid_subagent_stops_startup_with_one_line(_fast_demo: Path) -> None:
    (_fast_demo / "subagents" / "critic.yaml").write_text(
        "description: d\ninstructions: i\nmax_turns: lots\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "run", "planner", "x"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    err = proc.stderr.strip()
    assert "\n" not in err and "Traceback" not in err
    assert (
        err.startswith("error: ")
        and "critic.yaml: max_turns: Input should be a valid integer" in err
    )


def test_missing_config_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path / "configs")
    assert main(["agents"]) == 2
    assert (
        "config file not found (run from the project root or pass --config)"
        in capsys.readouterr().err
    )


def _serve_error(conf: Path, server_yaml: str, capsys: pytest.CaptureFixture[str]) -> str:
    (conf / "server.yaml").write_text(server_yaml)
    assert main(["serve"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in "\n".join(err), err
    return errors[0]


def test_serve_start_up_failures_are_one_line(
    _fast_demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: 37–80-line ExceptionGroups instead of one line and exit 2 (issue 8.11)."""
    conf = _fast_demo
    (conf / "subagents" / "critic.yaml").write_text(
        "description: d\ninstructions: i\nmax_turns: x\n"
    )
    line = _serve_error(conf, "storage: memory://\n", capsys)
    assert "critic.yaml: max_turns" in line
    (conf / "subagents" / "critic.yaml").unlink()
    line = _serve_error(conf, "storage: 'redis://127.0.0.1:1/0'\n", capsys)
    assert "redis storage redis://127.0.0.1:1/0: cannot connect" in line
    line = _serve_error(conf, "storage: 'sqlite:///'\n", capsys)
    assert "storage.url" in line and "needs a file path" in line
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = _serve_error(conf, f"server: {{port: {port}}}\nstorage: memory://\n", capsys)
    assert line == f"error: cannot listen on 127.0.0.1:{port}: address already in use"


def test_watch_urls_and_unreachable_servers(
    _fast_demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["watch", "run-x", "--url", "http://127.0.0.1:8765/ws"]) == 2
    assert "try ws://127.0.0.1:8765/ws" in capsys.readouterr().err
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    (_fast_demo / "server.yaml").write_text(f"server: {{host: 0.0.0.0, port: {port}}}\n")
    assert main(["watch", "run-x", "--give-up-after", "0.5", "--json"]) == 2
    err = capsys.readouterr().err
    assert f"error: could not connect: ws://127.0.0.1:{port}/ws" in err  # from the config
    assert "connection lost" not in err
    # A server never reached: one line at once, no retries (60 s of them, before).
    assert main(["watch", "run-x", "--json"]) == 2
    err = capsys.readouterr().err
    assert "retrying" not in err and err.count("error: could not connect") == 1, err
    # The hint for an http:// URL names the WebSocket's path too.
    assert main(["watch", "run-x", "--url", "http://127.0.0.1:8765"]) == 2
    assert "try ws://127.0.0.1:8765/ws" in capsys.readouterr().err


def test_a_task_is_read_from_stdin_or_a_file_as_curl_does(tmp_path: Path) -> None:
    import io

    from orchestrator.cli.dispatch import task_text
    from orchestrator.config import ConfigError

    (tmp_path / "task.md").write_text("a long task\nover lines", encoding="utf-8")
    assert task_text("-", io.StringIO("from stdin")) == "from stdin"
    assert task_text(f"@{tmp_path / 'task.md'}") == "a long task\nover lines"
    assert task_text("@@handle") == "@handle" and task_text("plain") == "plain"
    with pytest.raises(ConfigError, match="cannot read the task from"):
        task_text(f"@{tmp_path / 'missing.md'}")


def test_run_says_it_exports_no_traces(
    _fast_demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: `run` with a `telemetry:` section exported nothing, silently."""
    pytest.importorskip(
        "opentelemetry.sdk", reason="needs the `otel` extra: pip install -e '.[dev]'"
    )
    config = _fast_demo / "server.yaml"
    config.write_text(config.read_text() + "telemetry: {otlp_endpoint: http://127.0.0.1:9}\n")
    assert main(["run", "planner", "trio", "--no-stream"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("note: `telemetry:` is set, but `orchestrator run` exports no traces")
    assert "orchestrator start AGENT INPUT --follow" in err


def test_help_imports_nothing_heavy() -> None:
    """Issue 57, defect 12: `orchestrator --help` (and a command's) imports none of
    trio, httpx, pydantic, websockets or the runtime: only argparse's table."""
    code = (
        "import sys\n"
        "from orchestrator.cli.main import main\n"
        "for argv in (['--help'], ['serve', '--help'], ['start', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = ('trio', 'httpx', 'pydantic', 'websockets', 'msgspec', 'rich', 'yaml',\n"
        "         'orchestrator.runtime', 'orchestrator.config', 'agents.core')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m in heavy))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-500:]
    assert "usage: orchestrator" in done.stdout


def test_trigger_times_are_shown_in_the_triggers_zone_saying_which() -> None:
    """Issue 57, 18: `next 2026-12-08 03:00:00 CET (Europe/Berlin)`, not a bare time."""
    from datetime import UTC, datetime

    from orchestrator.cli.chat import _zoned

    at = datetime(2026, 12, 8, 2, 0, tzinfo=UTC).timestamp()
    assert _zoned(at, "Europe/Berlin") == "2026-12-08 03:00:00 CET (Europe/Berlin)"
    assert _zoned(at, "UTC") == "2026-12-08 02:00:00 UTC"
    summer = datetime(2026, 7, 1, 1, 0, tzinfo=UTC).timestamp()
    assert _zoned(summer, "Europe/Berlin") == "2026-07-01 03:00:00 CEST (Europe/Berlin)"
