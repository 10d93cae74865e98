"""The live tree console in a real browser: Debian's Chromium driven by Playwright.

The server is a real `orchestrator serve` process; the tests are plain (sync)
pytest functions, since Playwright's sync API runs its own loop. They skip, saying
how to enable them, when Chromium or Playwright is missing; `.ci/run` installs both.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from websockets.sync.client import connect as sync_connect

REPO = Path(__file__).resolve().parent.parent.parent
CHROMIUM = "/usr/bin/chromium"
SHOTS = os.environ.get("CONSOLE_SCREENSHOTS")
"""A directory to save the main states' screenshots in (docs/images/ was made with
`CONSOLE_SCREENSHOTS=docs/images .venv/bin/python -m pytest tests/browser`)."""

try:
    from playwright.sync_api import Browser, Page

    HAVE_PLAYWRIGHT = True
except ImportError:  # pragma: no cover - depends on the machine
    HAVE_PLAYWRIGHT = False

pytestmark = pytest.mark.skipif(
    not HAVE_PLAYWRIGHT or not Path(CHROMIUM).exists(),
    reason="browser tests need Chromium and Playwright: `apt-get install chromium` and "
    "`pip install -e '.[dev]'` (as .ci/run does)",
)


class Server:
    """An `orchestrator serve` process on a config in `root`."""

    def __init__(self, root: Path, config: dict[str, Any]) -> None:
        self.root = root
        self.path = root / "server.yaml"
        self.path.write_text(yaml.safe_dump(config))
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.port = 0

    def start(self) -> None:
        args = [sys.executable, "-m", "orchestrator", "serve", "--config", str(self.path)]
        args += ["--port", str(self.port)]
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        assert line.startswith("orchestrator listening on "), line
        ws = line.split()[3]
        self.port = int(ws.rsplit(":", 1)[1].split("/")[0])
        self.url = f"http://127.0.0.1:{self.port}/"

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=20)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@contextlib.contextmanager
def serving(root: Path, settings: dict[str, Any]) -> Iterator[Server]:
    """A started `orchestrator serve` on `settings`, killed at the end."""
    srv = Server(root, settings)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop(signal.SIGKILL)


def write_agents(root: Path, token_delay: float, extra: dict[str, Any] | None = None) -> None:
    sub = root / "subagents"
    sub.mkdir(exist_ok=True)
    for spec_path in (REPO / "configs" / "subagents").glob("*.yaml"):
        spec = yaml.safe_load(spec_path.read_text())
        spec["script"]["token_delay"] = token_delay
        (sub / spec_path.name).write_text(yaml.safe_dump(spec))
    for agent_id, spec in (extra or {}).items():
        (sub / f"{agent_id}.yaml").write_text(yaml.safe_dump(spec))


def config(**over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": 0, "shutdown_timeout": 3},
        "storage": "sqlite:///journal.db",
        "models": {"default": {"provider": "scripted"}},
        "subagents_dir": "subagents",
        "limits": {"max_agents": 1000, "max_children": 16},
    }
    for key, value in over.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return data


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    write_agents(tmp_path, token_delay=0.01)
    srv = Server(tmp_path, config())
    srv.start()
    yield srv
    srv.stop(signal.SIGKILL)


def open_page(
    browser: Browser, url: str, width: int = 1280, *, csp: bool = False
) -> tuple[Page, list[str]]:
    """A page on the console. Playwright's `wait_for_function` evaluates strings, which
    the console's Content-Security-Policy forbids: pages bypass it unless `csp`."""
    page = browser.new_page(viewport={"width": width, "height": 800}, bypass_csp=not csp)
    page.set_default_timeout(30_000)  # (waits, not claims: a loaded machine is slower)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.wait_for_selector("#conn.open", timeout=30_000)
    page.wait_for_selector("#agent option", state="attached")
    return page, errors


def shot(page: Page, name: str, *, full_page: bool = False) -> None:
    if SHOTS:
        page.screenshot(path=str(Path(SHOTS) / name), full_page=full_page)


def start_run(page: Page, agent: str, task: str) -> str:
    page.select_option("#agent", agent)
    page.fill("#input", task)
    page.press("#input", "Enter")
    for _ in range(200):  # (not wait_for_function: a page with the console's CSP refuses it)
        if page.evaluate("window.__console.state.run !== null"):
            break
        page.wait_for_timeout(50)
    run_id: str = page.evaluate("window.__console.state.run.runId")
    return run_id


def node(page: Page, name: str) -> Any:
    return page.locator(".node > .row", has=page.locator(".name", has_text=name))


def select_a_streaming_researcher(page: Page) -> str:
    """Start the planner's run, wait for both researchers, select the first; its key."""
    start_run(page, "planner", "one thread is enough")
    page.wait_for_function(
        "[...window.__console.state.run.nodes.values()]"
        ".filter(a => a.agentId === 'researcher').length === 2",
        timeout=60_000,
    )
    node(page, "ResearcherAgent").first.click()
    page.wait_for_selector("#stop-box button")
    key: str = page.evaluate("window.__console.state.selected")
    return key


def model_events(page: Page) -> dict[str, int]:
    seen: dict[str, int] = page.evaluate(
        "({last: window.__console.state.run.lastSeq, count: window.__console.state.run.eventCount})"
    )
    return seen


