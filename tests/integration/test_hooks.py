"""`POST /hooks/AGENT` (`server.hooks: true`): another system's event starts a run —
its token (a header, or `?token=` as a GitHub webhook's URL carries it), its
signature when the hook has a secret, its input from the body or the hook's template,
its thread from the hook's; refused clearly otherwise (docs/webhooks.md)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from websockets.trio.client import connect

from orchestrator.config import load_config
from tests.memory_server import autojump, memory_server
from tests.server_helpers import demo_config, read_until_end, request

pytestmark = autojump

TOKENS = [
    {"name": "ci", "token": "ci-secret", "role": "user"},
    {"name": "eve", "token": "eve-secret", "role": "viewer"},
]
ECHO = {
    "description": "echoes",
    "instructions": "echo",
    "script": {"turns": [{"say": "you said {input}"}]},
}
HOOKS = {
    "echo": {
        "input": "Issue #{body.issue.number}: {body.issue.title} by {body.sender.login}",
        "thread": "repo-{body.repository.id}",
        "secret_env": "TEST_HOOK_SECRET",
    }
}
EVENT = {
    "issue": {"number": 7, "title": "It breaks"},
    "sender": {"login": "ann"},
    "repository": {"id": 42},
}


def config_with(tmp_path: Path, hooks: dict[str, Any] | None = None) -> Any:
    demo_config(tmp_path, server={"hooks": True, "tokens": TOKENS}, extra_agents={"echo": ECHO})
    path = tmp_path / "server.yaml"
    data = yaml.safe_load(path.read_text())
    if hooks:
        data["hooks"] = hooks
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def base(server: Any) -> str:
    return f"http://{server.host}:{server.port}"


def signed(body: bytes, secret: str = "s3cret") -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


async def answer_of(server: Any, run_id: str) -> list[dict[str, Any]]:
    auth = {"Authorization": "Bearer ci-secret"}
    async with connect(server.url, additional_headers=auth) as ws:
        ack = await request(ws, op="subscribe", id=1, runId=run_id)
        events, _ = await read_until_end(ws, ack["sub"])
    return events


async def test_a_post_with_an_input_starts_a_run(tmp_path: Path) -> None:
    async with memory_server(config_with(tmp_path)) as server, httpx.AsyncClient() as http:
        posted = await http.post(
            f"{base(server)}/hooks/echo",
            json={"input": "hello"},
            headers={"Authorization": "Bearer ci-secret"},
        )
        assert posted.status_code == 202, posted.text
        run_id = posted.json()["runId"]
        events = await answer_of(server, run_id)
    assert events[0]["data"]["input"] == "hello"
    assert events[-1]["data"]["result"] == "you said hello"


async def test_a_signed_event_fills_the_hooks_templates_and_thread(tmp_path: Path) -> None:
    os.environ["TEST_HOOK_SECRET"] = "s3cret"
    body = json.dumps(EVENT).encode()
    async with (
        memory_server(config_with(tmp_path, HOOKS)) as server,
        httpx.AsyncClient() as http,
    ):
        url = f"{base(server)}/hooks/echo?token=ci-secret"  # (a GitHub webhook sets no header)
        headers = {"X-Hub-Signature-256": signed(body), "Content-Type": "application/json"}
        first = await http.post(url, content=body, headers=headers)
        assert first.status_code == 202, first.text
        await answer_of(server, first.json()["runId"])
        second = await http.post(url, content=body, headers=headers)
        assert second.status_code == 202
        assert second.json()["threadId"] == first.json()["threadId"] == "repo-42"
        events = await answer_of(server, second.json()["runId"])
        forged = await http.post(
            url, content=body, headers={**headers, "X-Hub-Signature-256": signed(body, "x")}
        )
        unsigned = await http.post(url, content=body)
    assert events[0]["data"]["input"] == "Issue #7: It breaks by ann"
    assert events[0]["data"]["previousRunId"] == first.json()["runId"]  # the same thread
    for refused in (forged, unsigned):
        assert refused.status_code == 401
        assert "X-Hub-Signature-256 does not sign the body" in refused.json()["error"]


@pytest.mark.parametrize(
    ("path", "body", "token", "status", "said"),
    [
        ("/hooks/echo", {"input": "x"}, None, 401, "unauthorized"),
        ("/hooks/echo", {"input": "x"}, "eve-secret", 403, "viewer"),
        ("/hooks/nobody", {"input": "x"}, "ci-secret", 404, "nobody"),
        ("/hooks/echo", {"text": "x"}, "ci-secret", 400, 'no "input" string'),
        ("/hooks/echo", "not json", "ci-secret", 400, "not JSON"),
        ("/hooks/echo", "[" * 100_000, "ci-secret", 400, "not JSON"),  # nested too deep
        # not standard JSON (issue 57, defect 11): Python's parser reads these
        ("/hooks/echo", '{"input": "x", "n": NaN}', "ci-secret", 400, "NaN is not a JSON"),
        ("/hooks/echo", '{"input": "x", "n": -Infinity}', "ci-secret", 400, "Infinity"),
        ("/hooks/echo", {"input": "x" * 300_000}, "ci-secret", 413, "max_input_bytes"),
        ("/hooks", {"input": "x"}, "ci-secret", 404, "POST /hooks/AGENT"),
    ],
)
async def test_bad_requests_are_refused_saying_why(
    tmp_path: Path, path: str, body: Any, token: str | None, status: int, said: str
) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    content = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    async with memory_server(config_with(tmp_path)) as server, httpx.AsyncClient() as http:
        answered = await http.post(f"{base(server)}{path}", content=content, headers=headers)
        assert (await http.get(f"{base(server)}/hooks/echo")).status_code == 405
    assert answered.status_code == status, answered.text
    assert said in answered.json()["error"]
