"""Webhooks out (docs/webhooks.md#webhooks-out): a real HTTP receiver on loopback gets
each matching event of a run — signed as Standard Webhooks specifies, verified with
the `standardwebhooks` package — at least once, through its own outages; a delivery
whose attempts all fail is dead, listed and counted, and a person redelivers it; the
outbox survives a restart; a run's own webhooks are checked against the config."""

from __future__ import annotations

import base64
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import yaml
from websockets.trio.client import connect

from orchestrator.config import ServerConfig, load_config
from tests.fakes.webhook_receiver import WebhookReceiver
from tests.helpers import eventually
from tests.server_helpers import demo_config, read_until_end, request, run_to_end, running_server

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
ADMIN = {"Authorization": "Bearer root"}
FAST = {"retry_first_seconds": 0.05, "retry_max_seconds": 0.2, "timeout_seconds": 5}


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)


def config_with(
    tmp_path: Path,
    webhooks: dict[str, Any] | None = None,
    *,
    storage: str = "memory://",
    limits: dict[str, Any] | None = None,
    server: dict[str, Any] | None = None,
    allow_loopback: bool = True,
) -> ServerConfig:
    demo_config(tmp_path, storage=storage)
    path = tmp_path / "server.yaml"
    data = yaml.safe_load(path.read_text())
    data["webhooks"] = webhooks or {}
    data["limits"]["webhooks"] = {**FAST, **(limits or {})}
    data["server"].update(server or {})
    if allow_loopback:
        data["tools"] = {"http_allowed_hosts": ["127.0.0.1"]}
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def hook(url: str, **filters: Any) -> dict[str, Any]:
    return {"url": url, "secret_env": "TEST_WEBHOOK_SECRET", **filters}


async def webhooks_op(server: Any, **op: Any) -> dict[str, Any]:
    async with connect(server.url, additional_headers=ADMIN) as ws:
        return await request(ws, op="webhooks", id="w", **op)


async def dead_letters(server: Any, count: int) -> dict[str, Any]:
    """The `webhooks` reply once `count` deliveries are dead."""
    with trio.fail_after(10):
        while True:
            listed = await webhooks_op(server)
            if len(listed["dead"]) == count:
                return listed
            await trio.sleep(0.05)