def test_a_run_started_with_enter_streams_to_completion_with_every_detail(
    browser: Browser, server: Server
) -> None:
    page, errors = open_page(browser, server.url)
    page.fill("#input", "")
    page.press("#input", "Enter")  # empty: refused, nothing starts
    assert "task" in page.inner_text("#notice")
    assert page.evaluate("window.__console.state.run") is None
    run_id = start_run(page, "planner", "How do trio nurseries work?")
    page.press("#input", "Enter")  # the input was cleared: no second run
    page.wait_for_selector("#run-status.completed", timeout=30_000)
    assert page.url.endswith(f"?run={run_id}")
    # The DOM follows the model within a few frames.
    page.wait_for_function("document.querySelectorAll('.node .badge.done').length === 5")
    assert page.locator(".node").count() == 5
    # The root's full answer, and a spawn call's arguments and result.
    node(page, "planner").first.click()
    detail = page.inner_text("#detail")
    assert "Both threads were checked by a critic" in detail
    assert "model default" in detail and "subtree" in detail
    assert '"agent_id": "researcher"' in detail and "Findings on" in detail
    assert page.locator("#detail .thinking").count() >= 1
    shot(page, "console-run.png")
    # Search filters the loaded tree, and clearing it brings every row back.
    page.fill("#f-search", "no agent says this")
    page.wait_for_function("document.querySelectorAll('.node:not(.hidden)').length === 0")
    page.fill("#f-search", "")
    page.wait_for_function("document.querySelectorAll('.node:not(.hidden)').length === 5")
    # The runs list has the task and a status, and shows runs other clients start.
    page.wait_for_selector("#runs-list li .badge.completed")
    assert "How do trio nurseries work?" in page.inner_text("#runs-list")
    from websockets.sync.client import connect

    with connect(server.url.replace("http", "ws") + "ws") as other:
        other.send(json.dumps({"op": "run", "id": 1, "agent": "critic", "input": "from elsewhere"}))
        assert json.loads(other.recv())["op"] == "ack"
        page.wait_for_function(
            "document.querySelector('#runs-list').innerText.includes('from elsewhere')",
            timeout=30_000,
        )
    # Keyboard: arrows move through the tree, left collapses a subtree.
    node(page, "planner").first.click()
    page.keyboard.press("ArrowDown")
    assert page.evaluate("window.__console.state.selected") != "root"
    page.keyboard.press("ArrowUp")
    assert page.evaluate("window.__console.state.selected") == "root"
    page.keyboard.press("ArrowLeft")
    assert page.locator(".node.collapsed").count() == 1
    assert errors == []


class ShippedServer(Server):
    """`orchestrator serve` as the README starts it: no arguments, in a directory that
    holds the repository's configs/ as a fresh clone has it (on a free port)."""

    def __init__(self, root: Path) -> None:
        shutil.copytree(REPO / "configs", root / "configs", ignore=shutil.ignore_patterns("data"))
        self.root, self.path = root, root / "configs" / "server.yaml"
        self.proc, self.url, self.port = None, "", 0

    def start(self) -> None:
        args = [sys.executable, "-m", "orchestrator", "serve", "--port", "0"]
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=self.root,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        assert line.startswith("orchestrator listening on "), line
        self.port = int(line.split()[3].rsplit(":", 1)[1].split("/")[0])
        self.url = f"http://127.0.0.1:{self.port}/"


def test_on_a_fresh_page_run_starts_what_the_readme_promises(
    browser: Browser, tmp_path: Path
) -> None:
    """Regression: a fresh browser preselected `critic` with an empty task, so the
    README's "press Run to watch a planner spawn two researchers" said only "write a
    task first"."""
    readme = (REPO / "README.md").read_text()
    assert "press **Run** to watch a planner spawn two researchers" in readme
    assert ".venv/bin/orchestrator serve\n" in readme  # the command started here
    server = ShippedServer(tmp_path)
    server.start()
    try:
        readme_run(browser, server)
    finally:
        server.stop(signal.SIGKILL)


def readme_run(browser: Browser, server: Server) -> None:
    page, errors = open_page(browser, server.url)  # a new context: a fresh profile
    assert page.input_value("#agent") == "planner"
    example = yaml.safe_load((REPO / "configs" / "subagents" / "planner.yaml").read_text())
    assert page.input_value("#input") == example["example"]
    page.click("#go")
    page.wait_for_selector("#run-status.completed", timeout=30_000)
    researchers = page.locator(".node > .row .name", has_text="Researcher")
    assert researchers.count() == 2 and page.locator(".node").count() == 5
    # Another agent's example (none for the critic) replaces the sample task, but
    # never a task the person wrote.
    page.select_option("#agent", "critic")
    assert page.input_value("#input") == ""
    page.fill("#input", "my own task")
    page.select_option("#agent", "planner")
    assert page.input_value("#input") == "my own task"
    assert errors == []


def test_a_failing_agent_shows_its_error_on_its_card(browser: Browser, tmp_path: Path) -> None:
    bomb = {
        "description": "fails",
        "instructions": "explode",
        "script": {"turns": [{"fail": "the model is down"}]},
    }
    boss = {
        "description": "spawns the bomb",
        "instructions": "lead",
        "tools": ["agent_spawn"],
        "script": {
            "turns": [
                {
                    "say": "try",
                    "calls": [{"name": "agent_spawn", "args": {"agent_id": "bomb", "task": "go"}}],
                },
                {"say": "the bomb failed: {results}"},
            ]
        },
    }
    write_agents(tmp_path, 0.0, {"bomb": bomb, "boss": boss})
    srv = Server(tmp_path, config())
    srv.start()
    try:
        page, errors = open_page(browser, srv.url)
        start_run(page, "boss", "detonate")
        page.wait_for_selector("#run-status.completed", timeout=60_000)
        page.wait_for_function(
            "[...document.querySelectorAll('.node .badge')]"
            ".some(b => b.textContent === 'provider_error')"
        )
        card = node(page, "bomb").first
        assert "provider_error" in card.inner_text()
        card.click()
        assert "scripted failure" in page.inner_text("#detail")
        node(page, "boss").first.click()
        assert page.locator("#detail .tool.error").count() == 1
        assert errors == []
    finally:
        srv.stop(signal.SIGKILL)


def test_a_structured_answer_shows_as_laid_out_json(browser: Browser, tmp_path: Path) -> None:
    judge = {
        "description": "judges",
        "instructions": "judge",
        "output_schema": {
            "type": "object",
            "properties": {"verdict": {"enum": ["accept", "revise"]}, "score": {"type": "integer"}},
            "required": ["verdict", "score"],
        },
        "script": {
            "turns": [{"say": "I think it is fine."}, {"say": '{"verdict": "accept", "score": 8}'}]
        },
    }
    boss = {
        "description": "asks the judge",
        "instructions": "lead",
        "tools": ["agent_spawn"],
        "script": {
            "turns": [
                {"calls": [{"name": "agent_spawn", "args": {"agent_id": "judge", "task": "go"}}]},
                {"say": "judged: {results}"},
            ]
        },
    }
    write_agents(tmp_path, 0.0, {"judge": judge, "boss": boss})
    srv = Server(tmp_path, config())
    srv.start()
    try:
        page, errors = open_page(browser, srv.url)
        start_run(page, "boss", "judge it")
        page.wait_for_selector("#run-status.completed", timeout=60_000)
        node(page, "judge").first.click()
        page.wait_for_selector("#detail .json.answer")
        shown = page.inner_text("#detail .json.answer")
        assert shown == '{\n  "verdict": "accept",\n  "score": 8\n}'
        assert "answer (structured)" in page.inner_text("#detail").lower()
        # its first answer was refused, and the message that said why is listed
        assert "Your answer does not match the required JSON schema" in page.inner_text("#detail")
        assert errors == []
    finally:
        srv.stop(signal.SIGKILL)


