"""An MCP tool result as the text a model gets back (pure).

| MCP content | becomes |
|---|---|
| `text` | its text |
| `image` | `[image image/png, 12345 bytes]`, and the image itself as an attachment |
| `audio` | `[audio audio/wav, 12345 bytes]` (no model here takes audio) |
| `resource` with text | its text, after `[resource <uri>]` |
| `resource` with a blob | `[resource <uri> <mimeType>, N bytes]`, and the blob as an attachment |
| `resource_link` | `[resource link <uri> <name>]` |
| `structuredContent` with no content blocks | its JSON |

Blocks are joined with blank lines; the whole is cut at `max_chars` with a marker.
`isError: true` makes it an error result for the model (the agent goes on).
"""

from __future__ import annotations

import json
from typing import Any

from agents.core.attachments import Attachment, AttachmentError, decode_base64

__all__ = ["result_attachments", "result_text"]


def result_text(content: list[Any], structured: Any, max_chars: int) -> str:
    """The model's text for a result's `content` blocks and `structuredContent`."""
    parts = [_block(block) for block in content]
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, separators=(",", ":")))
    text = "\n\n".join(p for p in parts if p)
    if len(text) > max_chars:
        cut = len(text) - max_chars
        text = text[:max_chars] + f"…[truncated {cut} characters]"
    return text


def result_attachments(content: list[Any], tool: str) -> tuple[Attachment, ...]:
    """A result's images and embedded blobs as attachments, which reach the model in
    its provider's own blocks (docs/structured.md#attachments). One whose base64 does
    not decode is left out (its line in the text says it was there)."""
    out: list[Attachment] = []
    for i, block in enumerate(content, 1):
        kind = getattr(block, "type", None)
        if kind == "image":
            data, mime, name = block.data, block.mime_type, f"{tool}-{i}"
        elif kind == "resource" and getattr(block.resource, "blob", None) is not None:
            resource = block.resource
            mime = getattr(resource, "mime_type", None) or "application/octet-stream"
            data, name = resource.blob, str(resource.uri).rstrip("/").rsplit("/", 1)[-1]
        else:
            continue
        try:
            raw = decode_base64(str(data), "content")
        except AttachmentError:
            continue
        out.append(Attachment.of(name or f"{tool}-{i}", str(mime), raw))
    return tuple(out)


def _block(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        return f"[{kind} {block.mime_type}, {_size(block.data)} bytes]"
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        if text is not None:
            return f"[resource {resource.uri}]\n{text}"
        mime = getattr(resource, "mime_type", None) or "application/octet-stream"
        return f"[resource {resource.uri} {mime}, {_size(getattr(resource, 'blob', ''))} bytes]"
    if kind == "resource_link":
        name = getattr(block, "name", "")
        return f"[resource link {block.uri}" + (f" {name}]" if name else "]")
    return f"[{kind or 'unknown'} content]"


def _size(data: str) -> int:
    """Bytes that base64 `data` stands for (counted, not decoded)."""
    data = data.strip()
    return max(0, len(data) * 3 // 4 - data[-2:].count("="))
