"""Exceptions raised by the durablecache client.

Error codes and close codes: docs/protocol.md, "Errors and close codes"
(websocket protocol v1).
"""

from __future__ import annotations


class DurableCacheError(Exception):
    """An `error` frame the server sent in reply to one of our requests.

    `code` is one of the protocol's error codes (`bad_field`, `bad_regex`,
    `no_such_region`, ...); `message` is the server's human-readable text.
    """

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


class FatalConnectionError(DurableCacheError):
    """The server refused this client in a way a reconnect cannot fix.

    `close_code` is the websocket close code (4401 bad token, 4403 durable id
    owned by another user, 4409 durable id still connected after the bounded
    retries, 4410 closed by an operator, 4400 protocol, 4413 frame too big) or
    the HTTP status of a refused handshake (401, 403).
    """

    def __init__(self, close_code: int, message: str = "") -> None:
        super().__init__(f"closed_{close_code}", message)
        self.close_code = close_code


class ConnectFailedError(DurableCacheError):
    """No url of the list gave a `welcome` within `connect_timeout`."""

    def __init__(self, message: str) -> None:
        super().__init__("connect_failed", message)


class ClientClosedError(DurableCacheError):
    """The client was closed (by `close()` or a fatal error); make a new one."""

    def __init__(self, message: str = "the client is closed") -> None:
        super().__init__("client_closed", message)