def test_a_file_attached_in_the_run_box_reaches_the_agent_and_shows(
    browser: Browser, tmp_path: Path
) -> None:
    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    )
    describer = {
        "description": "says what it got",
        "instructions": "look",
        "script": {"turns": [{"say": "I got {attachments}"}]},
    }
    write_agents(tmp_path, 0.0, {"describer": describer})
    srv = Server(tmp_path, config())
    srv.start()
    try:
        page, errors = open_page(browser, srv.url, csp=True)
        page.set_input_files("#files", {"name": "dot.png", "mimeType": "image/png", "buffer": png})
        assert page.get_attribute("label.attach", "data-count") == "1"
        start_run(page, "describer", "what is this?")
        page.wait_for_selector("#run-status.completed", timeout=60_000)
        node(page, "describer").first.click()
        page.wait_for_selector("#detail .attachments img.thumb[src^='blob:']")
        loaded = page.eval_on_selector(
            "#detail img.thumb", "img => img.complete && img.naturalWidth"
        )
        assert loaded == 1  # the 1×1 PNG, read back over the socket, under the page's CSP
        link = page.locator("#detail .attachments a").first
        assert link.inner_text() == "dot.png (image/png, 70 bytes)"
        assert link.get_attribute("download") == "dot.png"
        assert "I got dot.png (image/png, 70 bytes)" in page.inner_text("#detail")
        assert page.get_attribute("label.attach", "data-count") == ""  # cleared once sent
        assert errors == []
    finally:
        srv.stop(signal.SIGKILL)


def test_triggers_are_listed_fired_and_paused_from_the_console(
    browser: Browser, tmp_path: Path
) -> None:
    write_agents(tmp_path, 0.0)
    daily = {"agent": "planner", "input": "the daily report", "every": "1h"}
    srv = Server(tmp_path, config(triggers={"daily": daily}))
    srv.start()
    try:
        page, errors = open_page(browser, srv.url, csp=True)
        item = page.locator("#triggers-list .trigger[data-trigger='daily']")
        item.wait_for()
        assert "planner · every 3600 s" in item.inner_text()
        assert "next " in item.inner_text()
        item.get_by_role("button", name="Fire now").click()
        page.wait_for_selector("#triggers-list .trigger .last")
        assert ": started" in item.locator(".last").inner_text()
        item.get_by_role("button", name="open run").click()
        page.wait_for_selector("#run-status.completed", timeout=60_000)
        assert page.evaluate("window.__console.state.run.runId").startswith("run-")
        item.get_by_role("button", name="Pause").click()
        page.wait_for_selector("#triggers-list .trigger.paused")
        assert "paused" in item.locator(".next").inner_text()
        item.get_by_role("button", name="Resume").click()
        page.wait_for_selector("#triggers-list .trigger:not(.paused)")
        assert errors == []
    finally:
        srv.stop(signal.SIGKILL)


