"""A websocket client at the byte level, for hostile end-to-end tests: it
sends any frame (a header alone, a binary frame, invalid UTF-8, a
fragment) and reads what the server sends, close frames included.

Blocking sockets with bounded timeouts; talks to 127.0.0.1 only.
"""

import base64
import json
import os
import socket
import struct
from typing import Any

WAIT_S = 20
TEXT, BINARY, CONTINUATION, CLOSE, PING, PONG = 0x1, 0x2, 0x0, 0x8, 0x9, 0xA


class Closed(Exception):  # noqa: N818 (what happened, not an error)
    """The server closed the socket: ``code`` from its close frame, or None
    when the connection ended without one (a drop)."""

    def __init__(self, code: int | None, reason: str = "") -> None:
        super().__init__(f"closed with {code} {reason!r}")
        self.code = code
        self.reason = reason


class RawSocket:
    def __init__(
        self,
        port: int,
        token: str,
        path: str = "/ws/v1/subscribe",
        wait: float = WAIT_S,
    ) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=wait)
        self.wait = wait
        self.buffer = b""
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Authorization: Token {token}\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        head = self._read_until(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            raise ConnectionError(f"handshake refused: {head[:80]!r}")

    def __enter__(self) -> "RawSocket":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.sock.close()

    # --- sending -------------------------------------------------------------

    def send_frame(self, opcode: int, payload: bytes, *, fin: bool = True) -> None:
        """Send one masked frame."""
        mask = os.urandom(4)
        head = bytes([(0x80 if fin else 0) | opcode])
        size = len(payload)
        if size < 126:
            head += bytes([0x80 | size])
        elif size < 1 << 16:
            head += struct.pack("!BH", 0x80 | 126, size)
        else:
            head += struct.pack("!BQ", 0x80 | 127, size)
        self.sock.sendall(head + mask + _masked(payload, mask))

    def send_header(self, opcode: int, size: int) -> None:
        """Send the header of a frame of ``size`` bytes, and no payload."""
        mask = os.urandom(4)
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, size)
        self.sock.sendall(head + mask)

    def send_text(self, text: str) -> None:
        self.send_frame(TEXT, text.encode("utf-8", "surrogatepass"))

    def send_json(self, **frame: Any) -> None:
        self.send_text(json.dumps(frame))

    # --- receiving -----------------------------------------------------------

    def recv_frame(self) -> tuple[int, bytes]:
        """The next data frame from the server (pings answered); Closed at a
        close frame or the end of the connection."""
        while True:
            try:
                first, second = self._read(2)
            except Closed:
                raise Closed(None) from None
            size = second & 0x7F
            if size == 126:
                (size,) = struct.unpack("!H", self._read(2))
            elif size == 127:
                (size,) = struct.unpack("!Q", self._read(8))
            payload = self._read(size)
            opcode = first & 0x0F
            if opcode == CLOSE:
                code = (
                    struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                )
                raise Closed(code, payload[2:].decode(errors="replace"))
            if opcode == PING:
                self.send_frame(PONG, payload)
                continue
            if opcode == PONG:
                continue
            return opcode, payload

    def recv_json(self) -> dict[str, Any]:
        _, payload = self.recv_frame()
        frame: dict[str, Any] = json.loads(payload)
        return frame

    def hello(self, **fields: Any) -> dict[str, Any]:
        self.send_json(type="hello", **fields)
        return self.recv_json()

    def _read(self, size: int) -> bytes:
        while len(self.buffer) < size:
            try:
                chunk = self.sock.recv(max(65536, size - len(self.buffer)))
            except ConnectionResetError as exc:
                raise Closed(None, str(exc)) from None
            if not chunk:
                raise Closed(None, "end of stream")
            self.buffer += chunk
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def _read_until(self, end: bytes) -> bytes:
        while end not in self.buffer:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("handshake: end of stream")
            self.buffer += chunk
        head, self.buffer = self.buffer.split(end, 1)
        return head


def _masked(payload: bytes, mask: bytes) -> bytes:
    key = (mask * (len(payload) // 4 + 1))[: len(payload)]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(
        len(payload), "big"
    )
