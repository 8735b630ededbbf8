"""Write websocket frames to the socket at once instead of a loop turn later.

Twisted's TCP transport never sends in ``write``: it appends the bytes to a
buffer, registers the socket for writability (``epoll_ctl``), and sends on
the next turn of the reactor, unregistering it again (a second
``epoll_ctl``) once the buffer is empty. For a fan-out of small event
frames, one per socket per event, that is three system calls, two more
passes through the loop and the buffer bookkeeping for each frame, a large
share of Daphne's main thread with many live sockets
(docs/decisions/0005-twisted-eager-writes.md).

Here a write to a websocket's connection whose buffer is empty goes to the
socket at once, as asyncio's own transports do; whatever the kernel does not
take (a full send buffer, an error) goes through Twisted's usual path, so
order, back-pressure (producers) and error handling are unchanged. Only
connections on which autobahn turned Nagle's algorithm off are eager: HTTP
responses (headers, then body) keep Twisted's coalescing.
"""

from collections.abc import Callable
from typing import Any

from twisted.internet import tcp

_EAGER = "_durablecache_eager"


def _set_tcp_no_delay(self: Any, enabled: Any) -> None:
    _plain_set_tcp_no_delay(self, enabled)
    setattr(self, _EAGER, bool(enabled))


# Connections written to at once during this turn of the loop: a second
# write to one of them in the same turn (a replay's frames, a batch's) is
# buffered behind the first and goes out with the others in one send on the
# next turn, as Twisted would have sent them all.
_this_turn: set[Any] = set()


def _after_this_turn(reactor: Any) -> None:
    """Empty ``_this_turn`` on the loop's next turn: a plain ``call_soon``
    on Daphne's asyncio reactor (a Twisted ``callLater`` made a timer per
    turn, which cost more than it saved with 20 puts in flight)."""
    loop = getattr(reactor, "_asyncioEventloop", None)
    if loop is not None:
        loop.call_soon(_next_turn)
    else:
        reactor.callLater(0, _next_turn)


def _next_turn() -> None:
    _this_turn.clear()


def _write(self: Any, data: bytes) -> None:
    if (
        getattr(self, _EAGER, False)
        and self not in _this_turn
        and not self.TLS
        and self.connected
        and not self.disconnecting
        and not self._writeDisconnected
        and not self.dataBuffer
        and not self._tempDataBuffer
        and isinstance(data, bytes)
    ):
        if not _this_turn:
            _after_this_turn(self.reactor)
        _this_turn.add(self)
        sent = self.writeSomeData(data)
        if isinstance(sent, int) and sent > 0:
            if sent == len(data):
                return
            data = data[sent:]
        # 0 (the kernel's buffer is full) or an error: Twisted buffers the
        # rest, waits for the socket and reports the error from there.
    _plain_write(self, data)


# Twisted leaves ``write`` unannotated; its signature is this one.
_plain_write: Callable[[Any, bytes], None] = tcp.Connection.write
_plain_set_tcp_no_delay = tcp.Connection.setTcpNoDelay


def eager_websocket_writes() -> None:
    """Install the eager write on Twisted's TCP connections (idempotent)."""
    if tcp.Connection.write is not _write:
        tcp.Connection.write = _write  # type: ignore[method-assign]
        tcp.Connection.setTcpNoDelay = _set_tcp_no_delay  # type: ignore[method-assign]
