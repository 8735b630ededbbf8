"""Close a socket whose client sends a frame over the size limit with 4413,
decided from the frame's header.

autobahn compares a frame's length (and its message's running total) with
``maxFramePayloadSize`` / ``maxMessagePayloadSize`` (Daphne's
``--websocket-max-frame-size`` / ``--websocket-max-message-size``, both
DURABLECACHE_MAX_FRAME_BYTES: ``durablecache.supervision.processes``) as soon as the
header is read, before any of the payload is buffered. It then fails the
connection, which under Daphne (``failByDrop``) drops the TCP connection:
the client sees 1006 and no reason. docs/protocol.md ("Errors and close
codes") says 4413, after the
handshake, so the client can read it: here the socket sends a close frame
with 4413 instead, and reads and drops the rest of the message (autobahn
keeps nothing of a message once ``failedByMe`` is set; its UTF-8 check is
turned off for it too, as a second failure would drop the connection and
could lose the close frame). The client's close reply ends the socket,
and the application hears of it as of any close (``websocket.disconnect``).
"""

from typing import Any

CLOSE_TOO_LARGE = 4413
REASON = b"frame over DURABLECACHE_MAX_FRAME_BYTES"


def _close_too_large(self: Any, msg_size: int, max_msg_size: int, reason: str) -> None:
    """autobahn's hook for a message over the limit, on Daphne's protocol."""
    self.wasMaxMessagePayloadSizeExceeded = True
    self.failedByMe = True  # the rest of this message is dropped as it comes
    self.utf8validateIncomingCurrentMessage = False
    # Ignored by autobahn unless the socket is open (a close already sent).
    self.sendCloseFrame(code=CLOSE_TOO_LARGE, reasonUtf8=REASON, isReply=False)


def oversized_frames_close_4413() -> None:
    """Put the hook on Daphne's websocket protocol (idempotent)."""
    from daphne.ws_protocol import WebSocketProtocol

    WebSocketProtocol._max_message_size_exceeded = _close_too_large
