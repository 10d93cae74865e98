"""A2A push notifications (docs/remote.md#push-notifications), driven by the `a2a-sdk`'s
own client: a push config registered for a task (or given with the message that starts
it) gets the task's status updates and, once it ends, the whole task, posted to a real
receiver with the config's token and authentication; configs are read, listed and
deleted; a URL outside `server.webhook_urls` is refused; the card says push is on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import yaml

from tests.fakes.webhook_receiver import WebhookReceiver
from tests.helpers import eventually
from tests.server_helpers import demo_config, running_server

pytest.importorskip("a2a", reason="the A2A tests need the `a2a` extra (pip install -e '.[dev]')")

from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format

from orchestrator.config import ServerConfig, load_config
from tests.integration.test_a2a_serve import a2a_client, collect, http_url, message

TOKENS = [
    {"name": "ann", "token": "ann-secret", "role": "user"},
    {"name": "bob", "token": "bob-secret", "role": "user"},
    {"name": "eve", "token": "eve-secret", "role": "viewer"},
    {"name": "root", "token": "root-secret", "role": "admin"},
]


def config_with(
    tmp_path: Path, receiver: WebhookReceiver, *, webhook: bool = False
) -> ServerConfig:
    demo_config(tmp_path, token_delay=0.02)
    path = tmp_path / "server.yaml"
    data = yaml.safe_load(path.read_text())
    if webhook:  # (it matches the run's first events, maybe before a push config is kept)
        hook = {"url": receiver.url("/all"), "secret_env": "A2A_TEST_WEBHOOK_SECRET"}
        data["webhooks"] = {"all": hook}
    data["server"].update({"a2a": True, "tokens": TOKENS, "webhook_urls": [receiver.url("/a2a")]})
    data["tools"] = {"http_allowed_hosts": ["127.0.0.1"]}
    data["limits"]["webhooks"] = {"retry_first_seconds": 0.05, "retry_max_seconds": 0.2}
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def pushed(receiver: WebhookReceiver, path: str) -> list[pb.StreamResponse]:
    out = []
    for got in receiver.delivered:
        if got.path == path:
            response = pb.StreamResponse()
            json_format.Parse(got.body, response)
            out.append(response)
    return out


async def begun(client: Any) -> str:
    """A task started by `client` (answered at once): its id."""
    request = pb.SendMessageRequest()
    request.CopyFrom(message("compare trio"))
    request.configuration.return_immediately = True
    (started,) = await collect(client, request)
    return str(started.task.id)


def push_config(task_id: str, url: str, config_id: str = "") -> pb.TaskPushNotificationConfig:
    config = pb.TaskPushNotificationConfig(task_id=task_id, id=config_id, url=url, token="tok-1")
    config.authentication.scheme = "Bearer"
    config.authentication.credentials = "receiver-cred"
    return config


async def test_a_registered_push_config_gets_the_tasks_updates_and_its_end(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    receiver = WebhookReceiver(answer=lambda n: 503 if n == 1 else 200)  # (one outage)
    await nursery.start(receiver.serve)
    async with running_server(config_with(tmp_path, receiver)) as server:
        base = http_url(server.url)
        async with httpx.AsyncClient() as http:
            card = (await http.get(f"{base}/a2a/planner/.well-known/agent-card.json")).json()
        assert card["capabilities"]["pushNotifications"] is True
        async with a2a_client(base, "planner", "ann-secret", streaming=False) as client:
            request = pb.SendMessageRequest()
            request.CopyFrom(message("compare trio"))
            request.configuration.return_immediately = True
            (started,) = await collect(client, request)
            task_id = started.task.id
            made = await client.create_task_push_notification_config(
                push_config(task_id, receiver.url("/a2a/mine"), "cfg-1")
            )
            assert made.id == "cfg-1" and made.task_id == task_id
            got = await client.get_task_push_notification_config(
                pb.GetTaskPushNotificationConfigRequest(task_id=task_id, id="cfg-1")
            )
            assert got.url == receiver.url("/a2a/mine")
            assert got.token == "" and got.authentication.credentials == ""  # (never shown)
            assert got.authentication.scheme == "Bearer"
            assert made.token == "" and made.authentication.credentials == ""
            listed = await client.list_task_push_notification_configs(
                pb.ListTaskPushNotificationConfigsRequest(task_id=task_id)
            )
            assert [c.id for c in listed.configs] == ["cfg-1"]
            with pytest.raises(Exception, match="not under one of this server's webhook_urls"):
                await client.create_task_push_notification_config(
                    push_config(task_id, "http://127.0.0.1:1/elsewhere", "cfg-2")
                )

            def ended() -> bool:
                updates = pushed(receiver, "/a2a/mine")
                return bool(updates) and updates[-1].WhichOneof("payload") == "task"

            await eventually(ended, within=30)
            final = await client.get_task(pb.GetTaskRequest(id=task_id))
            await client.delete_task_push_notification_config(
                pb.DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="cfg-1")
            )
            listed = await client.list_task_push_notification_configs(
                pb.ListTaskPushNotificationConfigsRequest(task_id=task_id)
            )
            assert list(listed.configs) == []
    updates = pushed(receiver, "/a2a/mine")
    kinds = [u.WhichOneof("payload") for u in updates]
    assert kinds[-1] == "task" and set(kinds[:-1]) <= {"status_update"} and len(kinds) > 1
    last = updates[-1].task
    assert last.id == task_id and last.status.state == pb.TaskState.TASK_STATE_COMPLETED
    assert last.artifacts[0].parts[0].text == final.artifacts[0].parts[0].text != ""
    mine = [g for g in receiver.got if g.path == "/a2a/mine"]
    assert all(g.headers["x-a2a-notification-token"] == "tok-1" for g in mine)
    assert all(g.headers["authorization"] == "Bearer receiver-cred" for g in mine)
    assert len({g.headers["webhook-id"] for g in mine}) == len(updates)  # (one retried)


@pytest.mark.parametrize("webhook", [False, True], ids=["alone", "beside-a-webhook"])
async def test_a_push_config_given_with_the_message_sees_the_task_from_its_start(
    tmp_path: Path, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, webhook: bool
) -> None:
    monkeypatch.setenv("A2A_TEST_WEBHOOK_SECRET", "whsec_" + "QUJD" * 8)
    receiver = WebhookReceiver()
    await nursery.start(receiver.serve)
    async with running_server(config_with(tmp_path, receiver, webhook=webhook)) as server:
        base = http_url(server.url)
        async with a2a_client(base, "researcher", "ann-secret", streaming=False) as client:
            request = pb.SendMessageRequest()
            request.CopyFrom(message("quick"))
            request.configuration.return_immediately = True
            request.configuration.task_push_notification_config.CopyFrom(
                push_config("", receiver.url("/a2a/from-start"))
            )
            (started,) = await collect(client, request)

            def ended() -> bool:
                updates = pushed(receiver, "/a2a/from-start")
                return bool(updates) and updates[-1].WhichOneof("payload") == "task"

            await eventually(ended, within=30)
    updates = pushed(receiver, "/a2a/from-start")
    first = updates[0].status_update
    assert first.task_id == started.task.id
    assert first.status.state == pb.TaskState.TASK_STATE_WORKING
    assert first.status.message.parts[0].text == "started"  # (RUN_STARTED: the first)
    assert updates[-1].task.status.state == pb.TaskState.TASK_STATE_COMPLETED


async def test_no_push_without_webhook_urls(tmp_path: Path) -> None:
    config = demo_config(tmp_path, server={"a2a": True})
    async with running_server(config) as server:
        base = http_url(server.url)
        async with httpx.AsyncClient() as http:
            card = (await http.get(f"{base}/a2a/planner/.well-known/agent-card.json")).json()
        assert card["capabilities"].get("pushNotifications") in (None, False)
        async with a2a_client(base, "researcher", streaming=False) as client:
            request = pb.SendMessageRequest()
            request.CopyFrom(message("quick"))
            request.configuration.return_immediately = True
            (started,) = await collect(client, request)
            with pytest.raises(Exception, match=r"server\.webhook_urls"):
                await client.create_task_push_notification_config(
                    push_config(started.task.id, "https://example.com/x")
                )


async def test_only_the_owner_or_an_admin_changes_a_tasks_push_configs_and_none_reads_secrets(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """Issue 57, defect 1: a viewer reads, a user sees none of another's task, and no
    one (the owner and an admin included) gets a config's token or credentials back."""
    receiver = WebhookReceiver()
    await nursery.start(receiver.serve)
    async with running_server(config_with(tmp_path, receiver)) as server:
        base = http_url(server.url)
        async with a2a_client(base, "planner", "ann-secret", streaming=False) as ann:
            task_id = await begun(ann)
            cfg = push_config(task_id, receiver.url("/a2a/ann"), "ann-cfg")
            cfg.token, cfg.authentication.credentials = "ANN-TOKEN", "ANN-CRED"
            made = await ann.create_task_push_notification_config(cfg)
            assert "ANN" not in json_format.MessageToJson(made)
        get = pb.GetTaskPushNotificationConfigRequest(task_id=task_id, id="ann-cfg")
        listing = pb.ListTaskPushNotificationConfigsRequest(task_id=task_id)
        delete = pb.DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="ann-cfg")
        async with a2a_client(base, "planner", "eve-secret", streaming=False) as eve:
            seen = await eve.get_task_push_notification_config(get)
            listed = await eve.list_task_push_notification_configs(listing)
            for shown in (seen, *listed.configs):
                assert "ANN-" not in json_format.MessageToJson(shown)
                assert shown.url == receiver.url("/a2a/ann")
            with pytest.raises(Exception, match="viewer token may not"):
                await eve.create_task_push_notification_config(
                    push_config(task_id, receiver.url("/a2a/eve"), "eve-cfg")
                )
            with pytest.raises(Exception, match="viewer token may not"):
                await eve.delete_task_push_notification_config(delete)
        async with a2a_client(base, "planner", "bob-secret", streaming=False) as bob:
            with pytest.raises(Exception, match=f"no task {task_id}"):
                await bob.create_task_push_notification_config(
                    push_config(task_id, receiver.url("/a2a/bob"), "bob-cfg")
                )
            for call, params in (
                (bob.get_task_push_notification_config, get),
                (bob.list_task_push_notification_configs, listing),
                (bob.delete_task_push_notification_config, delete),
            ):
                with pytest.raises(Exception, match=f"no task {task_id}"):
                    await call(params)
        async with a2a_client(base, "planner", "root-secret", streaming=False) as admin:
            listed = await admin.list_task_push_notification_configs(listing)
            assert [c.id for c in listed.configs] == ["ann-cfg"]
            assert "ANN-" not in json_format.MessageToJson(listed)
            await admin.delete_task_push_notification_config(delete)
            assert list((await admin.list_task_push_notification_configs(listing)).configs) == []
    assert not any(g.path in ("/a2a/eve", "/a2a/bob") for g in receiver.got)


async def test_a_push_url_with_dot_segments_is_refused(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """Issue 57, defect 2: `/a2a/../cfg` is not under `/a2a` once an HTTP client
    resolves it."""
    receiver = WebhookReceiver()
    await nursery.start(receiver.serve)
    async with running_server(config_with(tmp_path, receiver)) as server:
        base = http_url(server.url)
        async with a2a_client(base, "planner", "ann-secret", streaming=False) as ann:
            task_id = await begun(ann)
            for path in ("/a2a/../cfg", "/a2a/./../x", "/a2a/%2e%2e/cfg"):
                with pytest.raises(Exception, match="not under one of this server's"):
                    await ann.create_task_push_notification_config(
                        push_config(task_id, receiver.url(path), "c")
                    )
