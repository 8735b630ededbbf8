"""Domain errors shared by every app; doors map ``code`` and ``status``.

REST renders {"error": {"code", "message"}} with ``status``; the websocket
door sends an ``error`` frame with ``code`` (docs/protocol.md#errors).
"""


class DomainError(Exception):
    code = "bad_request"
    status = 400

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class ValidationError(DomainError):
    code = "bad_field"
    status = 400


class NotFoundError(DomainError):
    code = "not_found"
    status = 404


class PermissionDeniedError(DomainError):
    code = "forbidden"
    status = 403


class ConflictError(DomainError):
    code = "conflict"
    status = 409