def test_a_dead_webhook_delivery_is_shown_and_redelivered_from_the_console(
    browser: Browser, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import http.server
    import threading

    up = threading.Event()
    got: list[str] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            got.append(self.headers["webhook-id"])
            self.send_response(200 if up.is_set() else 503)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    monkeypatch.setenv("CONSOLE_HOOK_SECRET", "whsec_" + base64.b64encode(b"s" * 32).decode())
    write_agents(tmp_path, 0.0)
    hook = {
        "url": f"http://127.0.0.1:{receiver.server_port}/hook",
        "events": ["RUN_FINISHED"],
        "secret_env": "CONSOLE_HOOK_SECRET",
    }
    srv = Server(
        tmp_path,
        config(
            webhooks={"ci": hook},
            tools={"http_allowed_hosts": ["127.0.0.1"]},
            limits={"webhooks": {"max_attempts": 1}},
        ),
    )
    srv.start()
    try:
        page, errors = open_page(browser, srv.url, csp=True)
        start_run(page, "researcher", "q")
        page.wait_for_selector("#run-status.completed", timeout=60_000)
        ws_url = srv.url.replace("http://", "ws://") + "ws"
        with sync_connect(ws_url) as ws:  # (until the delivery is dead: then the page
            for _ in range(200):  # reads it at once, not at its next 10 s look)
                ws.send(json.dumps({"op": "webhooks"}))
                if json.loads(ws.recv(timeout=10))["dead"]:
                    break
                time.sleep(0.05)
        page.reload()
        item = page.locator("#webhooks-list li.dead")
        item.wait_for()
        assert "RUN_FINISHED → ci" in item.inner_text()
        assert "1 attempts · HTTP 503" in item.inner_text()
        assert page.text_content("#webhooks-count") == "0 waiting · 1 dead"
        up.set()
        item.get_by_role("button", name="Redeliver").click()
        page.wait_for_selector("#notice.ok:has-text('redelivered 1')")
        page.wait_for_selector("#webhooks-list li.dead", state="detached")
        assert len(got) == 2 and got[0] == got[1]  # the same delivery, sent again
        assert errors == []
    finally:
        srv.stop(signal.SIGKILL)
        receiver.shutdown()
        receiver.server_close()


def test_a_compaction_shows_in_the_detail_pane(browser: Browser, tmp_path: Path) -> None:
    pages = " ".join(["word"] * 200)
    reader = {
        "description": "reads pages",
        "instructions": "Read the pages.",
        "tools": ["agent_spawn"],
        "compaction": {"max_context_tokens": 600, "keep_last_turns": 1},
        "script": {
            "summary": "Notes: {input}",
            "turns": [
                {
                    "say": f"Reading page {i}.",
                    "calls": [
                        {"name": "agent_spawn", "args": {"agent_id": "page", "task": f"p{i}"}}
                    ],
                }
                for i in range(4)
            ]
            + [{"say": "All read."}],
        },
    }
    page_spec = {
        "description": "a page",
        "instructions": "i",
        "script": {"turns": [{"say": pages}]},
    }
    write_agents(tmp_path, 0.0, {"reader": reader, "page": page_spec})
    srv = Server(tmp_path, config())
    srv.start()
    try:
        page, errors = open_page(browser, srv.url)
        start_run(page, "reader", "read them")
        page.wait_for_selector("#run-status.completed", timeout=60_000)
        node(page, "reader").first.click()
        box = page.locator("#detail .compaction")
        box.first.wait_for(timeout=30_000)
        text = box.first.inner_text().lower()  # the label is shown in capitals
        assert "compacted before turn 4 (past its threshold)" in text
        assert "earlier turns summarized" in text and "notes:" in text
        shot(page, "console-compaction.png")
        assert errors == []
    finally:
        srv.stop(signal.SIGKILL)


def test_cancel_and_send_reach_the_run(browser: Browser, tmp_path: Path) -> None:
    write_agents(tmp_path, token_delay=0.05)
    srv = Server(tmp_path, config())
    srv.start()
    try:
        page, errors = open_page(browser, srv.url)
        start_run(page, "planner", "slow and steady")
        page.wait_for_function("window.__console.state.run.nodes.size >= 3", timeout=60_000)
        node(page, "planner").first.click()
        page.fill("#send-box input", "please hurry")
        page.press("#send-box input", "Enter")
        page.wait_for_function(
            "window.__console.state.run.nodes.get('root').messages"
            ".some(m => m.text === 'please hurry')"
        )
        # Text selected in the detail pane stays selected while the agent streams on.
        page.click("#detail h3")
        page.evaluate(
            """const range = document.createRange();
            range.selectNodeContents(document.querySelector('#detail .block .prose'));
            document.getSelection().removeAllRanges();
            document.getSelection().addRange(range);"""
        )
        page.wait_for_timeout(800)
        assert page.evaluate("document.getSelection().toString()") == "slow and steady"
        page.click("#cancel")
        page.wait_for_selector("#run-status.cancelled", timeout=60_000)
        page.wait_for_function(
            "document.querySelectorAll('.node .badge.running').length === 0"
            " && document.querySelectorAll('.node .badge.cancelled').length >= 1"
        )
        assert "please hurry" in page.inner_text("#detail")
        assert errors == []
    finally:
        srv.stop(signal.SIGKILL)


def test_stop_on_an_agent_cancels_its_subtree_and_the_run_goes_on(
    browser: Browser, tmp_path: Path
) -> None:
    # (Slow enough that the researcher is still running when the click lands, on a
    # loaded machine too.)
    write_agents(tmp_path, token_delay=0.1)
    srv = Server(tmp_path, config())
    srv.start()
    try:
        page, errors = open_page(browser, srv.url)
        key = select_a_streaming_researcher(page)
        page.fill("#stop-box input", "enough")
        page.click("#stop-box button")
        page.wait_for_function(
            f"window.__console.state.run.nodes.get({key!r}).status === 'cancelled'",
            timeout=60_000,
        )
        page.wait_for_selector("#run-status.completed", timeout=30_000)
        agent = page.evaluate(f"window.__console.state.run.nodes.get({key!r}).errorMessage")
        assert "cancelled by the user: enough" in agent
        assert page.locator("#stop-box").count() == 0  # nothing left to stop
        assert errors == []
    finally:
        srv.stop(signal.SIGKILL)


APPROVING = {
    # boss → lead → fixer: fixer's write_file (depth 2) waits; boss's `wait` runs meanwhile.
    "boss": {
        "description": "b",
        "instructions": "b",
        "tools": ["agent_spawn"],
        "script": {
            "turns": [
                {"calls": [{"name": "agent_spawn", "args": {"agent_id": "lead", "task": "t"}}]},
                {"say": "boss: {results}"},
            ]
        },
    },
    "lead": {
        "description": "l",
        "instructions": "l",
        "tools": ["agent_spawn"],
        "script": {
            "turns": [
                {"calls": [{"name": "agent_spawn", "args": {"agent_id": "fixer", "task": "t"}}]},
                {"say": "lead: {results}"},
            ]
        },
    },
    "fixer": {
        "description": "f",
        "instructions": "f",
        "tools": ["write_file"],
        "approval": ["write_file"],
        "approval_edit": True,
        "script": {
            "turns": [
                {"calls": [{"name": "write_file", "args": {"path": "p.txt", "content": "old"}}]},
                {"say": "fixer: {results}"},
            ]
        },
    },
}


def test_an_approval_deep_in_the_tree_is_answered_from_the_console(
    browser: Browser, tmp_path: Path
) -> None:
    write_agents(tmp_path, token_delay=0.01, extra=APPROVING)
    srv = Server(tmp_path, config())
    srv.start()
    try:
        page, errors = open_page(browser, srv.url)
        run_id = start_run(page, "boss", "fix it")
        other, other_errors = open_page(browser, f"{srv.url}?run={run_id}")
        for p in (page, other):
            # Marked in the tree, the runs list and the timeline's model.
            p.wait_for_selector(".node .badge.waiting", timeout=60_000)
            assert node(p, "fixer").locator(".badge").inner_text() == "waiting for approval"
            p.wait_for_selector(f'#runs-list li[data-run="{run_id}"] .badge.waiting')
            assert p.evaluate("window.__console.state.run.waiting") == 1
        node(page, "fixer").click()
        form = page.locator("form.approval")
        form.wait_for()
        assert "write_file" in form.inner_text().lower()
        header = form.locator(".label").first.inner_text().lower()
        assert "answer within" in header and "(unanswered, it is refused)" in header, header
        assert "denied" not in header  # a deadline, not a decision
        shot(page, "console-approval.png")
        args = form.locator("textarea")
        assert json.loads(args.input_value()) == {"path": "p.txt", "content": "old"}
        args.fill("not json")
        form.locator("button", has_text="Approve").click()
        page.wait_for_function("document.querySelector('#notice').textContent.includes('JSON')")
        args.fill(json.dumps({"path": "p.txt", "content": "new"}))
        form.locator("input").fill("checked by hand")
        form.locator("button", has_text="Approve").click()
        # The decision shows live in every open console.
        node(other, "fixer").click()
        other.wait_for_function(
            "document.querySelector('#detail').innerText.toLowerCase()"
            ".includes('approved by client (edited): checked by hand')",
            timeout=60_000,
        )
        for p in (page, other):
            p.wait_for_selector("#run-status.completed", timeout=60_000)
            assert p.locator(".node .badge.waiting").count() == 0
            assert p.locator("form.approval").count() == 0
        assert (tmp_path / "workspace" / "p.txt").read_text() == "new"
        assert errors == [] and other_errors == []
    finally:
        srv.stop(signal.SIGKILL)


def test_a_remote_subtree_shows_and_is_answered_as_a_local_one(
    browser: Browser, tmp_path: Path
) -> None:
    """Boss here → far_lead (remote: `lead` on another server) → fixer there, whose
    write_file waits: the tree shows fixer under far_lead, and the console's answer
    is handed to that server."""
    far_root, here_root = tmp_path / "far", tmp_path / "here"
    far_root.mkdir()
    here_root.mkdir()
    write_agents(far_root, token_delay=0.01, extra=APPROVING)
    far = Server(far_root, config())
    far.start()
    far_ws = f"ws://127.0.0.1:{far.port}/ws"
    boss = json.loads(json.dumps(APPROVING["boss"]).replace('"lead"', '"far_lead"'))
    here_agents = {
        "boss": boss,
        "far_lead": {"description": "theirs", "remote": {"url": far_ws, "agent": "lead"}},
    }
    write_agents(here_root, token_delay=0.01, extra=here_agents)
    here = Server(here_root, config())
    here.start()
    try:
        page, errors = open_page(browser, here.url)
        start_run(page, "boss", "fix it")
        page.wait_for_selector(".node .badge.waiting", timeout=60_000)
        assert node(page, "fixer").locator(".badge").inner_text() == "waiting for approval"
        assert node(page, "far_lead").count() == 1
        node(page, "fixer").click()
        form = page.locator("form.approval")
        form.wait_for()
        form.locator("textarea").fill(json.dumps({"path": "p.txt", "content": "from here"}))
        form.locator("button", has_text="Approve").click()
        page.wait_for_selector("#run-status.completed", timeout=60_000)
        assert page.locator(".node .badge.waiting").count() == 0
        assert (far_root / "workspace" / "p.txt").read_text() == "from here"
        assert errors == []
    finally:
        here.stop(signal.SIGKILL)
        far.stop(signal.SIGKILL)


def test_a_viewer_sees_what_waits_and_cannot_answer(browser: Browser, tmp_path: Path) -> None:
    write_agents(tmp_path, token_delay=0.01, extra=APPROVING)
    tokens = [
        {"name": "ops", "token": "ops-secret", "role": "admin"},
        {"name": "eve", "token": "eve-secret", "role": "viewer"},
    ]
    srv = Server(tmp_path, config(server={"tokens": tokens}))
    srv.start()
    try:
        page = browser.new_page(bypass_csp=True)
        page.goto(srv.url)
        page.fill("#token-input", "eve-secret")
        page.click("#token-go")
        page.wait_for_selector("#conn.open", timeout=30_000)
        run_id = start_admin_run(srv, "ops-secret", "boss")  # over the protocol
        page.goto(f"{srv.url}?run={run_id}")
        page.wait_for_selector(".node .badge.waiting", timeout=60_000)
        node(page, "fixer").click()
        form = page.locator("form.approval")
        form.wait_for()
        assert "write_file" in form.inner_text().lower()
        assert not form.locator("button", has_text="Approve").is_visible()
        assert page.locator(".fork-here").count() > 0  # drawn, but not for a viewer:
        assert not page.locator(".fork-here").first.is_visible()
    finally:
        srv.stop(signal.SIGKILL)


def start_admin_run(srv: Server, token: str, agent: str) -> str:
    """Start a run over the WebSocket protocol (a plain client, not the page)."""
    url = srv.url.replace("http", "ws", 1) + "ws"
    with sync_connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        ws.send(json.dumps({"op": "run", "id": 1, "agent": agent, "input": "x", "stream": True}))
        ack = json.loads(ws.recv())
        assert ack["op"] == "ack", ack
        run_id: str = ack["runId"]
        return run_id


def test_a_depth_filter_is_applied_by_the_server(browser: Browser, server: Server) -> None:
    page, errors = open_page(browser, server.url)
    start_run(page, "planner", "filtered")
    page.wait_for_selector("#run-status.completed", timeout=30_000)
    page.fill("#f-depth", "0")
    page.press("#f-depth", "Tab")  # change event: resubscribe with filter {maxDepth: 0}
    page.wait_for_function(
        "window.__console.state.filter.maxDepth === 0"
        " && window.__console.state.run.status === 'completed'"
        " && document.querySelectorAll('.node').length > 0",
        timeout=30_000,
    )
    assert page.locator(".node").count() == 1
    depths = page.evaluate("[...window.__console.state.run.nodes.values()].map(a => a.depth)")
    assert depths == [0]
    assert errors == []


def test_after_a_server_restart_the_page_resumes_without_loss_or_duplicates(
    browser: Browser, tmp_path: Path
) -> None:
    write_agents(tmp_path, token_delay=0.03)
    srv = Server(tmp_path, config())
    srv.start()
    try:
        page, _ = open_page(browser, srv.url)
        run_id = start_run(page, "planner", "restart me")
        page.wait_for_function("window.__console.state.run.nodes.size >= 3", timeout=60_000)
        srv.stop(signal.SIGTERM)  # graceful: the run stops, its journal kept as it was
        page.wait_for_selector("#conn.disconnected", timeout=30_000)
        srv.start()  # same port, same journal: the run goes on where it stopped
        page.wait_for_selector("#conn.open", timeout=60_000)
        page.wait_for_selector("#run-status.completed", timeout=30_000)
        seen = model_events(page)
        assert seen["count"] == seen["last"]  # every seq once, none missing
        statuses = page.evaluate(
            "[...window.__console.state.run.nodes.values()].map(a => a.status)"
        )
        assert "running" not in statuses
        assert page.evaluate("window.__console.state.run.runId") == run_id
    finally:
        srv.stop(signal.SIGKILL)


def test_after_kill_9_and_a_restart_every_card_says_interrupted(
    browser: Browser, tmp_path: Path
) -> None:
    write_agents(tmp_path, token_delay=0.03)
    srv = Server(tmp_path, config(server={"resume_runs": False}))
    srv.start()
    try:
        page, _ = open_page(browser, srv.url)
        run_id = start_run(page, "planner", "crash me")
        page.wait_for_function("window.__console.state.run.nodes.size >= 3", timeout=60_000)
        srv.stop(signal.SIGKILL)
        srv.start()  # marks the run interrupted at start
        fresh, errors = open_page(browser, f"{srv.url}?run={run_id}")
        fresh.wait_for_selector("#run-status.interrupted", timeout=60_000)
        fresh.wait_for_function(
            "window.__console.state.run.nodes.size >= 3"
            " && document.querySelectorAll('.node .badge.running').length === 0"
            " && document.querySelectorAll('.node .badge.interrupted').length >= 2"
        )
        shot(fresh, "console-interrupted.png")
        # Nothing reads as live once the run has ended: the planner's spawn calls
        # that never got a result say how they ended.
        node(fresh, "planner").first.click()
        fresh.wait_for_selector("#detail .tool")
        detail = fresh.inner_text("#detail").lower()  # labels are upper case on screen
        assert "not finished (interrupted)" in detail
        assert "· running" not in detail and "streaming" not in detail
        assert fresh.locator("#stop-box").count() == 0
        assert errors == []
    finally:
        srv.stop(signal.SIGKILL)


def test_a_server_with_tokens_asks_for_one_and_keeps_it_out_of_the_url(
    browser: Browser, tmp_path: Path
) -> None:
    write_agents(tmp_path, token_delay=0.0)
    srv = Server(
        tmp_path,
        config(
            server={
                "tokens": [
                    {"name": "ann", "token": "s3cret", "role": "admin"},
                    {"name": "eve", "token": "v1ewer", "role": "viewer"},
                ]
            }
        ),
    )
    srv.start()
    try:
        page = browser.new_page(bypass_csp=True)
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: dialogs.append(dialog.message))
        page.goto(srv.url)
        # Asked in the page, with a password field a password manager can fill.
        page.wait_for_selector("#token-form:not(.hidden)", timeout=30_000)
        assert page.get_attribute("#token-input", "type") == "password"
        assert page.get_attribute("#token-input", "autocomplete") == "current-password"
        page.fill("#token-input", "wrong")
        page.click("#token-go")
        page.wait_for_selector("#token-form:not(.hidden)", timeout=30_000)
        # The form says why it is back (it came back empty, with no word).
        page.wait_for_selector("#notice.error", timeout=30_000)
        assert "refused that token" in page.inner_text("#notice")
        page.fill("#token-input", "s3cret")
        page.click("#token-go")
        page.wait_for_selector("#conn.open", timeout=30_000)
        assert dialogs == [] and page.is_hidden("#token-form")
        start_run(page, "critic", "with a token")
        page.wait_for_selector("#run-status.completed", timeout=60_000)
        assert "s3cret" not in page.url
        assert page.evaluate("sessionStorage.getItem('orchestrator.token')") == "s3cret"
        # A viewer's console watches the same run and offers no control at all.
        viewer = browser.new_page(bypass_csp=True)
        viewer.goto(f"{srv.url}?run={page.evaluate('window.__console.state.run.runId')}")
        viewer.wait_for_selector("#token-form:not(.hidden)", timeout=30_000)
        viewer.fill("#token-input", "v1ewer")
        viewer.click("#token-go")
        viewer.wait_for_selector("#run-status.completed", timeout=60_000)
        assert viewer.inner_text("#conn") == "connected · read-only"
        assert viewer.is_hidden("#start") and viewer.is_hidden("#cancel")
        node(viewer, "critic").first.click()
        assert viewer.locator("#send-box:visible, #stop-box:visible").count() == 0
    finally:
        srv.stop(signal.SIGKILL)


