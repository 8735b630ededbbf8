"""Websocket connections write at once; everything else as Twisted does."""

import asyncio
import socket

import pytest
from twisted.internet import tcp

from durablecache.server import twisted_eager_writes as eager_writes


class Reactor:
    """What a connection asks of its reactor here: watch for writability."""

    def __init__(self) -> None:
        self.writers: list[object] = []
        self.soon: list[object] = []

    def callLater(self, delay: float, call: object) -> None:  # noqa: N802
        self.soon.append(call)

    def next_turn(self) -> None:
        calls, self.soon = self.soon, []
        for call in calls:
            call()

    def addWriter(self, writer: object) -> None:  # noqa: N802 (Twisted's name)
        if writer not in self.writers:
            self.writers.append(writer)

    def removeWriter(self, writer: object) -> None:  # noqa: N802
        if writer in self.writers:
            self.writers.remove(writer)


@pytest.fixture
def installed(monkeypatch):
    """The eager write installed, Twisted's own put back after the test."""
    monkeypatch.setattr(tcp.Connection, "write", tcp.Connection.write)
    monkeypatch.setattr(tcp.Connection, "setTcpNoDelay", tcp.Connection.setTcpNoDelay)
    eager_writes.eager_websocket_writes()
    eager_writes.eager_websocket_writes()  # twice: still one layer
    assert tcp.Connection.write is eager_writes._write
    eager_writes._this_turn.clear()  # no turn of an earlier test's reactor
    yield
    eager_writes._this_turn.clear()


@pytest.fixture
def pair():
    """A loopback TCP connection: (Twisted's end, the peer's socket)."""
    listener = socket.create_server(("127.0.0.1", 0))
    peer = socket.create_connection(listener.getsockname())
    ours, _ = listener.accept()
    listener.close()
    reactor = Reactor()
    conn = tcp.Connection(ours, protocol=None, reactor=reactor)
    conn.connected = True
    yield conn, peer
    ours.close()
    peer.close()


def received(peer: socket.socket, size: int) -> bytes:
    """``size`` bytes from the peer, waiting up to 10 s for them."""
    peer.settimeout(10)
    data = b""
    while len(data) < size:
        chunk = peer.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def test_a_websocket_frame_goes_out_at_once(installed, pair):
    conn, peer = pair
    conn.setTcpNoDelay(True)  # what autobahn does for each websocket
    conn.write(b"frame-1")
    assert conn.reactor.writers == []  # never waited for the loop
    assert received(peer, 7) == b"frame-1"
    conn.reactor.next_turn()
    conn.write(b"frame-2")  # a new turn: at once again
    assert conn.reactor.writers == []
    assert received(peer, 7) == b"frame-2"


def test_frames_of_one_turn_after_the_first_share_a_send(installed, pair):
    conn, peer = pair
    conn.setTcpNoDelay(True)
    conn.write(b"frame-1")
    conn.write(b"frame-2")  # same turn: buffered, as Twisted would
    conn.write(b"frame-3")
    assert conn.reactor.writers == [conn]
    conn.reactor.next_turn()
    conn.doWrite()  # the next turn finds the socket writable
    assert received(peer, 21) == b"frame-1frame-2frame-3"
    assert conn.reactor.writers == []


def test_other_connections_keep_twisted_buffering(installed, pair):
    conn, peer = pair  # Nagle on: an HTTP response, say
    conn.write(b"headers")
    assert conn.reactor.writers == [conn]
    peer.setblocking(False)
    with pytest.raises(BlockingIOError):
        peer.recv(100)  # nothing sent before the loop's turn
    assert conn.doWrite() is None
    assert received(peer, 7) == b"headers"


def test_bytes_behind_a_buffer_wait_their_turn(installed, pair):
    conn, peer = pair
    conn.setTcpNoDelay(False)  # buffered, as above
    conn.write(b"first,")
    conn.setTcpNoDelay(True)
    conn.write(b"second")  # the buffer is not empty: behind it, not before
    assert conn.reactor.writers == [conn]
    conn.doWrite()
    assert received(peer, 12) == b"first,second"


def test_what_the_kernel_does_not_take_is_buffered_in_order(installed, pair):
    conn, peer = pair
    conn.setTcpNoDelay(True)
    conn.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    payload = bytes(range(256)) * 1024  # 256 KiB: far more than both buffers
    conn.write(payload)
    assert conn.reactor.writers == [conn]  # the rest waits for writability
    assert conn.dataBuffer or conn._tempDataBuffer
    conn.write(b"tail")  # behind the rest
    got = bytearray()
    peer.settimeout(10)
    while len(got) < len(payload) + 4:
        if conn.reactor.writers:
            conn.doWrite()
        got += peer.recv(1 << 16)
    assert bytes(got) == payload + b"tail"
    assert conn.reactor.writers == []


def test_a_closing_connection_is_not_written_to_directly(installed, pair):
    conn, peer = pair
    conn.setTcpNoDelay(True)
    conn.disconnecting = True  # loseConnection was asked: Twisted's path
    conn.write(b"late")
    assert conn.reactor.writers == [conn]
    peer.setblocking(False)
    with pytest.raises(BlockingIOError):
        peer.recv(100)  # Twisted sends it, then closes


def test_on_daphnes_asyncio_reactor_the_turn_ends_with_the_loops(installed, pair):
    conn, peer = pair
    loop = asyncio.new_event_loop()
    conn.reactor._asyncioEventloop = loop  # as Twisted's asyncio reactor has
    try:
        conn.setTcpNoDelay(True)
        conn.write(b"frame-1")
        conn.write(b"frame-2")  # buffered: the same turn
        assert conn.reactor.soon == []  # a call_soon, not a Twisted timer
        loop.run_until_complete(asyncio.sleep(0))  # the loop turns
        conn.doWrite()
        conn.write(b"frame-3")  # a new turn: at once
        assert conn.reactor.writers == []
        assert received(peer, 21) == b"frame-1frame-2frame-3"
    finally:
        loop.close()
