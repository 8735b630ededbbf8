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


class BadFieldError(DurableCacheError):
    """`bad_field`: a field of the request is missing or invalid (for a CQ:
    its name, a `durable` the client cannot hold, or the same name with
    another definition)."""


class NoSuchRegionError(DurableCacheError):
    """`no_such_region`: the request names a region the server does not have."""


class BadRegexError(DurableCacheError):
    """`bad_regex`: an interest's pattern the server will not evaluate."""


class BadQueryError(DurableCacheError):
    """`bad_query`: a CQ's query the server refuses; `message` says where
    (`line L, column C: reason`)."""


class NotReadyError(DurableCacheError):
    """`not_ready`: the request needs `ready` first."""


class SinceTooOldError(DurableCacheError):
    """`since_too_old`: the server no longer knows the changes since that seq."""


#: The exception class of each error code; other codes are DurableCacheError.
ERROR_CLASSES: dict[str, type[DurableCacheError]] = {
    "bad_field": BadFieldError,
    "no_such_region": NoSuchRegionError,
    "bad_regex": BadRegexError,
    "bad_query": BadQueryError,
    "not_ready": NotReadyError,
    "since_too_old": SinceTooOldError,
}


def error_from_frame(code: str, message: str) -> DurableCacheError:
    """Return the exception for an `error` frame's `code` and `message`."""
    return ERROR_CLASSES.get(code, DurableCacheError)(code, message)


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
