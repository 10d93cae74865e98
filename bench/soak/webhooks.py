"""1,000 webhook deliveries to a receiver that fails one request in three, across a
server restart half way: is anything lost, and is anything delivered twice under two
ids?

A server on SQLite has one webhook for AGENT_STARTED, AGENT_RESULT and RUN_FINISHED
(signed, verified by the receiver with the `standardwebhooks` package); clients run
small trees until 500 matching events were journaled; the server stops (deliveries
still waiting) and starts again on the same journal; clients go on to 1,000 matching
events. The receiver answers
every third request 500, the rest 204, and keeps every request. Then: every matching
event was delivered (a 2xx) at least once; a delivery taken twice had the same
`webhook-id` both times; nothing is dead; every signature verified.
"""

from __future__ import annotations

import base64
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import trio
import yaml
from websockets.trio.client import connect

from bench.soak.common import read_until_end, request, row, running_server, write_config
from orchestrator.config import load_config
from tests.fakes.webhook_receiver import WebhookReceiver

WANTED = ("AGENT_STARTED", "AGENT_RESULT", "RUN_FINISHED")


def _tree() -> dict[str, dict[str, Any]]:
    leaf: dict[str, Any] = {
        "description": "a leaf",
        "instructions": "answer",
        "script": {"turns": [{"say": "ok"}]},
    }
    spawn = [
        {"name": "agent_spawn", "args": {"agent_id": "leaf", "task": f"t{i}"}} for i in range(4)
    ]
    root: dict[str, Any] = {
        "description": "spawns four leaves",
        "instructions": "delegate",
        "tools": ["agent_spawn"],
        "script": {"turns": [{"calls": spawn}, {"say": "done"}]},
    }
    return {"leaf": leaf, "root": root}


async def main(deliveries: int = 1000, clients: int = 4) -> list[str]:
    root = Path(tempfile.mkdtemp())
    secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    os.environ["SOAK_WEBHOOK_SECRET"] = secret
    receiver = WebhookReceiver(secret=secret, answer=lambda n: 500 if n % 3 == 0 else 204)
    expected: set[tuple[str, int]] = set()
    async with trio.open_nursery() as nursery:
        await nursery.start(receiver.serve)
        write_config(root, _tree(), storage="sqlite:///journal.db")
        data = yaml.safe_load((root / "server.yaml").read_text())
        data["webhooks"] = {
            "soak": {
                "url": receiver.url(),
                "events": list(WANTED),
                "secret_env": "SOAK_WEBHOOK_SECRET",
            }
        }
        data["tools"] = {"http_allowed_hosts": ["127.0.0.1"]}
        data["limits"]["webhooks"] = {
            "retry_first_seconds": 0.05,
            "retry_max_seconds": 0.5,
            "max_attempts": 30,
        }
        (root / "server.yaml").write_text(yaml.safe_dump(data))
        config = load_config(root / "server.yaml")
        started = time.perf_counter()
        most_waiting, dead = 0, 0
        for target in (deliveries // 2, deliveries):  # (a restart half way: the outbox
            async with running_server(config) as server:  # goes on from the store)
                outbox = server.app.outbox
                assert outbox is not None

                async def client(url: str, target: int) -> None:
                    async with connect(url, max_size=None) as ws:
                        while len(expected) < target:
                            ack = await request(ws, op="run", agent="root", input="x")
                            events, _ = await read_until_end(ws, ack["sub"])
                            expected.update(
                                (e["runId"], e["seq"]) for e in events if e["type"] in WANTED
                            )

                async with trio.open_nursery() as runs:
                    for _ in range(clients):
                        runs.start_soon(client, server.url, target)
                if target < deliveries:
                    continue  # (stopped with deliveries still waiting)
                with trio.fail_after(300):
                    while not expected <= _taken(receiver) or outbox.waiting:
                        most_waiting = max(most_waiting, len(outbox.waiting))
                        await trio.sleep(0.05)
                drained = time.perf_counter() - started
                dead = len(outbox.dead)
        nursery.cancel_scope.cancel()
    taken = [r for r in receiver.got if 200 <= r.status < 300]
    ids_of: dict[tuple[str, int], set[str]] = {}
    for r in taken:
        ids_of.setdefault((r.json["runId"], r.json["seq"]), set()).add(r.headers["webhook-id"])
    lost = expected - set(ids_of)
    two_ids = [k for k, ids in ids_of.items() if len(ids) > 1]
    twice = sum(n - 1 for n in Counter((r.json["runId"], r.json["seq"]) for r in taken).values())
    refused = sum(1 for r in receiver.got if r.status >= 500)
    lines = [
        row("matching events", "requests", "refused (500)", "taken (2xx)", "lost", "taken twice",
            "twice under two ids", "dead", "bad signatures", "most waiting", "seconds"),
        row(*["---:"] * 11),
        row(len(expected), len(receiver.got), refused, len(taken), len(lost), twice,
            len(two_ids), dead, sum(1 for r in receiver.got if not r.verified), most_waiting,
            f"{drained:.1f}"),
    ]  # fmt: skip
    assert not lost and not two_ids and dead == 0, (lost, two_ids, dead)
    return lines


def _taken(receiver: WebhookReceiver) -> set[tuple[str, int]]:
    return {(r.json["runId"], r.json["seq"]) for r in receiver.got if 200 <= r.status < 300}
