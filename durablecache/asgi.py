"""ASGI entry point: HTTP to Django, websockets through origin and token checks."""

import json
import os
from typing import Any
from urllib.parse import unquote, unquote_to_bytes

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "durablecache.settings")
django.setup(set_prefix=False)

from durablecache import server  # noqa: E402

server.tune_websocket_server()
django_asgi_app = server.http_handler()
from durablecache.server.closed_sends import quiet_sends_after_close  # noqa: E402
from durablecache.server.oversized_frames import (  # noqa: E402
    oversized_frames_close_4413,
)

# Contract, not tuning: applied whatever DURABLECACHE_SERVER_TUNING says.
oversized_frames_close_4413()
quiet_sends_after_close()

# Imported after the app registry is ready (channels#2068).
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import Resolver404, get_resolver, path, resolve  # noqa: E402

from cache.api.urls import ENCODED_SLASH  # noqa: E402
from dashboard.consumers import DashboardConsumer  # noqa: E402
from sockets.middleware import OriginCheckMiddleware  # noqa: E402
from sockets.routing import websocket_urlpatterns  # noqa: E402


class EncodedSlashMiddleware:
    """Keep ``%2F`` inside a path segment from splitting it.

    ASGI servers decode the path before routing; an entry key may hold "/",
    and the URL's ``%2F`` is part of the key, so the raw path is re-decoded
    segment by segment with decoded slashes swapped for ENCODED_SLASH.

    A request naming an entry through a path that would make it name
    another key is refused here with 400 and reaches no view
    (docs/protocol.md, "Hostile input"):
    one that holds ENCODED_SLASH itself (sent as ``%1F``, or raw), which
    the converter would read as a slash, and one whose percent-escapes are
    not UTF-8 (``%FF``, an overlong ``%C0%AF``), which the server decoded
    to U+FFFD, the key ``%EF%BF%BD`` names. Elsewhere (a region name, a
    durable id) such a path is left as it is, and those views refuse it
    as a name nothing can have.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        refusal = _refusal(scope)
        raw = scope.get("raw_path")
        if raw and b"%2f" in raw.lower():
            raw_text = raw.decode("latin-1").split("?", 1)[0]
            segments = [
                unquote(seg).replace("/", ENCODED_SLASH) for seg in raw_text.split("/")
            ]
            scope = dict(scope, path="/".join(segments))
        if refusal and _names_an_entry(scope):
            return await _refuse_key(send, refusal)
        return await self.app(scope, receive, send)


def _refusal(scope: dict[str, Any]) -> str | None:
    """Why a key in this path could not be the one the client sent, if so."""
    path = scope.get("path", "")
    if ENCODED_SLASH in path:
        return "key must not contain control characters"
    raw = scope.get("raw_path")
    if "\ufffd" in path and raw:
        try:
            unquote_to_bytes(raw.split(b"?", 1)[0]).decode("utf-8")
        except UnicodeDecodeError:
            return "key must be UTF-8, percent-encoded"
    return None


def _names_an_entry(scope: dict[str, Any]) -> bool:
    """Whether the path routes to a view of one entry (a ``key`` in it)."""
    path = scope["path"].removeprefix(scope.get("root_path", ""))
    try:
        match = resolve(path)
    except Resolver404:
        return False
    return "key" in match.kwargs


async def _refuse_key(send: Any, message: str) -> None:
    body = json.dumps({"error": {"code": "bad_field", "message": message}}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": body})


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