async def test_each_matching_event_arrives_once_through_outages_signed(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    receiver = WebhookReceiver(secret=SECRET, answer=lambda n: 500 if n <= 5 else 200)
    await nursery.start(receiver.serve)
    wanted = ["AGENT_RESULT", "RUN_FINISHED"]
    config = config_with(tmp_path, {"ci": hook(receiver.url(), events=wanted)})
    async with running_server(config) as server:
        run_id, events, _ = await run_to_end(server.url, agent="planner", task="q")
        expected = {(e["seq"], e["type"]) for e in events if e["type"] in wanted}
        assert len(expected) >= 5  # (researchers, critics, the run)
        await eventually(
            lambda: {(r.json["seq"], r.json["type"]) for r in receiver.delivered} == expected
        )
        await trio.sleep(0.3)  # (nothing more arrives)
    delivered = receiver.delivered
    assert len(delivered) == len(expected)  # each once after its 2xx
    assert len(receiver.got) == len(expected) + 5  # the 5 refused were sent again
    assert all(r.verified for r in receiver.got)
    by_id = Counter(r.headers["webhook-id"] for r in receiver.got)
    refused = [r.headers["webhook-id"] for r in receiver.got[:5]]
    assert all(by_id[i] >= 2 for i in refused)  # a retry keeps its id
    body = delivered[-1].json
    assert body["runId"] == run_id and body["data"]["runId"] == run_id
    assert body["data"]["seq"] == body["seq"] and body["type"] == body["data"]["type"]
    assert body["timestamp"].endswith("Z")


async def test_filters_by_depth_path_and_agent(tmp_path: Path, nursery: trio.Nursery) -> None:
    receiver = WebhookReceiver(secret=SECRET)
    await nursery.start(receiver.serve)
    config = config_with(
        tmp_path,
        {
            "deep": hook(receiver.url("/deep"), events=["AGENT_STARTED"], min_depth=2),
            "critic": hook(receiver.url("/critic"), agent_ids=["critic"], events=["AGENT_RESULT"]),
        },
    )
    async with running_server(config) as server:
        _, events, _ = await run_to_end(server.url, agent="planner", task="q")
        deep = [
            e
            for e in events
            if e["type"] == "AGENT_STARTED" and (e["source"] or {}).get("depth", 0) >= 2
        ]
        critic = [
            e
            for e in events
            if e["type"] == "AGENT_RESULT" and (e["source"] or {}).get("agentId") == "critic"
        ]
        assert deep and critic
        await eventually(lambda: len(receiver.delivered) == len(deep) + len(critic))
    paths = Counter(r.path for r in receiver.delivered)
    assert paths == {"/deep": len(deep), "/critic": len(critic)}
    assert all(
        r.json["data"]["source"]["depth"] >= 2 for r in receiver.delivered if r.path == "/deep"
    )


async def test_a_dead_delivery_is_listed_counted_and_redelivered(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    up = False
    receiver = WebhookReceiver(secret=SECRET, answer=lambda n: 200 if up else 503)
    await nursery.start(receiver.serve)
    config = config_with(
        tmp_path,
        {"ci": hook(receiver.url(), events=["RUN_FINISHED"])},
        limits={"max_attempts": 3},
        server={"tokens": [{"name": "root", "token": "root", "role": "admin"}]},
    )
    async with running_server(config) as server:
        async with connect(server.url, additional_headers=ADMIN) as ws:
            ack = await request(ws, op="run", id="r", agent="researcher", input="q")
            await read_until_end(ws, ack["sub"])
        listed = await dead_letters(server, 1)
        (letter,) = listed["dead"]
        assert letter["attempts"] == 3 and letter["lastError"] == "HTTP 503"
        assert letter["runId"] == ack["runId"] and letter["type"] == "RUN_FINISHED"
        origin = f"http://127.0.0.1:{receiver.port}"
        assert listed["webhooks"]["ci"]["url"] == letter["url"] == origin + "/…"  # (a path
        assert "secret" not in listed["webhooks"]["ci"]  # may be a secret: never shown)
        async with httpx.AsyncClient() as http:
            metrics = (
                await http.get(f"http://127.0.0.1:{server.port}/metrics", headers=ADMIN)
            ).text
        assert "orchestrator_webhook_dead_letters 1.0" in metrics
        assert "orchestrator_webhook_attempts_failed_total 3.0" in metrics
        assert len(receiver.got) == 3
        up = True
        again = await webhooks_op(server, action="redeliver", deliveryId=letter["id"])
        assert again["redelivered"] == 1 and again["dead"] == []
        await eventually(lambda: len(receiver.delivered) == 1)
        assert receiver.delivered[0].headers["webhook-id"] == letter["id"]
        unknown = await webhooks_op(server, action="redeliver", deliveryId="msg_nope")
        assert unknown["op"] == "error" and unknown["code"] == "not_found"


async def test_the_outbox_survives_a_restart(tmp_path: Path, nursery: trio.Nursery) -> None:
    up = False
    receiver = WebhookReceiver(secret=SECRET, answer=lambda n: 200 if up else 500)
    await nursery.start(receiver.serve)
    config = config_with(
        tmp_path,
        {"ci": hook(receiver.url(), events=["RUN_STARTED", "RUN_FINISHED"])},
        storage="sqlite:///data/o.db",
        limits={"max_attempts": 100, "retry_first_seconds": 0.05, "retry_max_seconds": 0.05},
    )
    async with running_server(config) as server:
        run_id, _, _ = await run_to_end(server.url, agent="researcher", task="q")
        await eventually(lambda: len({r.headers["webhook-id"] for r in receiver.got}) == 2)
    tried = {r.headers["webhook-id"] for r in receiver.got}
    up = True
    async with running_server(config):
        await eventually(lambda: len(receiver.delivered) == 2)
        await trio.sleep(0.3)
    assert {r.headers["webhook-id"] for r in receiver.delivered} == tried
    assert {r.json["runId"] for r in receiver.delivered} == {run_id}
    count = len(receiver.got)
    async with running_server(config):  # delivered: nothing is sent again
        await trio.sleep(0.3)
    assert len(receiver.got) == count


async def test_a_slow_receiver_never_slows_a_run(tmp_path: Path, nursery: trio.Nursery) -> None:
    receiver = WebhookReceiver(secret=SECRET, delay=30.0)
    await nursery.start(receiver.serve)
    config = config_with(tmp_path, {"all": hook(receiver.url())}, limits={"timeout_seconds": 60})
    async with running_server(config) as server:
        _, events, end = await run_to_end(server.url, agent="planner", task="q")
        assert end["status"] == "completed" and len(events) > 20
        assert receiver.delivered == []  # the run ended while every delivery still waited


async def test_a_non_public_address_is_refused_unless_allowed(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    receiver = WebhookReceiver(secret=SECRET)
    await nursery.start(receiver.serve)
    config = config_with(
        tmp_path,
        {"ci": hook(receiver.url(), events=["RUN_FINISHED"])},
        limits={"max_attempts": 1},
        allow_loopback=False,
    )
    async with running_server(config) as server:
        await run_to_end(server.url, agent="researcher", task="q")
        listed = await dead_letters(server, 1)
    why = listed["dead"][0]["lastError"]
    assert "non-public address" in why and "/hook" not in why  # (the URL's path is not shown)
    assert receiver.got == []


async def test_a_runs_own_webhooks_must_go_where_the_config_allows(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    receiver = WebhookReceiver(secret=SECRET)
    await nursery.start(receiver.serve)
    config = config_with(tmp_path, server={"webhook_urls": [receiver.url("/runs")]})
    mine = {"url": receiver.url("/runs/42"), "events": ["RUN_FINISHED"], "secret": SECRET}
    async with running_server(config) as server:
        async with connect(server.url) as ws:
            for bad, why in (
                (
                    {**mine, "url": receiver.url("/other")},
                    "not under one of the server's webhook_urls",
                ),
                ({**mine, "url": "http://169.254.169.254/runs"}, "not under one of"),
                # dot segments would reach another path once resolved (issue 57, 2)
                ({**mine, "url": receiver.url("/runs/../cfg")}, "not under one of"),
                ({**mine, "url": receiver.url("/runs/./../x")}, "not under one of"),
                ({**mine, "url": receiver.url("/runs/%2e%2E/x")}, "not under one of"),
                ({k: v for k, v in mine.items() if k != "secret"}, "give a whsec_ secret"),
                ({**mine, "secret": "plain"}, "starts with 'whsec_'"),
                ({**mine, "events": ["NOPE"]}, "unknown event type 'NOPE'"),
            ):
                refused = await request(
                    ws, op="run", id="x", agent="researcher", input="q", webhooks=[bad]
                )
                assert refused["op"] == "error" and refused["code"] == "bad_request", refused
                assert why in refused["message"], refused["message"]
                assert SECRET not in refused["message"]
        run_id, _, _ = await run_to_end(server.url, agent="researcher", task="q", webhooks=[mine])
        await eventually(lambda: len(receiver.delivered) == 1)
    (got,) = receiver.delivered
    assert got.path == "/runs/42" and got.verified and got.json["runId"] == run_id


async def test_no_client_webhooks_unless_the_config_names_urls(tmp_path: Path) -> None:
    config = config_with(tmp_path)
    mine = {"url": "https://example.com/x", "secret": SECRET}
    async with running_server(config) as server, connect(server.url) as ws:
        refused = await request(
            ws, op="run", id="x", agent="researcher", input="q", webhooks=[mine]
        )
        assert "server.webhook_urls is empty" in refused["message"]


async def test_a_webhooks_secret_is_checked_before_the_server_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.config import ConfigError
    from orchestrator.server.app import serve

    config = config_with(tmp_path, {"ci": hook("https://example.com/x")})
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", "whsec_c2hvcnQ=")
    with pytest.raises(ConfigError, match=r"webhooks\.ci\.secret_env .*24-64 bytes, not 5"):
        await serve(config, port=0)
    monkeypatch.delenv("TEST_WEBHOOK_SECRET")
    with pytest.raises(ConfigError, match="the environment has no TEST_WEBHOOK_SECRET"):
        await serve(config, port=0)


async def test_a_token_sees_the_dead_deliveries_of_the_runs_it_may_see(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    receiver = WebhookReceiver(secret=SECRET, answer=lambda n: 503)
    await nursery.start(receiver.serve)
    tokens = [
        {"name": "root", "token": "root", "role": "admin"},
        {"name": "ann", "token": "ann", "role": "user"},
        {"name": "bob", "token": "bob", "role": "user"},
        {"name": "eve", "token": "eve", "role": "viewer"},
    ]
    config = config_with(
        tmp_path,
        {"ci": hook(receiver.url(), events=["RUN_FINISHED"])},
        limits={"max_attempts": 1},
        server={"tokens": tokens},
    )
    async with running_server(config) as server:
        async with connect(server.url, additional_headers={"Authorization": "Bearer ann"}) as ws:
            ack = await request(ws, op="run", id="r", agent="researcher", input="q")
            await read_until_end(ws, ack["sub"])
        await dead_letters(server, 1)
        seen = {}
        for name in ("ann", "bob", "eve"):
            auth = {"Authorization": f"Bearer {name}"}
            async with connect(server.url, additional_headers=auth) as ws:
                seen[name] = await request(ws, op="webhooks", id="w")
            async with connect(server.url, additional_headers=auth) as ws:
                refused = await request(ws, op="webhooks", id="w", action="redeliver")
            assert refused["code"] == "unauthorized"
    assert [d["runId"] for d in seen["ann"]["dead"]] == [ack["runId"]]
    assert seen["bob"]["dead"] == [] and seen["bob"]["waiting"] == 0
    assert len(seen["eve"]["dead"]) == 1
