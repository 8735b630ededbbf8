"""HTTP middleware of the project."""

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse


class BodySizeLimitMiddleware:
    """Answer 413 to a request body over DURABLECACHE_MAX_BODY_BYTES."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = settings.DURABLECACHE_MAX_BODY_BYTES
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > limit:
            return JsonResponse(
                {
                    "error": {
                        "code": "too_large",
                        "message": f"request body over {limit} bytes",
                    }
                },
                status=413,
            )
        return self.get_response(request)