def test_dark_mode_follows_the_system(browser: Browser, server: Server) -> None:
    light = browser.new_page(color_scheme="light", bypass_csp=True)
    dark = browser.new_page(color_scheme="dark", bypass_csp=True)
    colors = []
    for page in (light, dark):
        page.goto(server.url)
        page.wait_for_selector("#conn.open")
        colors.append(page.evaluate("getComputedStyle(document.body).backgroundColor"))
    assert colors[0] != colors[1]
    assert colors[1] == "rgb(17, 20, 24)"


def test_at_390_px_the_controls_fit_the_screen(browser: Browser, server: Server) -> None:
    page, errors = open_page(browser, server.url, width=390)
    box = page.locator("#go").bounding_box()
    assert box is not None and box["x"] + box["width"] <= 390
    start_run(page, "planner", "on a phone")
    page.wait_for_selector("#run-status.completed", timeout=30_000)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    shot(page, "console-390px.png", full_page=True)
    assert errors == []


def test_500_agents_stream_without_long_frames(browser: Browser, tmp_path: Path) -> None:
    """8 children of 8 of 8 (585 agents, over 100k events) streaming at once: none of
    the console's work takes over 50 ms, and the page (Long Tasks API) never freezes."""
    specs: dict[str, Any] = {}
    for level in range(4):
        turns: list[dict[str, Any]] = []
        words = "w " * 170
        if level < 3:
            calls = [
                {
                    "name": "agent_spawn",
                    "args": {"agent_id": f"level{level + 1}", "task": f"part {i}"},
                }
                for i in range(8)
            ]
            turns = [{"say": words, "calls": calls}, {"say": "ok"}]
        else:
            turns = [{"say": words}]
        specs[f"level{level}"] = {
            "description": "load",
            "instructions": "load",
            "tools": ["agent_spawn"],
            # 50 words/s per agent, a model's pace: ~29k events/s with all 512 leaves on.
            "script": {"token_delay": 0.02, "turns": turns},
        }
    write_agents(tmp_path, token_delay=0.0, extra=specs)
    srv = Server(tmp_path, config(limits={"max_agents": 1000, "max_depth": 4}))
    srv.start()
    try:
        page, errors = open_page(browser, srv.url)
        start_run(page, "level0", "load")
        # Observed from here, while it streams (Playwright's own typing into the page
        # above is not the console's work).
        page.evaluate(
            """window.__long = [];
            new PerformanceObserver((list) => {
              for (const entry of list.getEntries()) window.__long.push(entry.duration);
            }).observe({type: "longtask", buffered: false});"""
        )
        page.wait_for_selector("#run-status.completed", timeout=120_000)
        agents = page.evaluate("window.__console.state.run.nodes.size")
        assert agents == 585
        assert page.evaluate("window.__console.state.run.eventCount") >= 100_000
        long_tasks = page.evaluate("window.__long")
        timings = page.evaluate("window.__console.timings")
        # What this asserts is that nothing freezes (a piece of the console's work or
        # a task of the page past a second). How fast it is — the console's own work
        # 13-21 ms on a quiet machine, 38 ms beside the suite, the browser's own tasks
        # 51-87 ms — is a figure for docs/console.md ("Scale"), not a claim here: a
        # loaded machine is slower.
        assert max(timings.values()) <= 1000, timings
        assert max(long_tasks, default=0) <= 1000, (long_tasks, timings)
        assert page.evaluate("window.__console.state.run.nodes.size") == 585
        shot(page, "console-585-agents.png")
        assert errors == []
    finally:
        srv.stop(signal.SIGKILL)


