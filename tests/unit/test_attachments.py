"""Attachments' pure parts (agents/core/attachments.py), the request reader
(orchestrator/runtime/attachments.py), and the blob store of every storage backend:
each blob once, gone with the last run that refers to it."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.core.attachments import (
    Attachment,
    AttachmentError,
    AttachmentIn,
    AttachmentLimits,
    from_infos,
    infos,
    shown,
)
from agents.errors import ToolError
from orchestrator.runtime.attachments import received
from tests.unit.test_journal import Factory, factory  # noqa: F401  (the fixture: every store)

PNG = Attachment.of("dot.png", "image/png", b"\x89PNG fake")
PDF = Attachment.of("a.pdf", "application/pdf", b"%PDF-1.4 fake")
TXT = Attachment.of("n.txt", "text/plain", "héllo".encode())


@given(st.binary(max_size=64), st.binary(max_size=64))
def test_an_id_is_its_contents_address(a: bytes, b: bytes) -> None:
    assert (Attachment.of("x", "image/png", a).id == Attachment.of("y", "text/plain", b).id) == (
        a == b
    )


def test_events_name_attachments_and_read_them_back_with_their_bytes() -> None:
    named = infos([PNG, PDF])
    assert named[0] == {"id": PNG.id, "name": "dot.png", "mediaType": "image/png", "size": 9}
    back = from_infos(named, {PNG.id: PNG.data})
    assert back[0] == PNG and back[1].data == b"" and back[1].size == PDF.size


def test_each_attachment_reaches_a_model_as_it_can_take_it() -> None:
    lost = from_infos(infos([PDF]), {})[0]
    out = shown([PNG, PDF, TXT, lost], accepts=("image/*",))
    kinds = [kind for kind, _ in out]
    assert kinds == ["text", "image", "text", "text", "text"]
    assert out[0][1] == f"[attachment 'dot.png' (image/png), id {PNG.id}]"
    assert out[1][1] is PNG
    assert "not shown: this model does not take application/pdf" in str(out[2][1])
    assert str(out[3][1]).endswith("]\nhéllo")  # a text file: its text, for any model
    assert "not shown: its bytes are no longer stored" in str(out[4][1])


def test_limits_name_what_is_wrong() -> None:
    limits = AttachmentLimits(max_bytes=4, media_types=("image/*",))
    with pytest.raises(AttachmentError, match=r"x\.mediaType: 'text/plain' is not allowed"):
        limits.check_type("text/plain", "x")
    with pytest.raises(AttachmentError, match=r"is not a media type"):
        limits.check_type("image", "x")
    with pytest.raises(AttachmentError, match=r"x: 5 bytes; limits\.attachments\.max_bytes is 4"):
        limits.check_size(5, "x")


class _Fetcher:
    def __init__(self, status: int = 200, body: bytes = b"img", cut: bool = False) -> None:
        self.answer, self.urls = (status, "image/png", body, cut), list[str]()

    async def fetch(self, url: str, max_bytes: int) -> tuple[int, str | None, bytes, bool]:
        if "private" in url:
            raise ToolError(f"http_get {url}: 'private' is a non-public address")
        self.urls.append(url)
        return self.answer


def _in(**fields: str) -> AttachmentIn:
    return AttachmentIn(**{"name": "a.png", "media_type": "image/png", **fields})


async def test_a_request_is_read_fetched_and_bounded() -> None:
    limits = AttachmentLimits(max_bytes=10, max_run_bytes=12, max_count=2)
    data = base64.b64encode(b"12345").decode()
    fetcher = _Fetcher()
    got = await received([_in(data=data), _in(url="https://e.com/a.png")], limits, fetcher)
    assert [a.data for a in got] == [b"12345", b"img"] and fetcher.urls == ["https://e.com/a.png"]
    too_many = r"3 attachments; limits\.attachments\.max_count is 2"
    with pytest.raises(AttachmentError, match=too_many):
        await received([_in(data=data)] * 3, limits, fetcher)
    with pytest.raises(AttachmentError, match=r"13 bytes in all; .*max_run_bytes is 12"):
        eight = base64.b64encode(b"12345678").decode()
        await received([_in(data=eight), _in(data=data)], limits, fetcher)
    with pytest.raises(AttachmentError, match=r"\[0\]\.url: .*non-public address"):
        await received([_in(url="https://private/a.png")], limits, fetcher)
    with pytest.raises(AttachmentError, match=r"over limits\.attachments\.max_bytes"):
        await received([_in(url="https://e.com/big")], limits, _Fetcher(cut=True))
    with pytest.raises(AttachmentError, match=r"\.url: HTTP 404"):
        await received([_in(url="https://e.com/gone")], limits, _Fetcher(status=404))
    with pytest.raises(AttachmentError, match=r"\.name: 1 to 255 characters"):
        await received([_in(name="../etc/passwd", data=data)], limits, fetcher)
    with pytest.raises(AttachmentError, match="is not an attachment of the run"):
        await received([AttachmentIn(id=PNG.id)], limits, fetcher, {})
    assert await received([AttachmentIn(id=PNG.id)], limits, fetcher, {PNG.id: PNG}) == [PNG]


async def test_a_blob_is_stored_once_and_goes_with_its_last_run(factory: Factory) -> None:  # noqa: F811
    async with factory() as storage:
        await storage.put_blobs("run-a", {PNG.id: PNG.data, PDF.id: PDF.data})
        await storage.put_blobs("run-b", {PNG.id: b"never a second copy"})
        await storage.ref_blobs("run-c", [PDF.id, "att-" + "0" * 32])  # (an unknown one: none)
        found = await storage.get_blobs([PNG.id, PDF.id, TXT.id])
        assert found == {PNG.id: PNG.data, PDF.id: PDF.data}
        await storage.delete_runs(["run-a"])
        assert set(await storage.get_blobs([PNG.id, PDF.id])) == {PNG.id, PDF.id}
        await storage.delete_runs(["run-b"])
        assert set(await storage.get_blobs([PNG.id, PDF.id])) == {PDF.id}
        await storage.delete_runs(["run-c"])
        assert await storage.get_blobs([PNG.id, PDF.id]) == {}


async def test_a_run_reads_only_the_blobs_it_refers_to(factory: Factory) -> None:  # noqa: F811
    async with factory() as storage:
        await storage.put_blobs("run-a", {PNG.id: PNG.data})
        await storage.put_blobs("run-b", {PDF.id: PDF.data})
        assert await storage.get_blobs([PNG.id, PDF.id], run_id="run-a") == {PNG.id: PNG.data}
        assert await storage.get_blobs([PNG.id], run_id="run-b") == {}


def test_an_attachment_counts_toward_the_conversations_size() -> None:
    from agents.core.compaction import ATTACHMENT_TOKENS, estimate_message
    from agents.core.messages import UserMessage

    bare = estimate_message(UserMessage(text="look"))
    assert (
        estimate_message(UserMessage(text="look", attachments=(PNG,))) == bare + ATTACHMENT_TOKENS
    )
    text = Attachment.of("n.txt", "text/plain", b"x" * 4000)
    assert estimate_message(UserMessage(text="look", attachments=(text,))) == bare + 1000
