"""Where to look, in a real browser (issue 37): a stall appears on an agent after
`limits.stall_seconds` and clears when it streams again; the activity line of an
agent in a tool and of a collapsed subtree."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.browser.test_console import (
    APPROVING,
    config,
    node,
    open_page,
    pytestmark,  # noqa: F401 (the same skip: Chromium and Playwright)
    select_a_streaming_researcher,
    serving,
    shot,
    start_admin_run,
    start_run,
    write_agents,
)
from tests.integration.test_approvals_server import agent as scripted
from tests.integration.test_approvals_server import spawn

if TYPE_CHECKING:
    from playwright.sync_api import Browser


def agent(turns: list[dict[str, Any]], tools: list[str], **extra: Any) -> dict[str, Any]:
    return scripted(turns, tools, token_delay=0.05, **extra)


AGENTS = {
    "chief": agent(
        [{"calls": [spawn("dozer"), spawn("walker")]}, {"say": "boss got: {results}"}],
        ["agent_spawn"],
    ),
    # Silent for 4 s before its second turn (the model "hangs"), then streams.
    "dozer": agent(
        [
            {"say": "let me read", "calls": [{"name": "read_file", "args": {"path": "x"}}]},
            {"sleep": 4, "say": "awake again and done"},
        ],
        ["read_file"],
    ),
    # Streams steadily while its sibling is silent.
    "walker": agent([{"say": "one two three four five six seven eight nine ten " * 6}], []),
}


def test_a_stall_shows_after_stall_seconds_and_clears_when_the_agent_streams(
    browser: Browser, tmp_path: Path
) -> None:
    write_agents(tmp_path, token_delay=0.05, extra=AGENTS)
    with serving(tmp_path, config(limits={"stall_seconds": 1.5})) as server:
        page, errors = open_page(browser, server.url)
        start_run(page, "chief", "go")
        dozer = node(page, "dozer").first
        dozer.locator(".badge.stalled").wait_for(timeout=45_000)
        assert "stalled" in dozer.locator(".activity").inner_text()
        assert page.evaluate("window.__console.state.run.stalled") == 1
        boss = node(page, "chief").first
        assert "waiting for children" in boss.locator(".activity").inner_text()
        stalled = page.locator("#inbox .inbox-item.stalled")  # and in the inbox
        stalled.wait_for(timeout=30_000)
        assert "dozer" in stalled.inner_text() and "stalled" in stalled.inner_text()
        shot(page, "console-stalled.png")
        # It streams again: the mark goes, without a reload.
        page.wait_for_function(
            "document.querySelectorAll('.node .badge.stalled').length === 0", timeout=45_000
        )
        page.wait_for_selector("#run-status.completed", timeout=30_000)
        assert page.evaluate("window.__console.state.run.stalled") == 0
        stalled.wait_for(state="detached", timeout=30_000)  # resolved: it left the inbox
        assert errors == []


def test_the_activity_line_of_an_agent_in_a_tool_and_of_a_collapsed_subtree(
    browser: Browser, tmp_path: Path
) -> None:
    """A call to a slow tool reads `in tool http_get for N s` (the seconds move without
    events); one waiting for a person reads so; collapsed, the parent sums them up."""
    import http.server
    import threading

    done = threading.Event()

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            done.wait(6)
            try:
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
            except OSError:  # the server (the client of this) is gone
                pass

        def log_message(self, *args: Any) -> None:
            pass

    slow = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    slow.daemon_threads = False  # (server_close joins the handlers: no socket left open)
    threading.Thread(target=slow.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{slow.server_address[1]}/slow"
    agents = {
        "head": agent(
            [{"calls": [spawn("asker"), spawn("fetcher")]}, {"say": "done: {results}"}],
            ["agent_spawn"],
        ),
        "asker": agent(
            [
                {"calls": [{"name": "write_file", "args": {"path": "a.txt", "content": "A"}}]},
                {"say": "written"},
            ],
            ["write_file"],
            approval=["write_file"],
        ),
        "fetcher": agent(
            [{"calls": [{"name": "http_get", "args": {"url": url}}]}, {"say": "fetched"}],
            ["http_get"],
        ),
    }
    write_agents(tmp_path, token_delay=0.05, extra=agents)
    settings = {**config(), "tools": {"http_allow_private": True, "http_timeout": 30}}
    try:
        with serving(tmp_path, settings) as server:
            page, errors = open_page(browser, server.url)
            start_run(page, "head", "go")
            asker = node(page, "asker").first
            asker.locator(".badge.waiting").wait_for(timeout=45_000)
            assert "waiting for approval: write_file" in asker.locator(".activity").inner_text()
            fetcher = node(page, "fetcher").first.locator(".activity")
            page.wait_for_function(
                "[...document.querySelectorAll('.node .activity')].some("
                "(a) => /^in tool http_get for [2-9] s$/.test(a.textContent))",
                timeout=45_000,
            )
            assert fetcher.inner_text().startswith("in tool http_get for ")
            # Collapsed, the head's line sums up its subtree.
            head = node(page, "head").first
            head.locator(".toggle").click()
            page.wait_for_function(
                "[...document.querySelectorAll('.node .activity')].some("
                "(a) => a.textContent.includes('below: 1 running, 1 waiting'))",
                timeout=30_000,
            )
            text = head.locator(".activity").inner_text()
            assert text.startswith("waiting for children 0/2"), text
            assert errors == []
    finally:
        done.set()
        slow.shutdown()
        slow.server_close()


MARKDOWN = """# Findings