def test_the_page_files_are_served_and_nothing_else(server: Server) -> None:
    import urllib.error
    import urllib.request

    for name in ("", "static/app.js", "static/style.css", "static/favicon.svg"):
        with urllib.request.urlopen(server.url + name, timeout=5) as response:
            assert response.status == 200
    for name in ("static/../config.py", "static/nope.js", "static/"):
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(server.url + name, timeout=5)
    with urllib.request.urlopen(server.url + "auth", timeout=5) as response:
        assert json.loads(response.read())["authorized"] is True


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost"])
def test_the_console_works_on_each_loopback_name(
    browser: Browser, server: Server, name: str
) -> None:
    """The Host and Origin checks (DNS rebinding) let the console in by either name."""
    page, errors = open_page(browser, f"http://{name}:{server.port}/")
    start_run(page, "critic", f"reached as {name}")
    page.wait_for_selector("#run-status.completed", timeout=30_000)
    assert errors == []


def test_fork_from_here_starts_a_fork_and_shows_its_lineage(
    browser: Browser, server: Server
) -> None:
    """docs/fork.md: "Fork from here" on a turn of an agent, with a message and replay;
    the page follows the fork, and the run header and the runs list say what it came
    from. A click on the timeline opens the same box at that agent's moment."""
    page, errors = open_page(browser, server.url)
    original = start_run(page, "planner", "fork me")
    page.wait_for_selector("#run-status.completed", timeout=30_000)
    took = page.evaluate("window.__console.state.run.lastTs - window.__console.state.run.firstTs")
    page.wait_for_timeout(3000)  # the fork starts well after its original ended
    node(page, "ResearcherAgent").first.click()
    turn = page.locator("#detail .turn").nth(1)
    seq = int(turn.locator(".fork-here").get_attribute("data-seq") or "0")
    turn.locator(".fork-here").click()
    box = page.locator("#fork-box")
    box.wait_for()
    assert f"at seq {seq}" in box.inner_text()
    assert box.locator("input[type=checkbox]").is_checked()
    box.locator("textarea").fill("cite one more source")
    shot(page, "console-fork.png")
    box.locator("button", has_text="Fork").click()
    page.wait_for_function(f"window.__console.state.run.runId !== {json.dumps(original)}")
    fork_id = page.evaluate("window.__console.state.run.runId")
    page.wait_for_selector("#run-status.completed", timeout=30_000)
    assert page.inner_text("#run-fork") == f"fork of {original} @ seq {seq}"
    assert f"?run={fork_id}" in page.url
    messages = page.evaluate(
        "[...window.__console.state.run.nodes.values()].flatMap(a => a.messages.map(m => m.text))"
    )
    assert messages == ["cite one more source"]
    # The turn it was forked at is asked again: its copied start says so.
    node(page, "ResearcherAgent").first.click()
    labels = [t.lower() for t in page.locator("#detail .turn .label").all_inner_texts()]
    assert any("abandoned (the fork goes on from before it)" in t for t in labels), labels
    assert not any("worker lost" in t for t in labels), labels
    # Its durations are its own: the 3 s between the original and the fork left out.
    shift = page.evaluate("window.__console.state.run.shift")
    span = page.evaluate("window.__console.state.run.lastTs - window.__console.state.run.firstTs")
    assert shift >= 3 and span < took + shift, (shift, span, took)
    page.wait_for_selector(f"#runs-list li[data-run='{fork_id}'] .badge.fork")
    badge = page.locator(f"#runs-list li[data-run='{fork_id}'] .badge.fork")
    assert badge.inner_text() == f"fork @ {seq}"
    # The lineage link opens the original; a click on its timeline opens a fork box.
    page.click("#run-fork")
    page.wait_for_function(f"window.__console.state.run.runId === {json.dumps(original)}")
    page.wait_for_selector("#run-status.completed", timeout=30_000)
    page.wait_for_function("window.__console.state.timelineRows !== undefined")
    canvas = page.locator("#timeline canvas")
    canvas.click(position={"x": 400, "y": 14 * 1 + 8})
    box.wait_for()
    at = int(box.get_attribute("data-seq") or "0")
    assert 1 <= at <= page.evaluate("window.__console.state.run.lastSeq")
    box.locator("button", has_text="Cancel").click()
    assert page.locator("#fork-box").count() == 0
    assert errors == []


