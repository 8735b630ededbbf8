"""A frame over the limit closes the socket with 4413 from its header
(the end-to-end proof: tests/integration/test_hostile_transport.py)."""

from daphne.ws_protocol import WebSocketProtocol

from durablecache.server import oversized_frames
from durablecache.supervision import processes as nodes


class Protocol:
    """What the hook touches of Daphne's protocol."""

    def __init__(self) -> None:
        self.failedByMe = False
        self.utf8validateIncomingCurrentMessage = True
        self.wasMaxMessagePayloadSizeExceeded = False
        self.sent: list[tuple[int, bytes, bool]] = []

    def sendCloseFrame(self, code, reasonUtf8, isReply):  # noqa: N802, N803
        self.sent.append((code, reasonUtf8, isReply))


def test_a_message_over_the_limit_is_closed_4413_and_dropped(monkeypatch):
    monkeypatch.setattr(
        WebSocketProtocol,
        "_max_message_size_exceeded",
        WebSocketProtocol._max_message_size_exceeded,
    )
    oversized_frames.oversized_frames_close_4413()
    oversized_frames.oversized_frames_close_4413()  # twice: the same hook
    hook = WebSocketProtocol._max_message_size_exceeded
    assert hook is oversized_frames._close_too_large
    protocol = Protocol()
    hook(protocol, 1 << 30, 65536, "too big")
    assert protocol.sent == [(4413, oversized_frames.REASON, False)]
    # Nothing more of the message is kept or checked.
    assert protocol.failedByMe
    assert not protocol.utf8validateIncomingCurrentMessage


def test_daphne_refuses_frames_over_exactly_the_limit(settings):
    settings.DURABLECACHE_MAX_FRAME_BYTES = 65536
    command = nodes.daphne_command("127.0.0.1", 8000)
    for option in ("--websocket-max-message-size", "--websocket-max-frame-size"):
        assert command[command.index(option) + 1] == "65536"
