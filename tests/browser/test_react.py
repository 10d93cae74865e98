"""The React hook (`@agent-orchestrator/client/react`, docs/js.md) in Chromium: the
docs' example as written, and a 500-agent run whose renders and frames are counted.

The page is bundled with the package's esbuild (`npm ci --prefix js`; skipped, saying
so, without it) and served on the server's own origin (Playwright answers its two
URLs), so the WebSocket is the page's as it would be in an app."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser, Page

from tests.browser.test_console import Server, config, write_agents
from tests.doc_examples import examples
from tests.helpers import REPO
from tests.integration.test_js_package import NODE_BIN, need_package

JS = REPO / "js"
PAGE = '<!doctype html><meta charset="utf-8"><div id="app"></div><script src="/app.js"></script>'


def bundle(entry: Path, mode: str = "production") -> str:
    """`entry` and what it imports (React, the package's sources) as one script."""
    need_package()
    done = subprocess.run(
        [
            str(NODE_BIN / "esbuild"),
            str(entry),
            "--bundle",
            "--format=iife",
            "--jsx=automatic",
            f"--define:process.env.NODE_ENV='{mode}'",
            "--alias:@agent-orchestrator/client=./src",
            "--log-level=error",
        ],
        cwd=JS,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


@contextlib.contextmanager
def app_server(script: str) -> Iterator[str]:
    """The app's own origin (another loopback port), serving its page and `script`."""
    files = {"/app.js": (script, "text/javascript"), "/": (PAGE, "text/html")}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body, kind = files.get(self.path.split("?")[0], files["/"])
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


def open_app(browser: Browser, url: str) -> tuple[Page, list[str]]:
    """A page of the app at `url`."""
    page = browser.new_page()
    page.set_default_timeout(60_000)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(url)
    return page, errors


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def app_and_server(
    tmp_path: Path, script: str, settings: dict[str, Any], port: int
) -> Iterator[tuple[str, Server]]:
    """The app's page on its own origin, and a server on `port` that lists that origin
    in `server.allowed_origins` (as an app's deployment does)."""
    with app_server(script) as url:
        origin = url.rstrip("/")
        settings["server"] = {**settings["server"], "allowed_origins": [origin]}
        server = Server(tmp_path, settings)
        server.port = port
        server.start()
        try:
            yield url, server
        finally:
            server.stop(signal.SIGKILL)


def docs_example(port: int) -> str:
    """docs/js.md's React example as written, bundled, its server on `port`."""
    (example,) = [e for e in examples("tsx") if e.run == "browser"]
    entry = JS / "test" / f".doc-example-{port}.tsx"
    entry.write_text(example.text.replace("ws://127.0.0.1:8765/ws", f"ws://127.0.0.1:{port}/ws"))
    try:
        return bundle(entry)
    finally:
        entry.unlink()


def test_the_docs_react_example_shows_the_whole_tree(browser: Browser, tmp_path: Path) -> None:
    write_agents(tmp_path, token_delay=0.005)
    port = free_port()
    script = docs_example(port)
    with app_and_server(tmp_path, script, config(), port) as (url, _):
        page, errors = open_app(browser, url)
        page.wait_for_function("document.querySelector('#status')?.textContent === 'completed'")
        answers = page.locator(".answer").all_inner_texts()
        names = page.locator("b").all_inner_texts()
    assert len(answers) == 5  # the planner, 2 researchers, 2 critics
    assert names.count("ResearcherAgent") == 2 and names.count("CriticAgent") == 2
    assert answers[0].startswith("Here is what the research team found")
    assert errors == []


def test_the_docs_react_example_from_an_origin_not_allowed_says_why(
    browser: Browser, tmp_path: Path
) -> None:
    """Issue 57, 22: served from an origin the server does not list, the example shows
    the hook's error, code and message, not only the word `error`."""
    write_agents(tmp_path, token_delay=0.005)
    port = free_port()
    script = docs_example(port)
    with app_server(script) as url:
        server = Server(tmp_path, config())  # (no allowed_origins)
        server.port = port
        server.start()
        try:
            page, _ = open_app(browser, url)
            page.wait_for_function("document.querySelector('#status')?.textContent === 'error'")
            said = page.locator("#error").inner_text(timeout=60_000)
        finally:
            server.stop(signal.SIGKILL)
    code, _, message = said.partition(": ")
    assert code and message and said != "error", said


def wide(levels: int = 4, fan: int = 8) -> dict[str, Any]:
    """`fan` children of `fan` of … `levels` deep (585 agents for 4 and 8), streaming."""
    specs: dict[str, Any] = {}
    for level in range(levels):
        words = "w " * 170
        turns: list[dict[str, Any]] = [{"say": words}]
        if level < levels - 1:
            calls = [
                {
                    "name": "agent_spawn",
                    "args": {"agent_id": f"level{level + 1}", "task": f"part {i}"},
                }
                for i in range(fan)
            ]
            turns = [{"say": words, "calls": calls}, {"say": "ok"}]
        specs[f"level{level}"] = {
            "description": "load",
            "instructions": "load",
            "tools": ["agent_spawn"],
            "script": {"token_delay": 0.02, "turns": turns},
        }
    return specs


def test_use_agent_tree_renders_once_a_frame_and_a_card_only_when_its_agent_changed(
    browser: Browser, tmp_path: Path
) -> None:
    """585 agents (over 100k events) into one React tree of cards: the app re-renders
    at most once per animation frame, each card only when its agent changed, and the
    whole tree is there at the end. Renders per second and the longest frame are
    printed (docs/benchmarks.md), not asserted: a loaded machine is slower."""
    script = bundle(JS / "test" / "react-perf.tsx")
    write_agents(tmp_path, token_delay=0.0, extra=wide())
    port = free_port()
    settings = config(limits={"max_agents": 1000, "max_depth": 4})
    with app_and_server(tmp_path, script, settings, port) as (url, _):
        page, errors = open_app(browser, f"{url}?agent=level0&ws=ws://127.0.0.1:{port}/ws")
        page.wait_for_function("window.__perf && window.__perf.ended !== null", timeout=180_000)
        page.wait_for_timeout(200)  # (the last frame's card renders)
        perf = page.evaluate("window.__perf")
        done = page.locator("li[data-status=done]").count()
    assert perf["status"] == "completed" and perf["result"] == "ok"
    assert len(perf["versions"]) == 585
    assert done == 585
    # At most once per animation frame (one more: the first, before any frame).
    assert perf["appRenders"] <= perf["frames"] + 1, perf["appRenders"]
    over = {
        key: (renders, perf["versions"].get(key))
        for key, renders in perf["cardRenders"].items()
        if renders > perf["versions"].get(key, 0) + 1
    }
    assert not over, list(over.items())[:5]
    seconds = (perf["ended"] - perf["started"]) / 1000
    figures = {
        "agents": 585,
        "seconds": round(seconds, 1),
        "app renders/s": round(perf["appRenders"] / seconds, 1),
        "frames/s": round(perf["frames"] / seconds, 1),
        "card renders": sum(perf["cardRenders"].values()),
        "longest frame ms": round(perf["longestFrame"], 1),
    }
    print("react-hook figures:", json.dumps(figures))
    if os.environ.get("ORCHESTRATOR_FIGURES"):
        Path(os.environ["ORCHESTRATOR_FIGURES"]).write_text(json.dumps(figures))
    assert errors == []


def test_under_strict_mode_a_run_is_started_once(browser: Browser, tmp_path: Path) -> None:
    """React's StrictMode mounts every component twice (development build): the hook
    still starts one run, and follows it to its end."""
    script = bundle(JS / "test" / "react-perf.tsx", mode="development")
    write_agents(tmp_path, token_delay=0.0)
    port = free_port()
    with app_and_server(tmp_path, script, config(), port) as (url, server):
        page, errors = open_app(
            browser, f"{url}?agent=planner&strict=1&ws=ws://127.0.0.1:{port}/ws"
        )
        page.wait_for_function("window.__perf && window.__perf.ended !== null")
        perf = page.evaluate("window.__perf")
        runs = runs_of(server)
    assert perf["status"] == "completed" and len(perf["versions"]) == 5
    assert len(runs) == 1, runs
    assert [e for e in errors if "Warning" not in e] == []


def runs_of(server: Server) -> list[dict[str, Any]]:
    """The server's runs (the `runs` op)."""
    from websockets.sync.client import connect

    with connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
        ws.send(json.dumps({"op": "runs", "id": 1}))
        while True:
            frame = json.loads(ws.recv())
            if frame.get("op") == "runs":
                found: list[dict[str, Any]] = frame["runs"]
                return found