ECHO = {
    "echo": {
        "description": "Says back what it was told.",
        "instructions": "Echo.",
        "script": {"token_delay": 0.01, "turns": [{"say": "you said {input}"}]},
    },
    "slow": {
        "description": "Takes its time.",
        "instructions": "Slowly.",
        "script": {"token_delay": 0.2, "turns": [{"say": "thinking it over slowly, {input}"}]},
    },
}


def exchanges(page: Page) -> list[list[str]]:
    found: list[list[str]] = page.evaluate(
        "[...document.querySelectorAll('#chat .exchange')].map(e =>"
        " [e.querySelector('.said.user').innerText, e.querySelector('.said.agent').innerText])"
    )
    return found


def test_a_thread_reads_as_a_chat_that_goes_on_from_its_message_box(
    browser: Browser, tmp_path: Path
) -> None:
    write_agents(tmp_path, token_delay=0.01, extra=ECHO)
    with serving(tmp_path, config()) as srv:
        page, errors = open_page(browser, srv.url)
        first = start_run(page, "echo", "hello there")
        page.wait_for_selector("#chat .exchange .said.agent .answer", timeout=60_000)
        assert exchanges(page) == [["hello there", "you said hello there"]]
        page.fill("#chat-input", "and again")
        page.press("#chat-input", "Enter")
        page.wait_for_function(
            "document.querySelectorAll('#chat .exchange .said.agent .answer').length === 2",
            timeout=60_000,
        )
        assert exchanges(page) == [
            ["hello there", "you said hello there"],
            ["and again", "you said and again"],
        ]
        second: str = page.evaluate("window.__console.state.run.runId")
        assert second != first
        # The runs list keeps the thread's runs together under it.
        page.wait_for_selector("#runs-list .thread-head", timeout=30_000)
        assert "2 messages" in page.inner_text("#runs-list .thread-head")
        in_thread = page.eval_on_selector_all(
            "#runs-list li.in-thread", "items => items.map(li => li.dataset.run)"
        )
        assert in_thread == [first, second]
        # An exchange opens its run's tree.
        page.locator("#chat .exchange", has_text="hello there").locator("button").click()
        page.wait_for_function(f"window.__console.state.run.runId === {first!r}")
        shot(page, "console-chat.png")
        assert errors == []


