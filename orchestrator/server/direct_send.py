"""Write a text frame to a websockets (trio) connection without waiting, when it fits.

Why this exists: `await ServerConnection.send()` costs ~45 µs of CPU per frame here
(an async context manager, two locks, two trips through the scheduler, trio's
`send_all`), against ~12 µs for the work itself — framing and permessage-deflate
in websockets' own Sans-I/O `Protocol`, plus one `write(2)`. With hundreds of
watchers that overhead *is* the live latency: every frame of a round waits for
all the others (docs/benchmarks.md, issue 11). So when nothing else is writing
to the connection, the frame is made by the connection's own `Protocol` — the
same bytes, the same compression context, as `send()` would make — and written
with one non-blocking `write`. What the socket does not take at once is handed
back, to be sent the ordinary, awaited way under the connection's send lock.

A frame below `server.compression_threshold` bytes goes uncompressed (RFC 7692:
each message says whether it is compressed, so this needs no negotiation and
leaves the compression context alone). Its bytes are then a fixed header and the
payload, made here (`text_frame`) rather than by the protocol, whose extension
would compress every message.

The conditions are websockets' own: no `send_all` in progress (`send_lock` free),
no fragmented message in progress, the connection OPEN. The attributes it relies
on are checked once (`socket_fd`); if a websockets release renames them, every
frame takes the ordinary path and nothing breaks (tests/integration/test_direct_send.py
pins them).
"""

from __future__ import annotations

import os
import struct

import trio
from websockets.protocol import State
from websockets.trio.server import ServerConnection

__all__ = ["socket_fd", "text_frame", "write_now"]

_FIN_TEXT = 0x81
"""FIN set, RSV1 clear (not compressed), opcode 1 (text)."""
_SHORT = struct.Struct("!BB")
_MEDIUM = struct.Struct("!BBH")
_LONG = struct.Struct("!BBQ")


def text_frame(payload: bytes) -> bytes:
    """An unmasked, uncompressed, final text frame (RFC 6455 §5.2): a server's frame."""
    size = len(payload)
    if size < 126:
        return _SHORT.pack(_FIN_TEXT, size) + payload
    if size < 1 << 16:
        return _MEDIUM.pack(_FIN_TEXT, 126, size) + payload
    return _LONG.pack(_FIN_TEXT, 127, size) + payload


def socket_fd(ws: ServerConnection) -> int | None:
    """The connection's socket, if it has everything `write_now` relies on."""
    stream = getattr(ws, "stream", None)
    if not (
        isinstance(stream, trio.SocketStream)
        and hasattr(ws, "send_lock")
        and hasattr(ws, "send_in_progress")
        and hasattr(ws, "protocol")
    ):
        return None
    return stream.socket.fileno()


def write_now(
    ws: ServerConnection, fd: int, frame: bytes, *, compress: bool = True
) -> bytes | None:
    """Send `frame` as one text message now, if nothing else is writing.

    `compress=False` sends it uncompressed whatever was negotiated.

    `fd` is `socket_fd(ws)`. Returns None when the fast path does not apply (send
    it with `ws.send`), else the bytes the socket did not take (`b""`: all written),
    which the caller must write next with `ws.stream.send_all` under `ws.send_lock`,
    before anything else.

    Raises:
        OSError: the socket is broken (reset, closed by the peer).
    """
    protocol = ws.protocol
    if protocol.state is not State.OPEN or ws.send_lock.locked() or ws.send_in_progress is not None:
        return None
    if compress:
        protocol.send_text(frame)
        data = b"".join(protocol.data_to_send())
    elif protocol.expect_continuation_frame:  # a fragmented message is being sent
        return None
    else:  # what the protocol still holds (a pong, say) goes first
        pending = protocol.data_to_send()
        data = text_frame(frame)
        if pending:
            data = b"".join(pending) + data
    try:
        written = os.write(fd, data)
    except BlockingIOError:
        written = 0
    return data[written:]
