"""Event frames written to Daphne's websocket as ready-made bytes.

An event frame's text is the same for every socket that gets it (its seq is
the log's; ``sockets.streams`` builds it once per read round), and a
server's websocket frames are not masked, so the frame on the wire — header
and text — is the same bytes for all of them too. Through ASGI each socket
pays for the whole path again: Daphne's ``handle_reply`` coroutine and
checks, its ``serverSend`` (a debug log call, the UTF-8 encoding), and
autobahn's ``sendMessage``/``sendFrame`` (state checks, traffic counters,
the header built with ``struct``). Here the bytes are built once per event
and handed to autobahn's ``sendData``, which writes them to the connection
(in order with any frame autobahn has queued);
docs/decisions/0009-prebuilt-event-frames.md.

Only when nothing would differ: Daphne's protocol is behind the ASGI send,
the socket is open and connected, no message is half sent, the client did
not negotiate compression, no size limit or auto-fragmentation applies and
frames are not logged. Otherwise, and on any other server, the frame goes
through ASGI. Every frame written either way is written at once,
in the order of the calls, so the two paths interleave safely.
"""

import functools
import struct
from typing import Any

from daphne.server import Server
from daphne.ws_protocol import WebSocketProtocol


def daphne_socket(send: Any) -> WebSocketProtocol | None:
    """Daphne's protocol object behind an application's ``send``, or None
    (another server, a test communicator)."""
    if (
        isinstance(send, functools.partial)
        and getattr(send.func, "__func__", None) is Server.handle_reply
        and send.args
        and isinstance(send.args[0], WebSocketProtocol)
    ):
        return send.args[0]
    return None


def text_frame(text: str) -> bytes:
    """One unmasked, unfragmented websocket text frame (RFC 6455, 5.2)."""
    payload = text.encode()
    size = len(payload)
    if size < 126:
        header = bytes((0x81, size))
    elif size < 1 << 16:
        header = struct.pack("!BBH", 0x81, 126, size)
    else:
        header = struct.pack("!BBQ", 0x81, 127, size)
    return header + payload


def writable(sock: WebSocketProtocol, size: int) -> bool:
    """Whether ``size`` bytes of text frame may go to ``sock`` directly:
    the same bytes autobahn would write, nothing it would do besides."""
    connection = sock.server.connections.get(sock)
    return (
        connection is not None
        and "disconnected" not in connection
        and sock.state == WebSocketProtocol.STATE_OPEN
        and sock.send_state == WebSocketProtocol.SEND_STATE_GROUND
        and sock._perMessageCompress is None
        and not sock.logFrames
        and not sock.trackTimings
        and not (0 < sock.maxMessagePayloadSize < size)
        and not (0 < sock.autoFragmentSize < size)
    )
