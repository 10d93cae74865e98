"""The docs' examples that a user runs, run here as the docs write them (read from the
docs: tests/doc_examples.py). What the docs say they print is what they print."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest
import trio
import yaml
from websockets.trio.client import connect

from tests.doc_examples import Example, examples, shell_lines
from tests.helpers import REPO, eventually
from tests.server_helpers import demo_config, request, run_to_end, running_server

ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def one(language: str, doc: str, containing: str) -> Example:
    (found,) = [e for e in examples(language) if e.doc == doc and containing in e.text]
    return found


async def python(code: str, cwd: Path, **env: str) -> str:
    """Run `code` as a user's script; its output (the test fails on a non-zero exit)."""
    done = await trio.run_process(
        [sys.executable, "-c", code],
        cwd=cwd,
        env={**ENV, **env},
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


async def orchestrator(command: str, cwd: Path) -> str:
    """Run a doc's `orchestrator …` line; its output (fails on a non-zero exit)."""
    words = shlex.split(command)
    assert words[0] == "orchestrator", command
    done = await trio.run_process(
        [sys.executable, "-m", "orchestrator", *words[1:]],
        cwd=cwd,
        env=ENV,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def fast_configs(root: Path) -> None:
    """The shipped configs/ under `root`, their scripted agents without pauses."""
    shutil.copytree(REPO / "configs", root / "configs", ignore=shutil.ignore_patterns("data"))
    for path in (root / "configs" / "subagents").glob("*.yaml"):
        spec = yaml.safe_load(path.read_text())
        spec["script"]["token_delay"] = 0
        path.write_text(yaml.safe_dump(spec))


async def test_the_readme_python_example(tmp_path: Path) -> None:
    fast_configs(tmp_path)
    code = one("python", "README.md", "Orchestrator.open").text
    out = (await python(code, tmp_path)).splitlines()
    assert out[0].startswith("1 RUN_STARTED root")
    assert any(" AGENT_RESULT " in line and "/researcher " in line for line in out)
    finished = [i for i, line in enumerate(out) if " RUN_FINISHED root " in line]
    assert finished and out[finished[0] + 1].startswith("completed ")  # then `orch.call`


async def test_the_typed_client_example(tmp_path: Path) -> None:
    """Regression: it passed `token="…"`, which no header can carry."""
    example = one("python", "docs/integrations.md", "Client.connect")
    config = demo_config(tmp_path, server={"tokens": [{"name": "ann", "token": "ann-1"}]})
    async with running_server(config) as server:
        code = example.text.replace("ws://127.0.0.1:8765/ws", server.url)
        out = await python(code, tmp_path, ORCHESTRATOR_TOKEN="ann-1")
    lines = out.splitlines()
    assert lines[0] == str(["critic", "planner", "researcher"])
    promised = re.search(r"# (FollowEnded\(.*\))", example.text)
    assert promised is not None and lines[-1] == promised.group(1)


async def test_the_threads_client_example(tmp_path: Path) -> None:
    example = one("python", "docs/threads.md", "Client.connect")
    async with running_server(demo_config(tmp_path)) as server:
        code = example.text.replace("ws://127.0.0.1:8765/ws", server.url)
        out = await python(code, tmp_path)
    assert out.splitlines() == ["True", "True"]
    assert example.text.count("# True") == 2


async def test_the_in_process_threads_example(tmp_path: Path) -> None:
    fast_configs(tmp_path)
    example = one("python", "docs/threads.md", "orch.call(")
    assert (await python(example.text, tmp_path)).splitlines() == ["completed completed"]


async def test_the_mcp_example_runs_as_written_from_anywhere(tmp_path: Path) -> None:
    """Regression: `command: python` was whichever python PATH found (not the one with
    the `mcp` package), and `args` were the cwd's, not the config's directory's."""
    pytest.importorskip("mcp", reason="needs the `mcp` extra: pip install -e '.[dev]'")
    example = one("sh", "docs/mcp.md", "notetaker")
    (command,) = shell_lines(example)
    printed = "Groceries:\n- buy milk\n"
    assert "`Groceries:` and `- buy milk`" in (REPO / example.doc).read_text()
    assert await orchestrator(command, REPO) == printed
    elsewhere = command.replace("examples/", f"{REPO}/examples/")
    assert await orchestrator(elsewhere, tmp_path) == printed
    listed = await orchestrator(
        f"orchestrator agents --config {REPO}/examples/mcp/server.yaml", tmp_path
    )
    assert "notetaker" in listed and "notes__*" in listed


async def test_the_readme_agents_command(tmp_path: Path) -> None:
    readme = one("sh", "README.md", "orchestrator agents")
    (command,) = [c for c in shell_lines(readme) if c == "orchestrator agents"]
    listed = await orchestrator(command, REPO)
    for agent in ("critic", "planner", "researcher"):
        assert agent in listed


async def test_the_fork_example(tmp_path: Path) -> None:
    fast_configs(tmp_path)
    example = one("python", "docs/fork.md", "orch.fork(")
    out = (await python(example.text, tmp_path)).splitlines()
    assert out[0] == "True" and out[2] == "completed"
    counted = re.fullmatch(r"(\d+) of (\d+) turns replayed", out[1])
    assert counted is not None, out
    replayed, turns = int(counted.group(1)), int(counted.group(2))
    assert 0 < replayed < turns  # the message's agent and its ancestors asked the model
    assert "`3 of 7 turns replayed`" in (REPO / example.doc).read_text()


async def test_the_structured_example_prints_what_the_doc_says() -> None:
    """docs/structured.md's program, run from the repository's root (as it says), prints
    the `text` block that follows it."""
    doc = "docs/structured.md"
    example = one("python", doc, 'orch.stream("reviewer"')
    printed = next(e for e in examples("text") if e.doc == doc and e.line > example.line)
    assert await python(example.text, REPO) == printed.text


async def test_the_attachments_example_prints_what_the_doc_says() -> None:
    doc = "docs/structured.md"
    example = one("python", doc, "attachments=[LOGO]")
    printed = next(e for e in examples("text") if e.doc == doc and e.line > example.line)
    assert await python(example.text, REPO) == printed.text


async def test_the_hooks_example_starts_a_run(tmp_path: Path) -> None:
    example = one("python", "docs/webhooks.md", '8765/hooks/planner",')
    tokens = [{"name": "ci", "token": "ci-token", "role": "user"}]
    config = demo_config(tmp_path, server={"hooks": True, "tokens": tokens})
    async with running_server(config) as server:
        base = f"http://{server.host}:{server.port}"
        code = example.text.replace("http://127.0.0.1:8765", base)
        out = await python(code, tmp_path)
    promised = re.search(r"# (202 .*)", example.text)
    assert promised is not None and out.strip() == promised.group(1)


async def test_the_triggers_example_fires_one(tmp_path: Path) -> None:
    """The doc's own config (both its triggers) and its Python as written (issue 57, 17:
    with two triggers the example's unpacking of the reply crashed)."""
    example = one("python", "docs/triggers.md", "client.triggers(")
    config = one("yaml", "docs/triggers.md", "nightly-triage:")
    demo_config(tmp_path)
    path = tmp_path / "server.yaml"
    data = yaml.safe_load(path.read_text())
    data.update(yaml.safe_load(config.text))
    assert len(data["triggers"]) == 2
    path.write_text(yaml.safe_dump(data))
    from orchestrator.config import load_config

    async with running_server(load_config(path)) as server:
        code = example.text.replace("ws://127.0.0.1:8765/ws", server.url)
        out = await python(code, tmp_path)
    assert out.splitlines() == ["started True"]
    assert "# started True" in example.text


async def test_the_webhook_receiver_example_gets_a_finished_run(tmp_path: Path) -> None:
    import base64
    import socket

    example = one("python", "docs/webhooks.md", "standardwebhooks import Webhook")
    secret = "whsec_" + base64.b64encode(b"r" * 32).decode()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = example.text.replace("9000", str(port))
    demo_config(tmp_path)
    path = tmp_path / "server.yaml"
    data = yaml.safe_load(path.read_text())
    data["webhooks"] = {
        "ci": {
            "url": f"http://127.0.0.1:{port}/agents",
            "events": ["RUN_FINISHED"],
            "secret_env": "CI_WEBHOOK_SECRET",
        }
    }
    data["tools"] = {"http_allowed_hosts": ["127.0.0.1"]}
    data["limits"]["webhooks"] = {"retry_first_seconds": 0.05, "retry_max_seconds": 0.2}
    path.write_text(yaml.safe_dump(data))
    from orchestrator.config import load_config

    printed: list[str] = []
    received = trio.Event()

    async def receive() -> None:
        printed.append(await python(code, tmp_path, CI_WEBHOOK_SECRET=secret))
        received.set()

    os.environ["CI_WEBHOOK_SECRET"] = secret  # (the server reads it when it starts)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            async with running_server(load_config(path)) as server:
                await run_to_end(server.url, agent="researcher", task="q")
                with trio.fail_after(20):
                    await received.wait()
    finally:
        del os.environ["CI_WEBHOOK_SECRET"]
    assert printed == ["RUN_FINISHED completed\n"]
    assert "# RUN_FINISHED completed" in example.text


async def test_the_slack_hook_recipe_answers_the_challenge_and_starts_a_run(
    tmp_path: Path,
) -> None:
    """Issue 57, 19: the doc's Slack hook config and its script, as written."""
    config = one("yaml", "docs/webhooks.md", "signature: slack")
    example = one("python", "docs/webhooks.md", "def from_slack(")
    demo_config(tmp_path, server={"tokens": [{"name": "slack", "token": "sl-token"}]})
    path = tmp_path / "server.yaml"
    data = yaml.safe_load(path.read_text())
    wanted = yaml.safe_load(config.text)
    data["server"].update(wanted["server"])
    data["hooks"] = wanted["hooks"]
    path.write_text(yaml.safe_dump(data))
    from orchestrator.config import load_config

    env = {
        "SLACK_SIGNING_SECRET": "8f742231b10e8888abcd99yyyzzz85a5",
        "ORCHESTRATOR_TOKEN": "sl-token",
    }
    os.environ["SLACK_SIGNING_SECRET"] = env["SLACK_SIGNING_SECRET"]  # (the server's)
    try:
        async with running_server(load_config(path)) as server:
            code = example.text.replace(
                "http://127.0.0.1:8765", f"http://{server.host}:{server.port}"
            )
            out = await python(code, tmp_path, **env)
            async with connect(
                server.url, additional_headers={"Authorization": "Bearer sl-token"}
            ) as ws:
                runs = (await request(ws, op="runs", id="l"))["runs"]
    finally:
        del os.environ["SLACK_SIGNING_SECRET"]
    promised = [
        line.removeprefix("# ") for line in example.text.splitlines() if line.startswith("# ")
    ]
    assert out.splitlines() == promised
    (run,) = runs
    assert run["input"] == "compare trio and asyncio" and run["threadId"] == "slack-C024BE91L"


async def test_the_chat_channel_recipe_posts_the_templated_body(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """Issue 57, 19: the doc's `body_template` for a chat channel, as written (its URL
    pointed at a receiver here)."""
    import base64

    from tests.fakes.webhook_receiver import WebhookReceiver

    config = one("yaml", "docs/webhooks.md", "body_template:")
    receiver = WebhookReceiver()
    await nursery.start(receiver.serve)
    demo_config(tmp_path)
    path = tmp_path / "server.yaml"
    data = yaml.safe_load(path.read_text())
    data["webhooks"] = yaml.safe_load(config.text)["webhooks"]
    data["webhooks"]["slack"]["url"] = receiver.url("/services/T0000/B0000/XXXXXXXX")
    data["tools"] = {"http_allowed_hosts": ["127.0.0.1"]}
    path.write_text(yaml.safe_dump(data))
    from orchestrator.config import load_config

    os.environ["SLACK_WEBHOOK_SECRET"] = "whsec_" + base64.b64encode(b"s" * 32).decode()
    try:
        async with running_server(load_config(path)) as server:
            run_id, events, _ = await run_to_end(server.url, agent="critic", task="q")
            await eventually(lambda: bool(receiver.delivered), within=20)
    finally:
        del os.environ["SLACK_WEBHOOK_SECRET"]
    (got,) = receiver.delivered
    result = events[-1]["data"]["result"]
    assert got.json == {"text": f"Run {run_id} completed: {result}"}, got.json
