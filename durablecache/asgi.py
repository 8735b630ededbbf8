"""ASGI entry point: HTTP to Django, websockets through origin and token checks."""

import os
from typing import Any
from urllib.parse import unquote

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "durablecache.settings")
django.setup(set_prefix=False)

from durablecache import server  # noqa: E402

server.tune_websocket_server()
django_asgi_app = server.http_handler()

# Imported after the app registry is ready (channels#2068).
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import get_resolver, path  # noqa: E402

from cache.api.urls import ENCODED_SLASH  # noqa: E402
from dashboard.consumers import DashboardConsumer  # noqa: E402
from sockets.middleware import OriginCheckMiddleware  # noqa: E402
from sockets.routing import websocket_urlpatterns  # noqa: E402


class EncodedSlashMiddleware:
    """Keep ``%2F`` inside a path segment from splitting it.

    ASGI servers decode the path before routing; an entry key may hold "/",
    and the URL's ``%2F`` is part of the key, so the raw path is re-decoded
    segment by segment with decoded slashes swapped for ENCODED_SLASH.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        raw = scope.get("raw_path")
        if raw and b"%2f" in raw.lower():
            raw_text = raw.decode("latin-1").split("?", 1)[0]
            segments = [
                unquote(seg).replace("/", ENCODED_SLASH) for seg in raw_text.split("/")
            ]
            scope = dict(scope, path="/".join(segments))
        return await self.app(scope, receive, send)


# Subscribers authenticate by token (sockets.routing), dashboard pages by
# their session; both behind the Origin check.
websocket_routes: list[Any] = [
    *websocket_urlpatterns,
    path("ws/v1/dashboard", AuthMiddlewareStack(DashboardConsumer.as_asgi())),  # type: ignore[arg-type]
]

application = ProtocolTypeRouter(
    {
        "http": EncodedSlashMiddleware(django_asgi_app),
        "websocket": OriginCheckMiddleware(URLRouter(websocket_routes)),
    }
)

# The URLconf (the REST views, DRF, drf-spectacular) loads at the first
# request otherwise; load it now, so that it is frozen with the rest.
get_resolver().url_patterns  # noqa: B018
server.freeze_startup_heap()
