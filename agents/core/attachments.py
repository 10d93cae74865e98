"""Attachments: images and files handed to an agent with its task or a message (pure).

An attachment is its bytes, a name and a media type. Its id is its content's hash
(`att-` and 32 hex digits of SHA-256), so the journal stores it once however many runs,
forks and messages refer to it, and events carry only `{id, name, mediaType, size}`.
What a model cannot take comes to it as a one-line note instead (`note`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypedDict

import msgspec

from agents.core.wildcard import wildcard_match
from agents.errors import OrchestratorError

__all__ = [
    "ATTACHMENT_ID",
    "Attachment",
    "AttachmentError",
    "AttachmentIn",
    "AttachmentInfo",
    "AttachmentLimits",
    "BlobStore",
    "MemoryBlobs",
    "after_results",
    "attachment_id",
    "decode_base64",
    "from_infos",
    "infos",
    "note",
    "shown",
]

ATTACHMENT_ID = re.compile(r"^att-[0-9a-f]{32}$")
_MEDIA_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,63}$")


class AttachmentError(OrchestratorError, ValueError):
    """An attachment cannot be taken; the message says which and why."""

    code = "bad_request"


class AttachmentInfo(TypedDict):
    """An attachment as events name it (its bytes are in the journal's blob store)."""

    id: str
    name: str
    mediaType: str
    size: int


class AttachmentIn(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """An image or file as a client (or a model's `agent_spawn`) gives it: its bytes in
    base64 (`data`) or an `https` URL the server fetches (`url`); or `id`, one the run
    has already."""

    name: str = ""
    media_type: str = ""
    data: str | None = None
    url: str | None = None
    id: str | None = None


class Attachment(msgspec.Struct, frozen=True, kw_only=True):
    """An attachment with its bytes, as a conversation holds it."""

    id: str
    name: str
    media_type: str
    data: bytes = b""
    """Empty when its bytes could not be read back (the model is told so)."""
    size: int = 0

    @classmethod
    def of(cls, name: str, media_type: str, data: bytes) -> Attachment:
        """An attachment of `data`, its id its content's."""
        return cls(
            id=attachment_id(data), name=name, media_type=media_type, data=data, size=len(data)
        )

    def info(self) -> AttachmentInfo:
        """How events name it."""
        return {"id": self.id, "name": self.name, "mediaType": self.media_type, "size": self.size}

    @property
    def is_image(self) -> bool:
        return self.media_type.startswith("image/")

    def base64(self) -> str:
        """Its bytes in base64 (what the providers' wire formats carry)."""
        return base64.b64encode(self.data).decode("ascii")

    def data_url(self) -> str:
        """`data:<type>;base64,…`."""
        return f"data:{self.media_type};base64,{self.base64()}"


def attachment_id(data: bytes) -> str:
    """The content address of `data`."""
    return "att-" + hashlib.sha256(data).hexdigest()[:32]


def infos(attachments: Iterable[Attachment]) -> list[AttachmentInfo]:
    """Events' view of `attachments`."""
    return [a.info() for a in attachments]


def from_infos(named: Iterable[Any], blobs: Mapping[str, bytes]) -> tuple[Attachment, ...]:
    """Attachments of events (`AttachmentInfo`s) with their bytes from `blobs` (a missing
    one has none: the model is told it is unavailable)."""
    out = []
    for info in named:
        if not isinstance(info, dict) or not isinstance(info.get("id"), str):
            continue
        out.append(
            Attachment(
                id=info["id"],
                name=str(info.get("name", "")),
                media_type=str(info.get("mediaType", "application/octet-stream")),
                data=blobs.get(info["id"], b""),
                size=int(info.get("size", 0)),
            )
        )
    return tuple(out)


def decode_base64(text: str, where: str) -> bytes:
    """Strict base64 (padding required, no stray characters)."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise AttachmentError(f"{where}.data: not valid base64") from None


class AttachmentLimits(msgspec.Struct, frozen=True, kw_only=True):
    """What a run may be given (`limits.attachments`; docs/structured.md#attachments)."""

    max_bytes: int = 10 * 1024 * 1024
    """Bytes of one attachment."""
    max_run_bytes: int = 32 * 1024 * 1024
    """Bytes of every attachment of one run (its start, messages, spawns, tool results)."""
    max_count: int = 16
    """Attachments in one request (a `run`, a `send`, an `agent_spawn` call)."""
    media_types: tuple[str, ...] = ("image/*", "application/pdf", "text/*", "application/json")
    """Media types taken (`*` matches any run of characters)."""

    def check_type(self, media_type: str, where: str) -> None:
        """Refuse a media type that is malformed or not allowed."""
        if not _MEDIA_TYPE.match(media_type):
            raise AttachmentError(f"{where}.mediaType: {media_type[:80]!r} is not a media type")
        if not any(wildcard_match(p, media_type) for p in self.media_types):
            raise AttachmentError(
                f"{where}.mediaType: {media_type!r} is not allowed "
                f"(limits.attachments.media_types: {', '.join(self.media_types)})"
            )

    def check_size(self, size: int, where: str) -> None:
        """Refuse an attachment over `max_bytes`."""
        if size > self.max_bytes:
            raise AttachmentError(
                f"{where}: {size} bytes; limits.attachments.max_bytes is {self.max_bytes}"
            )


def note(attachment: Attachment, why: str) -> str:
    """The line a model gets instead of an attachment it cannot take."""
    return (
        f"[attachment {attachment.name!r} ({attachment.media_type}, {attachment.size} bytes), "
        f"id {attachment.id}, not shown: {why}]"
    )


_TEXTUAL = ("text/*", "application/json")
MAX_INLINE_CHARS = 200_000
"""Characters of a text attachment put into the conversation (the rest is cut, said)."""


def shown(
    attachments: Iterable[Attachment], accepts: Iterable[str]
) -> list[tuple[str, Attachment | str]]:
    """How each attachment reaches a model that takes the media types `accepts`: a
    caption naming it and its id (`("text", line)`: so a model can hand it on to a child
    with `agent_spawn`), then `("image", a)` or `("file", a)` in the provider's own
    block; or `("text", …)` only: a text file's content (any model reads it), or a note
    saying why it is not shown."""
    taken = tuple(accepts)
    out: list[tuple[str, Attachment | str]] = []
    for a in attachments:
        if not a.data and a.size:
            out.append(("text", note(a, "its bytes are no longer stored")))
        elif any(wildcard_match(p, a.media_type) for p in _TEXTUAL):
            text = a.data.decode("utf-8", "replace")
            cut = len(text) - MAX_INLINE_CHARS
            if cut > 0:
                text = text[:MAX_INLINE_CHARS] + f"\n[… {cut} characters cut]"
            caption = f"[attachment {a.name!r} ({a.media_type}), id {a.id}]"
            out.append(("text", f"{caption}\n{text}"))
        elif any(wildcard_match(p, a.media_type) for p in taken):
            out.append(("text", f"[attachment {a.name!r} ({a.media_type}), id {a.id}]"))
            out.append(("image" if a.is_image else "file", a))
        else:
            out.append(("text", note(a, f"this model does not take {a.media_type}")))
    return out


class BlobStore(Protocol):
    """Where attachments' bytes are kept, content-addressed, with the runs that refer to
    them (a journal's `Storage` is one)."""

    async def put_blobs(self, run_id: str, blobs: dict[str, bytes]) -> None:
        """Keep `blobs` (id → bytes) for `run_id`, each stored once."""
        ...

    async def ref_blobs(self, run_id: str, keys: list[str]) -> None:
        """`run_id` refers to blobs stored already (a fork)."""
        ...

    async def get_blobs(self, keys: list[str], run_id: str | None = None) -> dict[str, bytes]:
        """Those of `keys` that are stored (and, with `run_id`, that run refers to)."""
        ...


class MemoryBlobs:
    """A `BlobStore` in this process's memory: each blob once, forgotten with the last
    run that refers to it (`forget`)."""

    def __init__(self) -> None:
        self._blobs: dict[str, bytes] = {}
        self._refs: dict[str, set[str]] = {}
        """Run id → the blobs it refers to."""

    async def put_blobs(self, run_id: str, blobs: dict[str, bytes]) -> None:
        """Kept once each."""
        for key, data in blobs.items():
            self._blobs.setdefault(key, data)
        self._refs.setdefault(run_id, set()).update(blobs)

    async def ref_blobs(self, run_id: str, keys: list[str]) -> None:
        """One more run refers to them."""
        self._refs.setdefault(run_id, set()).update(k for k in keys if k in self._blobs)

    async def get_blobs(self, keys: list[str], run_id: str | None = None) -> dict[str, bytes]:
        """Those kept (and referred to by `run_id`, if given)."""
        mine = self._refs.get(run_id, set()) if run_id is not None else self._blobs
        return {k: self._blobs[k] for k in keys if k in self._blobs and k in mine}

    def forget(self, run_ids: Iterable[str]) -> None:
        """The runs are gone: so is each blob no other run refers to."""
        for run_id in run_ids:
            self._refs.pop(run_id, None)
        used: set[str] = set().union(*self._refs.values()) if self._refs else set()
        for key in [k for k in self._blobs if k not in used]:
            del self._blobs[key]


def after_results(
    held: list[tuple[str, tuple[Attachment, ...]]],
    content: Callable[[str, tuple[Attachment, ...], Sequence[str]], Any],
    accepts: Sequence[str],
) -> list[dict[str, Any]]:
    """The parts of the user message that follows tool results with attachments, in a
    wire format whose tool results hold none (OpenAI's): each result's, captioned, in
    the parts `content` makes; `held` is emptied."""
    parts: list[dict[str, Any]] = []
    for call, attachments in held:
        made = content(f"Attachments of the result of {call}:", attachments, accepts)
        parts.extend(made if isinstance(made, list) else [])
    held.clear()
    return parts
