"""A frame sent to a client that is gone is dropped, quietly: through
Daphne's real ``handle_reply``, as the consumer's error path sends it."""

import functools

import pytest
from daphne.server import Server
from daphne.ws_protocol import WebSocketProtocol

from durablecache.server.closed_sends import quiet_sends_after_close
from sockets import wire
from sockets.consumers import SubscriptionConsumer

GONE = [WebSocketProtocol.STATE_CLOSING, WebSocketProtocol.STATE_CLOSED]


@pytest.fixture
def installed(monkeypatch):
    monkeypatch.setattr(WebSocketProtocol, "serverSend", WebSocketProtocol.serverSend)
    quiet_sends_after_close()
    quiet_sends_after_close()  # twice: one layer
    assert WebSocketProtocol.serverSend.wrapped is not WebSocketProtocol.serverSend


@pytest.fixture
def daphne():
    """Daphne's server and one websocket protocol it holds, no network."""
    server = Server.__new__(Server)
    protocol = WebSocketProtocol()
    protocol.client_addr = ("127.0.0.1", 50000)
    protocol.server = server
    server.connections = {protocol: {}}
    return server, protocol


@pytest.mark.parametrize("state", GONE)
@pytest.mark.parametrize(
    "message",
    [
        {"type": "websocket.send", "text": '{"type": "error"}'},
        {"type": "websocket.send", "bytes": b"x"},
        {"type": "websocket.close", "code": 4400},
    ],
)
async def test_a_send_to_a_closing_or_closed_socket_is_a_no_op(
    installed, daphne, state, message
):
    server, protocol = daphne
    protocol.state = state
    await server.handle_reply(protocol, message)  # no Disconnected


@pytest.mark.parametrize("state", GONE)
async def test_the_consumers_error_path_on_a_gone_client_raises_nothing(
    installed, daphne, state
):
    server, protocol = daphne
    protocol.state = state
    consumer = SubscriptionConsumer()
    consumer.base_send = functools.partial(server.handle_reply, protocol)
    consumer.wire = wire.daphne_socket(consumer.base_send)
    assert consumer.wire is protocol  # the path the consumer really takes
    consumer.bad_frames = 0
    consumer.is_closing = False
    await consumer._bad_frame("q", "bad_json", "not valid JSON", fatal=True)
    assert consumer.is_closing