Here is **what** I found, with `inline code`:

- first point
- second point

| tool | calls |
|------|------:|
| read_file | 3 |
| <b onmouseover="window.__xss=1">bold</b> | `<img src=x onerror="window.__xss=2">` |

```python
def answer():
    return 42
```

See [the docs](https://example.org/docs) and <https://example.org/a"onmouseover="window.__xss=3>.

<script>window.__xss = 4</script>
<img src="x" onerror="window.__xss=5">
[click](javascript:window.__xss=6) and [data](data:text/html,<script>window.__xss=7</script>)
![pixel](https://example.org/pixel.png)
<a href="javascript:window.__xss=8">raw link</a> <iframe src="javascript:window.__xss=9"></iframe>
"""


def test_answers_are_rendered_as_sanitized_markdown(browser: Browser, tmp_path: Path) -> None:
    """A code block, a table and a list render as such; none of the XSS vectors runs
    or loads anything, with the page's own Content-Security-Policy on; the raw-text
    toggle shows the answer as written."""
    writer = {"writer": agent([{"think": "**Plan**: write it", "say": MARKDOWN}], [])}
    write_agents(tmp_path, token_delay=0.0, extra=writer)
    with serving(tmp_path, config()) as server:
        page, errors = open_page(browser, server.url, csp=True)
        dialogs: list[str] = []

        def dialog(d: Any) -> None:
            dialogs.append(d.message)
            d.dismiss()

        page.on("dialog", dialog)
        loads: list[str] = []
        page.on("request", lambda r: loads.append(r.url))
        start_run(page, "writer", "write")
        page.wait_for_selector("#run-status.completed", timeout=30_000)
        node(page, "writer").first.click()
        answer = page.locator("#detail .answer.markdown")
        answer.wait_for()
        assert answer.locator("h1").inner_text() == "Findings"
        assert answer.locator("ul > li").count() == 2
        assert answer.locator("table tr").count() == 3
        assert "def answer():" in answer.locator("pre code").inner_text()
        assert answer.locator("pre .code-copy").count() == 1
        assert page.locator("#detail .thinking.markdown strong").inner_text() == "Plan"
        # Links: only http(s), opened apart from the page.
        links = answer.locator("a")
        hrefs = [links.nth(i).get_attribute("href") for i in range(links.count())]
        assert hrefs and all(h is None or h.startswith("https://example.org/") for h in hrefs)
        for i in range(links.count()):
            if links.nth(i).get_attribute("href"):
                assert links.nth(i).get_attribute("rel") == "noopener noreferrer"
                assert links.nth(i).get_attribute("target") == "_blank"
        # Nothing ran, nothing was added that could run or load.
        for i in range(links.count()):
            links.nth(i).hover()
        answer.locator("td").first.hover()
        dangerous = "script, img, iframe, object, embed, [onerror], [onmouseover], [style]"
        assert answer.locator(dangerous).count() == 0
        assert page.evaluate("window.__xss") is None and dialogs == []
        assert "<script>window.__xss = 4</script>" in answer.inner_text()  # shown as text
        assert not [u for u in loads if "example.org" in u]  # the image did not load
        shot(page, "console-markdown.png")
        # The raw text, as written.
        page.locator("#detail .raw-toggle input").check()
        assert page.locator("#detail .answer.markdown").count() == 0
        assert "| tool | calls |" in page.locator("#detail .answer").inner_text()
        assert errors == []


TOKENS = [
    {"name": "ops", "token": "ops-secret", "role": "admin"},
    {"name": "eve", "token": "eve-secret", "role": "viewer"},
]


def login(browser: Browser, url: str, token: str) -> Any:
    page = browser.new_page(bypass_csp=True)
    page.goto(url)
    page.fill("#token-input", token)
    page.click("#token-go")
    page.wait_for_selector("#conn.open", timeout=30_000)
    return page


def test_the_inbox_lists_two_waiting_runs_and_answers_from_there(
    browser: Browser, tmp_path: Path
) -> None:
    """Two runs each wait on a call three levels down: both show in the inbox (and its
    count in the title and header), one is approved with its button, the other with
    the keyboard (`d` on the focused entry); a click opens the agent in its tree; a
    viewer sees the same inbox without buttons."""
    write_agents(tmp_path, token_delay=0.01, extra=APPROVING)
    with serving(tmp_path, config(server={"tokens": TOKENS})) as srv:
        page = login(browser, srv.url, "ops-secret")
        viewer = login(browser, srv.url, "eve-secret")
        first = start_admin_run(srv, "ops-secret", "boss")
        second = start_admin_run(srv, "ops-secret", "boss")
        items = page.locator("#inbox .inbox-item.approval")
        page.wait_for_function(
            "document.querySelectorAll('#inbox .inbox-item.approval').length === 2",
            timeout=60_000,
        )
        assert page.title().startswith("(2) ")
        assert page.locator("#inbox-badge").inner_text() == "2 need you"
        assert "write_file waits for approval" in items.first.inner_text()
        shot(page, "console-inbox.png")
        # The viewer's inbox: the same entries, no buttons.
        viewer.wait_for_function(
            "document.querySelectorAll('#inbox .inbox-item.approval').length === 2",
            timeout=60_000,
        )
        assert viewer.locator("#inbox button", has_text="Approve").count() == 0
        # A click opens the waiting agent in its run's tree.
        items.first.locator(".what").click()
        page.wait_for_function(
            "window.__console.state.selected && window.__console.state.selected !== 'root'"
        )
        selected = page.evaluate(
            "window.__console.state.run.nodes.get(window.__console.state.selected).name"
        )
        assert selected == "fixer"
        # Approve one with its button; deny the other with the keyboard.
        items.first.locator("button", has_text="Approve").click()
        page.wait_for_function(
            "document.querySelectorAll('#inbox .inbox-item.approval').length === 1",
            timeout=60_000,
        )
        items.first.focus()
        page.keyboard.press("d")
        page.wait_for_function(
            "document.querySelectorAll('#inbox .inbox-item.approval').length === 0",
            timeout=60_000,
        )
        assert not page.title().startswith("(")
        assert page.locator("#inbox-badge").is_hidden()
        decisions = {}
        for run_id in (first, second):
            page.goto(f"{srv.url}?run={run_id}")
            page.wait_for_selector("#run-status.completed", timeout=60_000)
            decisions[run_id] = page.evaluate(
                "[...window.__console.state.run.nodes.values()]"
                ".flatMap((a) => [...a.approvals.values()]).map((a) => a.decision)"
            )
        assert sorted(d for ds in decisions.values() for d in ds) == ["approve", "deny"]


def test_a_waiting_call_is_approved_with_the_keyboard_in_the_tree(
    browser: Browser, tmp_path: Path
) -> None:
    write_agents(tmp_path, token_delay=0.01, extra=APPROVING)
    with serving(tmp_path, config()) as srv:
        page, errors = open_page(browser, srv.url)
        start_run(page, "boss", "go")
        page.wait_for_selector(".node .badge.waiting", timeout=60_000)
        node(page, "boss").first.click()
        page.keyboard.press("ArrowDown")  # lead
        page.keyboard.press("ArrowDown")  # fixer
        focused = page.evaluate("document.activeElement.closest('.node').dataset.key")
        assert page.evaluate(f"window.__console.state.run.nodes.get('{focused}').name") == "fixer"
        page.keyboard.press("a")
        page.wait_for_selector("#run-status.completed", timeout=60_000)
        decisions = page.evaluate(
            "[...window.__console.state.run.nodes.values()]"
            ".flatMap((a) => [...a.approvals.values()]).map((a) => a.decision)"
        )
        assert decisions == ["approve"]
        assert errors == []


def test_the_inbox_lists_a_failed_subtree_while_its_run_goes_on_and_a_failed_run(
    browser: Browser, tmp_path: Path
) -> None:
    agents = {
        "keeper": agent(
            [{"calls": [spawn("bomb"), spawn("walker")]}, {"say": "kept going: {results}"}],
            ["agent_spawn"],
        ),
        "bomb": agent([{"fail": "the model is down"}], []),
        "crasher": agent([{"fail": "the root's model is down"}], []),
        **AGENTS,
    }
    write_agents(tmp_path, token_delay=0.05, extra=agents)
    with serving(tmp_path, config()) as server:
        page, errors = open_page(browser, server.url)
        start_run(page, "keeper", "go")
        failed = page.locator("#inbox .inbox-item.failed")
        failed.wait_for(timeout=45_000)
        assert page.locator("#run-status.running").count() == 1  # the run goes on
        assert "bomb" in failed.inner_text() and "provider_error" in failed.inner_text()
        page.wait_for_selector("#run-status.completed", timeout=30_000)
        failed.wait_for(state="detached", timeout=30_000)  # its run ended well
        start_run(page, "crasher", "go")
        ended = page.locator("#inbox .inbox-item.run-failed")
        ended.wait_for(timeout=45_000)
        assert "crasher" in ended.inner_text()
        ended.locator(".dismiss").click()
        ended.wait_for(state="detached", timeout=5_000)
        page.reload()  # dismissed for good in this browser
        page.wait_for_selector("#conn.open", timeout=30_000)
        page.wait_for_timeout(3500)  # a refresh of the runs
        assert page.locator("#inbox .inbox-item.run-failed").count() == 0
        assert errors == []


def test_a_press_in_the_detail_pane_is_not_lost_to_a_redraw(
    browser: Browser, tmp_path: Path
) -> None:
    """The pane is redrawn as its agent streams, and when a field loses focus. A press
    that began on *Stop* right after typing a reason must stop the agent, however long
    the button is held: a redraw in between used to replace the button (the click was
    lost; the stop test failed now and then)."""
    write_agents(tmp_path, token_delay=0.1)
    with serving(tmp_path, config()) as server:
        page, errors = open_page(browser, server.url)
        key = select_a_streaming_researcher(page)
        page.fill("#stop-box input", "enough")
        box = page.locator("#stop-box button").bounding_box()
        assert box is not None
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.down()
        page.wait_for_timeout(600)  # the agent streams meanwhile; the field lost focus
        page.mouse.up()
        page.wait_for_function(
            f"window.__console.state.run.nodes.get({key!r}).status === 'cancelled'",
            timeout=60_000,
        )
        assert errors == []


HOSTILE = {
    "quotes": ">" * 3000,
    "bullets": "- " * 1200,
    "stars": "*a" * 80_000,
}


def test_hostile_markdown_is_shown_as_written_and_the_tree_stays(
    browser: Browser, tmp_path: Path
) -> None:
    """3 KB of nested `>`, `- ` 1,200 times and `*a` 80,000 times made the renderer
    throw (RangeError) or take seconds, and the run's row and detail went blank: past
    the renderer's bounds an answer is shown as written, saying why."""
    writers = {name: agent([{"say": text}], []) for name, text in HOSTILE.items()}
    for spec in writers.values():
        spec["script"]["token_delay"] = 0.0  # (its default paces 1,200 words over a minute)
    write_agents(tmp_path, token_delay=0.0, extra=writers)
    with serving(tmp_path, config()) as server:
        page, errors = open_page(browser, server.url, csp=True)
        for name, text in HOSTILE.items():
            start_run(page, name, "write")
            page.wait_for_selector("#run-status.completed", timeout=30_000)
            node(page, name).first.click()
            answer = page.locator("#detail .answer.markdown")
            answer.wait_for()
            assert "shown as written" in answer.locator(".as-written").inner_text()
            assert answer.locator(".plain").inner_text() == text
            assert node(page, name).count() == 1  # the tree row is there
        took = page.evaluate("window.__console.timings.render")
        assert errors == [], errors
        assert took is not None
