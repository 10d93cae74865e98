"""A browser chat app on its own origin calls `/ag-ui` (issue 57, defect 6): Chromium
sends the preflight, then the POST with a token, and reads the stream — for an origin
in `server.allowed_origins`; a page of any other origin is blocked, as before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser

from tests.browser.test_console import config as console_config
from tests.browser.test_console import pytestmark as browser_needed
from tests.browser.test_console import serving, write_agents
from tests.browser.test_react import app_server

pytestmark = browser_needed

CALL = """async ([url, token]) => {
  try {
    const headers = {"Content-Type": "application/json", Authorization: `Bearer ${token}`};
    const body = JSON.stringify({threadId: "page-thread", runId: "page-run", messages: [
      {id: "m1", role: "user", content: "is this safe?"}], tools: [], context: [],
      state: {}, forwardedProps: {}});
    const answer = await fetch(url, {method: "POST", headers, body});
    const text = await answer.text();
    const loaded = await fetch(`${url}?threadId=page-thread`, {headers});
    return {status: answer.status, runId: answer.headers.get("x-orchestrator-run-id"),
            finished: text.includes('"RUN_FINISHED"'), history: await loaded.json()};
  } catch (error) {
    return {error: String(error)};
  }
}"""


def call_from(browser: Browser, page_url: str, url: str) -> dict[str, Any]:
    page = browser.new_page()
    try:
        page.goto(page_url)
        result: dict[str, Any] = page.evaluate(CALL, [url, "page-secret"])
        return result
    finally:
        page.close()


def test_a_page_on_an_allowed_origin_chats_over_ag_ui_and_another_is_blocked(
    browser: Browser, tmp_path: Path
) -> None:
    write_agents(tmp_path, token_delay=0.0)
    with app_server("") as allowed, app_server("") as other:
        origin = allowed.rstrip("/")
        settings = console_config(
            server={
                "ag_ui": True,
                "tokens": [{"name": "page", "token": "page-secret", "role": "user"}],
                "allowed_origins": [origin],
            }
        )
        with serving(tmp_path, settings) as server:
            url = f"{server.url}ag-ui/critic"
            got = call_from(browser, allowed, url)
            assert got.get("status") == 200, got
            assert got["finished"] and got["runId"]
            roles = [m["role"] for m in got["history"]["messages"]]
            assert roles[0] == "user" and roles[-1] == "assistant", json.dumps(got)
            blocked = call_from(browser, other, url)
            assert "error" in blocked and "Failed to fetch" in blocked["error"], blocked
