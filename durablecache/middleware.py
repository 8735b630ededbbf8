"""HTTP middleware of the project.

Under Daphne the whole chain runs sync, in one call on the HTTP thread
pool (durablecache.server.pooled_http.PooledASGIHandler), so these are plain sync
middleware like Django's own.
"""

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from common import logs

Handler = Callable[[HttpRequest], HttpResponse]


class BodySizeLimitMiddleware:
    """Answer 413 to a request body over DURABLECACHE_MAX_BODY_BYTES."""

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = settings.DURABLECACHE_MAX_BODY_BYTES
        try:
            length = int(request.headers.get("content-length") or 0)
        except ValueError:
            length = 0
        if length <= limit:
            return self.get_response(request)
        return JsonResponse(
            {
                "error": {
                    "code": "too_large",
                    "message": f"request body over {limit} bytes",
                }
            },
            status=413,
        )


class DurableIdLogMiddleware:
    """A request on ``clients/{id}/…`` logs with that durable id
    (common.logs), for that request only."""

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        token = logs.durable_id.set(None)
        try:
            return self.get_response(request)
        finally:
            logs.durable_id.reset(token)

    def process_view(
        self,
        request: HttpRequest,
        view: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        durable_id = kwargs.get("durable_id")
        if isinstance(durable_id, str):
            logs.durable_id.set(durable_id)
