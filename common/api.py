"""REST plumbing shared by every app: the JSON error body and paging."""

import base64
import logging
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import DatabaseError
from django.db.models import QuerySet
from django.http import Http404
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import exceptions, permissions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import APIRootView
from rest_framework.views import exception_handler as drf_exception_handler

from common.errors import DomainError, ValidationError
from common.names import NAME_RE

log = logging.getLogger(__name__)

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    429: "throttled",
}


def error_response(code: str, message: str, http_status: int) -> Response:
    return Response({"error": {"code": code, "message": message}}, status=http_status)


def _flatten(detail: Any) -> str:
    if isinstance(detail, dict):
        return "; ".join(f"{k}: {_flatten(v)}" for k, v in detail.items())
    if isinstance(detail, list):
        return "; ".join(_flatten(v) for v in detail)
    return str(detail)


def _unexpected(exc: Exception) -> Response:
    """A failure no door foresaw: JSON 503 for the database, else 500."""
    if isinstance(exc, DatabaseError):
        log.warning("database unavailable: %s", exc)
        return error_response("unavailable", "the database is unavailable", 503)
    log.exception("unhandled error in the REST API", exc_info=exc)
    return error_response("internal_error", "internal server error", 500)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Render every error as {"error": {"code", "message"}}."""
    if isinstance(exc, DomainError):
        return error_response(exc.code, exc.message, exc.status)
    if isinstance(exc, RequestDataTooBig):
        return error_response("too_large", "request body too large", 413)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return _unexpected(exc)
    code = _CODES.get(response.status_code, "error")
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        response.status_code = status.HTTP_401_UNAUTHORIZED
        code = "unauthorized"
    if isinstance(exc, exceptions.ParseError):
        code = "bad_json"
    message = _flatten(getattr(exc, "detail", str(exc)))
    response.data = {"error": {"code": code, "message": message}}
    return response


@extend_schema(exclude=True)
class ApiRootView(APIRootView):
    """``/api/v1/``: the top-level endpoints, linked (DRF's API root).

    Public like the schema: it names URLs and nothing else. In a browser
    it is the browsable API's page, whose links lead on from there.
    """

    permission_classes = [permissions.AllowAny]
    api_root_dict = {
        "regions": "region-list",
        "clients": "client-list",
        "nodes": "node-list",
        "schema": "schema",
        "docs": "schema-swagger-ui",
    }


# --- Paging --------------------------------------------------------------
#
# docs/protocol.md, "REST API": lists are {"results": [...], "next": url or
# null}.
#
# Keyset paging: the cursor is an opaque URL-safe token naming the last item
# of the previous page (a key, a name or a seq), so a page never shifts when
# rows are added or removed before it.

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


@dataclass(frozen=True)
class Page:
    """The ``cursor`` and ``limit`` query parameters of one list request."""

    after: str | None
    limit: int

    def after_int(self) -> int:
        """Return the cursor as a seq (0 when absent)."""
        if self.after is None:
            return 0
        if not _is_number(self.after):
            raise ValidationError("invalid cursor", code="bad_request")
        return int(self.after)


def _is_number(text: str) -> bool:
    # ASCII only: str.isdigit() also accepts "²", which int() refuses.
    return text.isascii() and text.isdigit() and len(text) <= 18


def encode_cursor(value: str) -> str:
    return base64.urlsafe_b64encode(value.encode("utf-8")).decode("ascii").rstrip("=")


def decode_cursor(token: str) -> str:
    try:
        padded = token + "=" * (-len(token) % 4)
        raw = base64.b64decode(padded.encode("ascii"), altchars=b"-_", validate=True)
        value = raw.decode("utf-8")
    except (ValueError, UnicodeError) as exc:
        raise ValidationError("invalid cursor", code="bad_request") from exc
    # Cursors name keys, names or seqs, none of which holds a control
    # character (and PostgreSQL cannot compare a string holding U+0000).
    if any(unicodedata.category(ch) == "Cc" for ch in value):
        raise ValidationError("invalid cursor", code="bad_request")
    return value


def page_params(request: Request) -> Page:
    """Read ``?cursor=&limit=``; a bad value is a 400."""
    raw_limit = request.query_params.get("limit", str(DEFAULT_LIMIT))
    if not _is_number(raw_limit) or not 1 <= int(raw_limit) <= MAX_LIMIT:
        raise ValidationError(
            f"limit must be an integer from 1 to {MAX_LIMIT}", code="bad_request"
        )
    token = request.query_params.get("cursor")
    return Page(after=decode_cursor(token) if token else None, limit=int(raw_limit))


def keyset(
    queryset: QuerySet[Any], field: str, page: Page, *, numeric: bool = False
) -> list[Any]:
    """Return up to ``page.limit + 1`` rows of a queryset ordered by ``field``."""
    if page.after is not None:
        after = page.after_int() if numeric else page.after
        queryset = queryset.filter(**{f"{field}__gt": after})
    return list(queryset.order_by(field)[: page.limit + 1])


def paged_response(
    request: Request,
    rows: Sequence[Any],
    page: Page,
    *,
    cursor_of: Callable[[Any], Any],
    serialize: Callable[[Sequence[Any]], Any],
) -> Response:
    """Render ``rows`` (fetched with ``limit + 1``) as one page with ``next``."""
    next_url = None
    if len(rows) > page.limit:
        rows = rows[: page.limit]
        query = request.query_params.copy()
        query["cursor"] = encode_cursor(str(cursor_of(rows[-1])))
        query["limit"] = str(page.limit)
        next_url = request.build_absolute_uri(f"{request.path}?{query.urlencode()}")
    return Response({"results": serialize(rows), "next": next_url})


def paged_serializer(name: str, item: Any) -> type[serializers.Serializer[Any]]:
    """Return the schema serializer of a page of ``item`` (for drf-spectacular)."""
    fields = {
        "results": serializers.ListField(child=item, read_only=True),
        "next": serializers.URLField(
            allow_null=True,
            read_only=True,
            help_text="the URL of the next page; null on the last one",
        ),
    }
    return type(name, (serializers.Serializer,), fields)


class ErrorDetailSerializer(serializers.Serializer[Any]):
    code = serializers.CharField(
        read_only=True, help_text="machine-readable, e.g. `no_such_region`"
    )
    message = serializers.CharField(read_only=True, help_text="for humans")


class ErrorSerializer(serializers.Serializer[Any]):
    """The body of every 4xx and 5xx under /api/."""

    error = ErrorDetailSerializer(read_only=True)


# --- Schema helpers (drf-spectacular) ---

NAME_PATTERN = f"^{NAME_RE.pattern}$"  # what validate_name() accepts

PAGE_PARAMETERS = [
    OpenApiParameter(
        "cursor",
        {"type": "string"},
        description="opaque token: copy it from `next`",
    ),
    OpenApiParameter(
        "limit",
        {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_LIMIT,
            "default": DEFAULT_LIMIT,
        },
        description=f"page size, 1-{MAX_LIMIT}",
    ),
]


@extend_schema_field({"type": "string", "pattern": NAME_PATTERN})
class NameField(serializers.CharField):
    """A region name or durable id in a request body.

    Checked by the services, not here: the schema shows the rule, the field
    only wants a JSON string (DRF's CharField would turn 0 into "0"). A
    blank one goes through too, so it is refused like any other invalid name.
    """

    def run_validation(self, data: Any = serializers.empty) -> Any:
        if data == "":
            return ""
        return super().run_validation(data)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


class StrictBooleanField(serializers.BooleanField):
    """JSON ``true`` or ``false`` only (DRF's own also takes 0, "yes", "on")."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


def name_parameter(name: str, description: str) -> OpenApiParameter:
    """A path parameter holding a region name or a durable id (a value that
    cannot be one is answered like an unknown one: 404)."""
    return OpenApiParameter(
        name,
        {"type": "string", "pattern": NAME_PATTERN},
        OpenApiParameter.PATH,
        description=f"{description}: 1-128 characters `[A-Za-z0-9._:-]`",
    )


_ERRORS = {
    400: "Bad input, nothing changed: `bad_json` (unparsable body), "
    "`bad_request` (missing or mistyped field, bad paging), `bad_field` "
    "(invalid name, key or value), `bad_regex`, `bad_query`.",
    401: "`unauthorized`: no token, an invalid one, or an inactive user.",
    403: "`forbidden`: not an operator, or a session (cookie) request "
    "without its CSRF token.",
    404: "`not_found`, or `no_such_region` for a region that does not exist.",
    406: "`not_acceptable`: the Accept header asks for neither JSON nor HTML.",
    409: "`region_exists`, or `conflict`.",
    413: "`too_large`: the body is over DURABLECACHE_MAX_BODY_BYTES.",
    415: "`unsupported_media_type`: a body not sent as application/json.",
    503: "`unavailable`: the cluster database or this node's store is "
    "unreachable or failing; a write may or may not have happened.",
}


def error_responses(
    *codes: int, write: bool = False, body: bool = False
) -> dict[int, OpenApiResponse]:
    """Schema responses for the error statuses an operation can answer.

    Every operation may answer 401, 406 and 503; a ``write`` (an unsafe
    method) also 403 (CSRF, under session authentication); one that reads a
    JSON ``body`` also 400, 413 and 415.
    """
    statuses = {401, 406, 503, *codes}
    if write:
        statuses.add(403)
    if body:
        statuses |= {400, 413, 415}
    return {
        status_code: OpenApiResponse(ErrorSerializer, description=_ERRORS[status_code])
        for status_code in sorted(statuses)
    }
