"""An inbound hook's templates and signature (orchestrator/core/hooks.py), without I/O."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.core.hooks import fill, signature_ok

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
