"""Secrets never in a message (issue 32): a unique secret planted in every
secret-bearing field of a config is in no error the config's paths can produce —
top-level and field validation errors, start-up failures on the command line — nor
in the line a server prints when it starts.

Before: any top-level config error echoed the whole config in `(got {…})`, tokens
included, and storage URLs were printed with their password.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agents import redact
from orchestrator.cli.main import main
from orchestrator.client import Client, ClientError
from orchestrator.config import ConfigError, load_config

SECRET = f"s3cret-{uuid.uuid4().hex}"


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    (tmp_path / "subagents").mkdir(exist_ok=True)
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump({"models": {"default": {"provider": "scripted"}}, **data}))
    return path


def secret_everywhere() -> dict[str, Any]:
    """A valid config with the secret in every field that may hold one."""
    return {
        "server": {
            "tokens": [{"name": "ann", "token": SECRET, "role": "admin"}, SECRET + "-2"],
            "metrics_token": SECRET + "-m",
        },
        "telemetry": {
            "otlp_endpoint": "http://127.0.0.1:4318",
            "headers": {"Authorization": f"Bearer {SECRET}", "x-api-key": SECRET},
        },
        "mcp_servers": {
            "notes": {
                "url": "http://127.0.0.1:9/mcp",
                "headers": {"Authorization": f"Bearer {SECRET}"},
            }
        },
    }


BROKEN: list[tuple[str, dict[str, Any], str]] = [
    # (what, change to the config, what the message must still name)
    ("a top-level rule", {"cluster": {}, "storage": "sqlite:///j.db"}, "cluster"),
    ("duplicate token names", {"server.tokens": [{"name": "a", "token": SECRET}] * 2}, "tokens"),
    ("a token with spaces", {"server.tokens": [{"name": "a", "token": f" {SECRET} "}]}, "token"),
    ("a too long metrics token", {"server.metrics_token": SECRET * 20}, "metrics_token"),
    ("a bad header value", {"telemetry.headers": {"Authorization": [SECRET]}}, "headers"),
    ("a wrong type beside secrets", {"server.port": "eighty"}, "server.port"),
    ("an unknown key beside secrets", {"server.bogus": SECRET}, "bogus"),
    ("a URL with a password", {"mcp_servers": {"x": {"url": f"ftp://u:{SECRET}@h/"}}}, "url"),
]


def changed(data: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    out = yaml.safe_load(yaml.safe_dump(data))
    for dotted, value in change.items():
        *path, last = dotted.split(".")
        node = out
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return dict(out)


@pytest.mark.parametrize(("what", "change", "named"), BROKEN, ids=[b[0] for b in BROKEN])
def test_no_config_error_quotes_a_secret(
    tmp_path: Path, what: str, change: dict[str, Any], named: str
) -> None:
    path = write(tmp_path, changed(secret_everywhere(), change))
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    message = str(refused.value)
    assert SECRET not in message, message
    assert named in message


def test_no_start_up_failure_prints_a_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On the command line: a config error, and a Redis URL with a password that
    cannot be reached (the message names the server, not the password)."""
    path = write(tmp_path, changed(secret_everywhere(), {"cluster": {}}))
    assert main(["serve", "--config", str(path)]) == 2
    path = write(
        tmp_path,
        {**secret_everywhere(), "storage": f"redis://user:{SECRET}@127.0.0.1:1/0?prefix=x:"},
    )
    assert main(["serve", "--config", str(path), "--port", "0"]) == 2
    out = capsys.readouterr()
    assert SECRET not in out.out + out.err, out.err
    assert "redis storage redis://user:…(redacted)@127.0.0.1:1/0: cannot connect" in out.err


def test_urls_lose_their_passwords_and_secret_query_values() -> None:
    assert redact.url("redis://:pw@127.0.0.1:6379/0") == "redis://:…(redacted)@127.0.0.1:6379/0"
    assert redact.url("redis://u:pw@[::1]:7/1") == "redis://u:…(redacted)@[::1]:7/1"
    assert redact.url("ws://h/ws?token=abc&x=1") == "ws://h/ws?token=…(redacted)&x=1"
    assert redact.url("sqlite:///data/j.db") == "sqlite:///data/j.db"
    assert redact.quoted(["server", "port"], "x" * 200).endswith("…)")
    assert redact.quoted(["server", "tokens", 0, "token"], "abc") == " (got …(redacted))"
    assert redact.quoted([], {"a": 1}) == ""


async def test_a_provider_that_echoes_the_key_does_not_put_it_in_an_error() -> None:
    """Some providers quote the key they refused; the AGENT_ERROR and the log quote
    the error body: the key is blanked there, and a base URL's password too."""
    import httpx

    from agents.errors import ProviderError
    from agents.providers.http import post_sse

    class Body(httpx.AsyncByteStream):
        def __init__(self, data: bytes) -> None:
            self.data = data

        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield self.data

    def echo(request: httpx.Request) -> httpx.Response:
        said = request.headers.get("authorization", "")
        body = json.dumps({"error": {"message": f"Incorrect API key: {said}"}}).encode()
        return httpx.Response(401, stream=Body(body))

    headers = {"Authorization": f"Bearer {SECRET}", "x-api-key": f"{SECRET}-x"}
    for url in [
        "https://api.example/v1/chat/completions",  # (Bearer)
        f"https://user:{SECRET}-pw@api.example/v1/chat/completions",  # (httpx: Basic)
    ]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(echo)) as client:
            with pytest.raises(ProviderError) as failed:
                async for _ in post_sse(client, url, {}, headers, httpx.Timeout(5), provider="p"):
                    pass
        message = str(failed.value)
        assert SECRET not in message and "dXNlcj" not in message, message
        assert "HTTP 401" in message and "Incorrect API key: …(redacted)" in message


@pytest.mark.parametrize("command", ["watch", "pending", "cancel"])
def test_a_token_no_header_can_carry_is_named_not_sent_nor_echoed(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: the docs' client example with `token="…"` failed with `unreachable:
    … invalid Authorization header: Bearer …` — a wrong diagnosis, and the token in it."""
    token = f"{SECRET}…"  # a copied placeholder: not visible ASCII
    with pytest.raises(ClientError) as info:
        Client("ws://127.0.0.1:9/ws", token=token)
    assert info.value.code == "bad_token" and "placeholder" in info.value.message
    assert SECRET not in str(info.value)
    args = {"watch": ["run-x", "--give-up-after", "1"], "pending": [], "cancel": ["run-x"]}
    code = main([command, *args[command], "--url", "ws://127.0.0.1:9/ws", "--token", token])
    err = capsys.readouterr().err
    assert code == 2 and SECRET not in err
    assert err.startswith("error: the token (") and err.count("\n") == 1, err
