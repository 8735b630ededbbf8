"""Event frames as ready-made bytes for Daphne's sockets (sockets.wire)."""

import functools

import pytest
from daphne.server import Server
from daphne.ws_protocol import WebSocketProtocol
from websockets.frames import Frame, Opcode
from websockets.streams import StreamReader

from sockets import wire


def parsed(data: bytes) -> Frame:
    """The frame a client reads from ``data`` (the websockets library's
    parser), checking nothing is left over."""
    reader = StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    parser = Frame.parse(reader.read_exact, mask=False)
    with pytest.raises(StopIteration) as done:
        next(parser)
    assert not reader.buffer  # nothing left over
    return done.value.value


def parsed_all(data: bytes) -> list[Frame]:
    """The frames a client reads from ``data``, in order, checking nothing
    is left over."""
    reader = StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    frames = []
    while reader.buffer:
        parser = Frame.parse(reader.read_exact, mask=False)
        with pytest.raises(StopIteration) as done:
            next(parser)
        frames.append(done.value.value)
    return frames


@pytest.mark.parametrize("size", [0, 5, 125, 126, 65535, 65536, 200_000])
def test_a_text_frame_reads_back_whole(size):
    text = ("é" + "x" * size)[:size] if size else ""
    frame = parsed(wire.text_frame(text))
    assert frame.opcode == Opcode.TEXT
    assert frame.fin
    assert (frame.rsv1, frame.rsv2, frame.rsv3) == (False, False, False)
    assert frame.data.decode() == text


def open_socket(server: Server) -> WebSocketProtocol:
    """Daphne's protocol as it is once a socket is open (no transport)."""
    sock = WebSocketProtocol.__new__(WebSocketProtocol)
    sock.server = server
    sock.state = WebSocketProtocol.STATE_OPEN
    sock.send_state = WebSocketProtocol.SEND_STATE_GROUND
    sock._perMessageCompress = None
    sock.logFrames = False
    sock.trackTimings = False
    sock.maxMessagePayloadSize = 0
    sock.autoFragmentSize = 0
    server.connections[sock] = {"connected": 0.0}
    return sock


def test_daphnes_socket_is_found_behind_its_send(server):
    sock = open_socket(server)
    assert wire.daphne_socket(functools.partial(server.handle_reply, sock)) is sock


@pytest.mark.parametrize(
    "send",
    [
        lambda message: None,  # another server
        functools.partial(print, "x"),  # a partial of something else
    ],
)
def test_other_sends_have_no_socket(send):
    assert wire.daphne_socket(send) is None


def test_an_open_plain_socket_is_writable(server):
    assert wire.writable(open_socket(server), 100)


@pytest.mark.parametrize(
    "change",
    [
        {"state": WebSocketProtocol.STATE_CLOSING},
        {"state": WebSocketProtocol.STATE_CONNECTING},
        {"send_state": WebSocketProtocol.SEND_STATE_INSIDE_MESSAGE},
        {"_perMessageCompress": object()},  # the client negotiated deflate
        {"logFrames": True},
        {"trackTimings": True},
        {"maxMessagePayloadSize": 50},
        {"autoFragmentSize": 50},
    ],
    ids=lambda change: next(iter(change)),
)
def test_anything_autobahn_would_do_differently_takes_the_asgi_path(server, change):
    sock = open_socket(server)
    for name, value in change.items():
        setattr(sock, name, value)
    assert not wire.writable(sock, 100)


def test_a_socket_daphne_counts_as_gone_takes_the_asgi_path(server):
    sock = open_socket(server)
    server.connections[sock]["disconnected"] = 1.0
    assert not wire.writable(sock, 100)
    del server.connections[sock]
    assert not wire.writable(sock, 100)


class Recorded:
    """A consumer's two ways out: Daphne's socket and the ASGI send."""

    def __init__(self, server: Server, *, wire_found: bool = True) -> None:
        from sockets.consumers import SubscriptionConsumer

        self.direct: list[bytes] = []
        self.asgi: list[dict] = []
        self.sock = open_socket(server)
        self.sock.sendData = self.direct.append

        async def base_send(message: dict) -> None:
            self.asgi.append(message)

        self.consumer = SubscriptionConsumer()
        self.consumer.base_send = base_send
        self.consumer.wire = self.sock if wire_found else None


async def test_a_reply_goes_straight_to_an_open_socket(server):
    out = Recorded(server)
    await out.consumer.send('{"type":"written"}')
    assert out.direct == [wire.text_frame('{"type":"written"}')]
    assert out.asgi == []


async def test_a_reply_to_a_socket_autobahn_must_handle_goes_through_asgi(server):
    out = Recorded(server)
    out.sock.state = WebSocketProtocol.STATE_CLOSING
    await out.consumer.send("late")
    assert out.direct == []
    assert out.asgi == [{"type": "websocket.send", "text": "late"}]


async def test_without_daphnes_socket_replies_go_through_asgi(server):
    out = Recorded(server, wire_found=False)
    await out.consumer.send("x")
    await out.consumer.send(bytes_data=b"\x00")
    assert out.direct == []
    assert out.asgi == [
        {"type": "websocket.send", "text": "x"},
        {"type": "websocket.send", "bytes": b"\x00"},
    ]


async def test_a_reply_that_closes_goes_through_asgi(server):
    out = Recorded(server)
    await out.consumer.send("bye", close=True)
    assert out.direct == []
    assert out.asgi == [
        {"type": "websocket.send", "text": "bye"},
        {"type": "websocket.close"},
    ]


async def test_empty_text_goes_through_asgi_which_sends_nothing(server):
    out = Recorded(server)
    await out.consumer.send("")
    assert out.direct == []
    assert out.asgi == [{"type": "websocket.send", "text": ""}]
