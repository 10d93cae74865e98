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

The conditions are websockets' own: no `send_all` in progress (`send_lock` free),
no fragmented message in progress, the connection OPEN. The attributes it relies
on are checked once (`socket_fd`); if a websockets release renames them, every
frame takes the ordinary path and nothing breaks (tests/unit/test_direct_send.py
pins them).
"""

from __future__ import annotations

import os

import trio
from websockets.protocol import State
from websockets.trio.server import ServerConnection

__all__ = ["socket_fd", "write_now"]


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


def write_now(ws: ServerConnection, fd: int, frame: bytes) -> bytes | None:
    """Send `frame` as one text message now, if nothing else is writing.

    `fd` is `socket_fd(ws)`. Returns None when the fast path does not apply (send
    it with `ws.send`), else the bytes the socket did not take (`b""`: all written),
    which the caller must write next with `ws.stream.send_all` under `ws.send_lock`,
    before anything else.

    Raises:
        OSError: the socket is broken (reset, closed by the peer).
    """
    if (
        ws.protocol.state is not State.OPEN
        or ws.send_lock.locked()
        or ws.send_in_progress is not None
    ):
        return None
    ws.protocol.send_text(frame)
    data = b"".join(ws.protocol.data_to_send())
    try:
        written = os.write(fd, data)
    except BlockingIOError:
        written = 0
    return data[written:]
