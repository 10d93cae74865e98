"""Webhooks out without I/O (orchestrator/core/webhooks.py, webhooks/matching.py): the
signature Standard Webhooks' own library accepts, ids stable across matches, filters
by depth, the retry waits, which URLs a run's own webhook may use."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks import Webhook

from orchestrator.core.events import Event, EventType, Source
from orchestrator.core.webhooks import (
    WebhookSpec,
    message_id,
    retry_delay,
    secret_key,
    shown_url,
    sign,
    standard_body,
    url_allowed,
)
from orchestrator.storage.base import RunOptions, RunRecord
from orchestrator.storage.runlog import Entry
from orchestrator.webhooks.matching import RunSubscriptions

SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()


def event(seq: int, kind: EventType, depth: int = 0, agent: str = "a") -> Event:
    source = None
    if depth:
        source = Source(
            agent_key=f"agent:{agent}:1",
            agent_id=agent,
            agent_name=agent,
            session_id=f"sub-{depth}",
            parent_session_id="root",
            depth=depth,
            path="root/" + "/".join(f"sub-{d}" for d in range(1, depth + 1)),
        )
    return Event(run_id="run-1", seq=seq, ts=1.5e9, type=kind, source=source, data={})


def entry(e: Event) -> Entry:
    import msgspec

    return Entry(e, msgspec.json.encode(e), e.seq)


@given(body=st.binary(max_size=200).map(lambda b: base64.b64encode(b)), stamp=st.integers(0, 2**33))
def test_the_signature_is_what_standard_webhooks_computes(body: bytes, stamp: int) -> None:
    ours = sign(secret_key(SECRET), "msg_1", stamp, body)
    theirs = Webhook(SECRET).sign("msg_1", datetime.fromtimestamp(stamp, UTC), body.decode())
    assert ours == theirs


def test_a_signed_delivery_verifies_with_the_reference_library() -> None:
    e = event(3, EventType.RUN_FINISHED)
    body = standard_body(e, entry(e).raw)
    now = int(datetime.now(UTC).timestamp())
    headers = {
        "webhook-id": "msg_x",
        "webhook-timestamp": str(now),
        "webhook-signature": sign(secret_key(SECRET), "msg_x", now, body),
    }
    got = Webhook(SECRET).verify(body, headers)
    assert got["type"] == "RUN_FINISHED" and got["runId"] == "run-1" and got["seq"] == 3
    assert got["data"] == json.loads(entry(e).raw)
    assert got["timestamp"] == "2017-07-14T02:40:00Z"


@pytest.mark.parametrize(
    ("secret", "why"),
    [
        ("plain", "starts with 'whsec_'"),
        ("whsec_" + base64.b64encode(b"x" * 8).decode(), "24-64 bytes, not 8"),
        ("whsec_" + base64.b64encode(b"x" * 80).decode(), "24-64 bytes, not 80"),
        ("whsec_!!!", "must be base64"),
    ],
)
def test_a_bad_secret_is_refused_saying_why(secret: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        secret_key(secret)


def test_ids_are_stable_and_distinct() -> None:
    assert message_id("ci", "run-1", 3) == message_id("ci", "run-1", 3)
    ids = {
        message_id(w, r, s, p)
        for w in ("ci", "oncall")
        for r in ("run-1", "run-2")
        for s in (1, 2)
        for p in (0, 1)
    }
    assert len(ids) == 16 and all(i.startswith("msg_") for i in ids)


def test_retry_waits_double_up_to_the_most() -> None:
    assert [retry_delay(n, 1.0, 10.0) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    assert retry_delay(10_000, 1.0, 600.0) == 600.0  # (no overflow)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://hooks.example.com/runs", True),
        ("https://hooks.example.com/runs/42", True),
        ("https://HOOKS.example.com/runs/42", True),
        ("https://hooks.example.com/runsX", False),
        ("https://hooks.example.com/other", False),
        ("http://hooks.example.com/runs", False),
        ("https://hooks.example.com:8443/runs", False),
        ("https://hooks.example.com@evil.test/runs", False),
        ("https://evil.test/runs", False),
        ("https://ci.example.com/anything", True),
        # dot segments: an HTTP client resolves them before it sends (issue 57, defect 2)
        ("https://hooks.example.com/runs/../cfg", False),
        ("https://hooks.example.com/runs/./../x", False),
        ("https://hooks.example.com/runs/%2e%2e/cfg", False),
        ("https://hooks.example.com/runs/%2E./cfg", False),
        ("https://hooks.example.com/runs/.%2e", False),
        ("https://hooks.example.com/runs/..%2fcfg", False),
        ("https://hooks.example.com/runs/..%5ccfg", False),
        ("https://hooks.example.com/runs/./42", False),
        ("https://ci.example.com/a/../b", False),
        ("https://hooks.example.com/runs/...", True),
        ("https://hooks.example.com/runs/v1.2/x", True),
    ],
)
def test_a_runs_own_url_must_be_under_a_configured_prefix(url: str, allowed: bool) -> None:
    prefixes = ["https://hooks.example.com/runs/", "https://ci.example.com"]
    assert url_allowed(url, prefixes) is allowed


def test_a_run_matches_the_configs_webhooks_and_its_own() -> None:
    record = RunRecord(
        run_id="run-1",
        agent_id="root",
        input="q",
        status="running",
        created_at=1.0,
        root_session_id="root",
        options=RunOptions(
            webhooks=(
                WebhookSpec(url="https://x.test/own", events=["RUN_FINISHED"], secret=SECRET),
            )
        ),
    )
    config = {
        "deep": WebhookSpec(url="https://x.test/deep", events=["AGENT_ERROR"], min_depth=2),
        "critic": WebhookSpec(url="https://x.test/critic", agent_ids=["critic"]),
    }
    subs = RunSubscriptions(record, config, [])
    events = [
        event(1, EventType.RUN_STARTED),
        event(2, EventType.AGENT_ERROR, depth=1),
        event(3, EventType.AGENT_ERROR, depth=2),
        event(4, EventType.AGENT_RESULT, depth=3, agent="critic"),
        event(5, EventType.RUN_FINISHED),
    ]
    made = subs.match([entry(e) for e in events], now=9.0)
    assert [(d.webhook, d.seq) for d in made] == [("deep", 3), ("critic", 4), ("run:0", 5)]
    assert made[2].secret == SECRET and made[0].secret is None  # (a config's stays there)
    again = RunSubscriptions(record, config, []).match([entry(e) for e in events], now=10.0)
    assert [d.id for d in again] == [d.id for d in made]  # matched again: the same ids


def test_a_spec_names_what_is_wrong_with_it() -> None:
    spec = WebhookSpec(url="ftp://x", events=["NOPE"], min_depth=-1, path_glob="", secret="s")
    problems = spec.problems("webhooks[0]")
    assert "webhooks[0].url must be an http(s) URL with a host" in problems
    assert "webhooks[0].events: unknown event type 'NOPE'" in problems
    assert "webhooks[0].minDepth must be 0 or more" in problems
    assert "webhooks[0].pathGlob must not be empty" in problems
    assert any(p.startswith("webhooks[0].secret: ") for p in problems)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.slack.com/services/T0/B0/SECRET", "https://hooks.slack.com/…"),
        ("https://user:pw@ci.example.com:8443/x?token=t", "https://ci.example.com:8443/…"),
        ("http://127.0.0.1:9000/", "http://127.0.0.1:9000"),
        ("https://ci.example.com?token=t", "https://ci.example.com/…"),
    ],
)
def test_a_url_is_shown_without_what_may_be_secret(url: str, shown: str) -> None:
    assert shown_url(url) == shown