def test_a_conversations_message_box_takes_a_file_too(browser: Browser, tmp_path: Path) -> None:
    describer = {
        "description": "says what it got",
        "instructions": "look",
        "script": {"turns": [{"say": "I got {attachments}"}]},
    }
    write_agents(tmp_path, token_delay=0.0, extra={"describer": describer})
    with serving(tmp_path, config()) as srv:
        page, errors = open_page(browser, srv.url)
        start_run(page, "describer", "hello")
        page.wait_for_selector("#chat .exchange .said.agent .answer", timeout=60_000)
        page.set_input_files(
            "#chat-files",
            {"name": "notes.txt", "mimeType": "text/plain", "buffer": b"remember this"},
        )
        # Regression: the box is drawn again as the conversation moves; the new input
        # had lost the files chosen (the message went without them).
        page.evaluate("window.__console.chat.draw()")
        assert page.get_attribute("#chat .attach", "data-count") == "1"
        page.fill("#chat-input", "and this")
        page.press("#chat-input", "Enter")
        page.wait_for_function(
            "document.querySelectorAll('#chat .exchange .said.agent .answer').length === 2",
            timeout=60_000,
        )
        # The thread's second run has the file (and the conversation keeps none twice).
        assert exchanges(page)[1] == ["and this", "I got notes.txt (text/plain, 13 bytes)"]
        assert errors == []


def test_while_a_run_of_the_thread_runs_the_message_box_offers_the_multitask_choice(
    browser: Browser, tmp_path: Path
) -> None:
    write_agents(tmp_path, token_delay=0.01, extra=ECHO)
    with serving(tmp_path, config()) as srv:
        page, errors = open_page(browser, srv.url)
        start_run(page, "slow", "take your time")
        page.wait_for_selector("#chat-multitask", timeout=30_000)
        page.select_option("#chat-multitask", "enqueue")
        page.fill("#chat-input", "then this")
        page.press("#chat-input", "Enter")
        page.wait_for_function(
            "document.querySelectorAll('#chat .exchange .said.agent .answer').length === 2",
            timeout=60_000,
        )
        said = exchanges(page)
        assert [user for user, _ in said] == ["take your time", "then this"]
        assert said[1][1] == "thinking it over slowly, then this"
        page.wait_for_selector("#chat-multitask", state="detached", timeout=30_000)
        assert errors == []


def test_notices_say_what_worked_and_what_did_not_and_a_task_too_long_is_refused_here(
    browser: Browser, server: Server
) -> None:
    """A 5 MB task closed the connection (1009) with no word why, success notices were
    red like errors, and an old error stayed after a later success."""
    page, errors = open_page(browser, server.url)
    page.fill("#input", "")
    page.press("#input", "Enter")
    page.wait_for_selector("#notice.error")
    start_run(page, "critic", "short")
    page.click("#copy-id")
    page.wait_for_selector("#notice.ok")  # replaced the error, in its own colour
    page.select_option("#agent", "critic")
    page.evaluate("document.querySelector('#input').value = 'x'.repeat(400 * 1024)")
    page.press("#input", "Enter")
    page.wait_for_selector("#notice.error")
    said = page.inner_text("#notice")
    assert "takes at most 256 KB (limits.max_input_bytes)" in said, said
    assert page.get_attribute("#conn", "class") == "open"
    page.wait_for_timeout(300)
    assert page.get_attribute("#conn", "class") == "open"  # still connected
    assert errors == []


def test_at_1440_px_the_agent_picker_shows_whole_names_and_cards_show_names(
    browser: Browser, server: Server
) -> None:
    """The picker was clipped ("PlannerAgent (plann"), and the root card showed its id
    where its children showed their names."""
    page, errors = open_page(browser, server.url, width=1440)
    page.select_option("#agent", "planner")
    fits = page.evaluate(
        """(() => {
          const select = document.querySelector('#agent');
          const text = select.options[select.selectedIndex].text;
          const ctx = document.createElement('canvas').getContext('2d');
          ctx.font = getComputedStyle(select).font;
          return ctx.measureText(text).width <= select.clientWidth;
        })()"""
    )
    assert fits
    start_run(page, "planner", "names please")
    page.wait_for_selector(".node[data-key='root'] > .row .name")
    assert page.inner_text(".node[data-key='root'] > .row .name") == "PlannerAgent"
    assert errors == []
