"""HTTP middleware of the project.

Both are async-capable like Django's own: under Daphne a request then
crosses to a worker thread once, for the view. One sync-only middleware
makes Django adapt the chain at each boundary (event loop -> thread for
the outer middleware -> loop for the inner ones -> thread for the view).
"""

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from whitenoise.middleware import WhiteNoiseMiddleware

Handler = Callable[[HttpRequest], Any]


class _Both:
    """Serve a sync or an async chain, whichever Django builds around us."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)

    def early(self, request: HttpRequest) -> HttpResponse | None:
        """A response that ends the request here, or None to go on."""
        raise NotImplementedError

    def __call__(self, request: HttpRequest) -> Any:
        if self.async_mode:
            return self.__acall__(request)
        return self.early(request) or self.get_response(request)

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        response = self.early(request)
        if response is not None:
            return response
        get_response: Callable[[HttpRequest], Awaitable[HttpResponse]]
        get_response = self.get_response
        return await get_response(request)


class BodySizeLimitMiddleware(_Both):
    """Answer 413 to a request body over DURABLECACHE_MAX_BODY_BYTES."""

    def early(self, request: HttpRequest) -> HttpResponse | None:
        limit = settings.DURABLECACHE_MAX_BODY_BYTES
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length <= limit:
            return None
        return JsonResponse(
            {
                "error": {
                    "code": "too_large",
                    "message": f"request body over {limit} bytes",
                }
            },
            status=413,
        )


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise, async-capable: only a static file goes to a thread."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Handler) -> None:
        super().__init__(get_response)
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)

    def _find(self, request: HttpRequest) -> Any:
        if self.autorefresh:
            return self.find_file(request.path_info)
        return self.files.get(request.path_info)

    def __call__(self, request: HttpRequest) -> Any:
        if self.async_mode:
            return self.__acall__(request)
        return super().__call__(request)

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        static_file = self._find(request)
        if static_file is not None:
            return await sync_to_async(self.serve, thread_sensitive=False)(
                static_file, request
            )
        return await self.get_response(request)
