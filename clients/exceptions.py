"""Errors of the clients domain; close codes per docs/protocol.md#close-codes."""

from common.errors import DomainError, NotFoundError


class BadRegexError(DomainError):
    code = "bad_regex"
    status = 400


class ClientOwnedError(DomainError):
    """The durable id belongs to another user (websocket 4403, REST 404)."""

    code = "forbidden"
    status = 403
    close_code = 4403


class ClientConnectedError(DomainError):
    code = "already_connected"
    status = 409
    close_code = 4409


class UnknownClientError(NotFoundError):
    code = "not_found"


class NodeDrainingError(DomainError):
    """This node is handing its queues over before it stops (4503)."""

    code = "unavailable"
    status = 503
    close_code = 4503


class BadQueryError(DomainError):
    """A CQ's query the server refuses (its message gives line and column)."""

    code = "bad_query"
    status = 400
