"""An inbound hook's templates and signature (orchestrator/core/hooks.py), without I/O."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.core.hooks import fill, fill_json, signature_ok, slack_signature_ok

EVENT: dict[str, Any] = {
    "issue": {"number": 7, "title": "It breaks", "labels": ["bug", "p1"]},
    "sender": {"login": "ann"},
}


def test_fields_fill_a_template_strings_as_they_are_the_rest_as_json() -> None:
    assert fill("#{body.issue.number}: {body.issue.title}", EVENT) == "#7: It breaks"
    assert fill("{body.issue.labels}", EVENT) == '["bug","p1"]'
    assert fill("{body.issue.labels.1}", EVENT) == "p1"
    assert fill("[{body.nope.deeper}] [{body.issue.labels.9}]", EVENT) == "[] []"
    assert fill("{body}", {"a": 1}) == '{"a":1}'
    assert fill("{input} {body.} {{body.sender.login}}", EVENT) == "{input} {body.} {ann}"


@given(st.text(max_size=200))
def test_text_without_placeholders_is_left_as_it_is(text: str) -> None:
    if "{body" not in text:
        assert fill(text, EVENT) == text


def test_a_signature_is_the_bodys_hmac_and_nothing_else() -> None:
    body = b'{"a":1}'
    good = "sha256=" + hmac.new(b"k", body, hashlib.sha256).hexdigest()
    assert signature_ok(b"k", body, good)
    assert signature_ok(b"k", body, good.upper().replace("SHA256=", "sha256="))
    assert not signature_ok(b"other", body, good)
    assert not signature_ok(b"k", body + b" ", good)
    assert not signature_ok(b"k", body, good.removeprefix("sha256="))
    assert not signature_ok(b"k", body, None)


def test_a_template_that_would_grow_past_its_limit_is_refused_while_filled() -> None:
    big = {"text": "x" * 1000}
    assert len(fill("{body.text}", big, limit=2000)) == 1000
    with pytest.raises(ValueError, match="passes 2000 characters"):
        fill("{body.text}{body.text}{body.text}", big, limit=2000)


def slack_signed(secret: bytes, stamp: str, body: bytes) -> str:
    """As Slack signs: `v0=` hex HMAC-SHA256 of `v0:<timestamp>:<body>` (its docs)."""
    return (
        "v0=" + hmac.new(secret, b"v0:" + stamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    )


def test_slack_signatures_are_checked_with_their_timestamp() -> None:
    """Issue 57, 19: Slack's `X-Slack-Signature`, its timestamp within 5 minutes."""
    secret, body, now = (
        b"8f742231b10e8888abcd99yyyzzz85a5",
        b'{"type":"event_callback"}',
        1_800_000_000,
    )
    stamp = str(now - 10)
    good = slack_signed(secret, stamp, body)
    assert slack_signature_ok(secret, body, stamp, good, now)
    assert slack_signature_ok(secret, body, stamp, good.upper().replace("V0=", "v0="), now)
    assert not slack_signature_ok(secret, body + b" ", stamp, good, now)  # another body
    assert not slack_signature_ok(b"other", body, stamp, good, now)
    assert not slack_signature_ok(secret, body, stamp, good.removeprefix("v0="), now)
    assert not slack_signature_ok(secret, body, None, good, now)
    assert not slack_signature_ok(secret, body, stamp, None, now)
    old = str(now - 301)  # a replay of an old request
    assert not slack_signature_ok(secret, body, old, slack_signed(secret, old, body), now)
    assert not slack_signature_ok(secret, body, "1e9", good, now)


def test_a_body_template_fills_every_string_of_a_json_value() -> None:
    body = {"runId": "run-1", "data": {"data": {"status": "completed", "n": 3}}}
    template = {
        "text": "Run {body.runId} {body.data.data.status}",
        "blocks": [{"n": "{body.data.data.n}"}],
        "k": 1,
    }
    assert fill_json(template, body) == {
        "text": "Run run-1 completed",
        "blocks": [{"n": "3"}],
        "k": 1,
    }
    with pytest.raises(ValueError):
        fill_json({"a": "{body}", "b": "{body}"}, {"x": "y" * 60}, limit=100)
