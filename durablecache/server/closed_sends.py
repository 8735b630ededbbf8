"""Drop a frame the application sends to a websocket that is closing or
closed, instead of raising.

A client can vanish at any moment: its close frame, or the end of its
connection, reaches autobahn (state CLOSING or CLOSED) before Daphne tells
the application (``websocket.disconnect``, once the connection is lost).
A frame the application sends in between (the error for a frame it has
just read, an event) made autobahn raise ``Disconnected`` ("Attempt to
send on a closed protocol") through Daphne's ``handle_reply`` into the
application, which ended its socket's instance with a traceback. No one
is left to read such a frame: it is dropped here, as Daphne itself drops
a send once it knows the connection is gone. A close is already a no-op
there (autobahn ignores a close on a closing socket).
"""

from typing import Any


def quiet_sends_after_close() -> None:
    """Wrap Daphne's ``serverSend`` (idempotent)."""
    from daphne.ws_protocol import WebSocketProtocol

    original = getattr(
        WebSocketProtocol.serverSend, "wrapped", WebSocketProtocol.serverSend
    )

    def server_send(self: Any, content: Any, binary: bool = False) -> None:
        if self.state in (self.STATE_CLOSING, self.STATE_CLOSED):
            return
        original(self, content, binary)

    server_send.wrapped = original  # type: ignore[attr-defined]
    WebSocketProtocol.serverSend = server_send
