"""Pure bounds: linear-time globs, event size caps, auth and origin rules, Redis settings."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from websockets.datastructures import Headers

from orchestrator.config import ServerConfig, load_config
from orchestrator.core.capping import cap_event
from orchestrator.core.events import Event, EventType, encode_event
from orchestrator.core.filters import glob_match, segment_match
from orchestrator.server.auth import Auth
from orchestrator.storage.redis import check_persistence


def reference_glob(pattern: str, path: str) -> bool:
    """The old regex matcher: right, but exponential on `a*a*a*…`."""
    parts = pattern.strip("/").split("/")
    segments = path.split("/")

    def seg(p: str, s: str) -> bool:
        return re.fullmatch("[^/]*".join(re.escape(x) for x in p.split("*")), s) is not None

    def match(i: int, j: int) -> bool:
        if i == len(parts):
            return j == len(segments)
        if parts[i] == "**":
            return match(i + 1, j) or (j < len(segments) and match(i, j + 1))
        return j < len(segments) and seg(parts[i], segments[j]) and match(i + 1, j + 1)

    return match(0, 0)


segment = st.text(alphabet="ab", max_size=5)
pattern_segment = st.one_of(st.text(alphabet="ab*", min_size=1, max_size=5), st.just("**"))


@given(
    pattern=st.lists(pattern_segment, min_size=1, max_size=4).map("/".join),
    path=st.lists(segment, min_size=1, max_size=4).map("/".join),
)
def test_glob_matches_like_the_reference(pattern: str, path: str) -> None:
    assert glob_match(pattern, path) == reference_glob(pattern, path)


def test_pathological_globs_are_linear() -> None:
    """Regression: 14 stars cost 24 s per event and froze the server (issue 8.1)."""
    long_segment = "a" * 20_000
    assert not segment_match(tuple(("a" * 3 + "*") * 40 + "Z"), long_segment)
    assert not glob_match("*" * 14 + "Z", long_segment)
    assert not glob_match("/".join(["**"] * 60) + "/Z", "/".join(["a"] * 64))
    assert glob_match("/".join(["**"] * 60) + "/a", "/".join(["a"] * 64))


def _event(data: dict[str, object], type: EventType = EventType.TOOL_CALL) -> Event:
    return Event(run_id="run-1", seq=3, ts=1.0, type=type, source=None, data=data)


def test_big_events_are_cut_with_a_marker_and_keep_their_ids() -> None:
    event = _event({"toolCallId": "c1", "name": "write_file", "args": {"content": "x" * 10**7}})
    capped, raw = cap_event(event, encode_event(event), 256 * 1024)
    assert len(raw) <= 256 * 1024
    assert capped.data["toolCallId"] == "c1" and capped.data["truncated"] is True
    content = capped.data["args"]["content"]
    assert content.startswith("xxxx") and content.endswith("characters]")
    assert msgspec.json.decode(raw)["seq"] == 3


def test_small_events_are_untouched_and_huge_lists_keep_only_ids() -> None:
    small = _event({"toolCallId": "c1", "args": {"a": 1}})
    raw = encode_event(small)
    assert cap_event(small, raw, 4096) == (small, raw)
    wide = _event({"toolCallId": "c2", "name": "t", "args": {"xs": list(range(200_000))}})
    capped, raw = cap_event(wide, encode_event(wide), 8192)
    assert len(raw) <= 8192
    assert capped.data == {
        "toolCallId": "c2",
        "name": "t",
        "truncated": True,
        "originalBytes": len(encode_event(wide)),
    }


def _config(tmp_path: Path, server: str) -> ServerConfig:
    path = tmp_path / "server.yaml"
    path.write_text(f"server: {server}\n")
    return load_config(path)


def test_tokens_roles_and_the_plain_list(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        "{tokens: [plain-secret, {name: ann, token: ann-secret, role: user, "
        "max_concurrent_runs: 2}], metrics_token: scrape-me}",
    )
    auth = Auth(config)
    admin = auth.identify(Headers({"Authorization": "Bearer plain-secret"}), "")
    user = auth.identify(Headers(), "token=ann-secret")
    assert admin is not None and admin.admin and admin.name == "token-1"
    assert user is not None and not user.admin and user.name == "ann" and user.max_runs == 2
    assert user.may_see("ann") and not user.may_see("token-1") and admin.may_see("ann")
    assert auth.identify(Headers({"Authorization": "Bearer nope"}), "") is None
    assert auth.identify(Headers({"Authorization": "Bearer "}), "token=") is None
    assert auth.may_read_metrics(Headers({"Authorization": "Bearer scrape-me"}), "")
    assert auth.may_read_metrics(Headers({"Authorization": "Bearer plain-secret"}), "")
    assert not auth.may_read_metrics(Headers({"Authorization": "Bearer ann-secret"}), "")
    assert not auth.may_read_metrics(Headers(), "")
    open_auth = Auth(_config(tmp_path, "{}"))
    anyone = open_auth.identify(Headers(), "")
    assert anyone is not None and anyone.admin and open_auth.may_read_metrics(Headers(), "")


@pytest.mark.parametrize(
    ("origin", "host", "allowed", "ok"),
    [
        (None, "127.0.0.1:8765", None, True),  # not a browser
        ("http://127.0.0.1:8765", "127.0.0.1:8765", None, True),  # the console at /
        ("https://evil.example", "127.0.0.1:8765", None, False),
        ("http://127.0.0.1:9999", "127.0.0.1:8765", None, False),
        ("null", "127.0.0.1:8765", None, False),
        ("https://ui.example", "127.0.0.1:8765", "[https://ui.example]", True),
        ("https://UI.example/", "127.0.0.1:8765", "[https://ui.example]", True),
    ],
)
def test_same_origin_by_default(
    tmp_path: Path, origin: str | None, host: str, allowed: str | None, ok: bool
) -> None:
    server = "{allowed_origins: " + allowed + "}" if allowed else "{}"
    headers = Headers({"Host": host})
    if origin is not None:
        headers["Origin"] = origin
    assert Auth(_config(tmp_path, server)).origin_allowed(headers) is ok


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"appendonly": "yes", "appendfsync": "everysec"}, None),
        ({"appendonly": "yes", "appendfsync": "always"}, None),
        ({"appendonly": "no", "appendfsync": "everysec"}, "appendonly is 'no'"),
        ({"appendonly": "yes", "appendfsync": "no"}, "appendfsync is 'no'"),
    ],
)
def test_redis_persistence_settings(settings: dict[str, str], problem: str | None) -> None:
    found = check_persistence(settings)
    assert found == problem if problem is None else problem in (found or "")


def test_tokens_are_compared_in_constant_time_against_every_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What held (issue 8): hmac.compare_digest, and no early exit that timing would show."""
    import hmac

    compared: list[bytes] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append(b)
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    auth = Auth(_config(tmp_path, "{tokens: [first-secret, second-secret, third-secret]}"))
    assert auth.identify(Headers({"Authorization": "Bearer first-secret"}), "") is not None
    assert compared == [b"first-secret", b"second-secret", b"third-secret"]
