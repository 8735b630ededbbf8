"""ASGI middleware for the websocket: Origin check, then token auth.

The token comes from ``Authorization: Token <t>`` or ``?token=<t>``; when
both are given they must name the same user. Without a token, the session
cookie of a signed-in operator is accepted on a same-origin handshake (the
dashboard's Live view). The consumer closes with 4401 after the handshake
when ``scope["user"]`` is None (docs/protocol.md).
"""

from importlib import import_module
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

from channels.auth import get_user
from channels.db import database_sync_to_async
from django.conf import settings
from django.http import parse_cookie

from common.tokens import token_user

INVALID = object()


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


@database_sync_to_async
def _user_for(token: str) -> Any:
    user = token_user(token)
    return user if user is not None and user.is_active else None


async def user_from_scope(scope: dict[str, Any]) -> Any:
    """Return the user the handshake's token names, or None."""
    header = _header(scope, b"authorization")
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    tokens = []
    if header is not None:
        scheme, _, value = header.strip().partition(" ")
        if scheme.lower() != "token" or not value.strip():
            return None
        tokens.append(value.strip())
    tokens.extend(query.get("token", [])[:2])
    if not tokens:
        return await _session_operator(scope)
    users = [await _user_for(t) for t in tokens]
    if any(u is None for u in users) or len({u.pk for u in users}) != 1:
        return None
    return users[0]


async def _session_operator(scope: dict[str, Any]) -> Any:
    """Return the staff user whose session cookie a same-origin handshake
    carries, or None.

    A cookie goes with every request the browser makes, whichever page
    asks, so it is honoured only when the Origin is the node's own host:
    not for an origin merely listed in DURABLECACHE_ALLOWED_ORIGINS (those
    pages authenticate with a token), and not without an Origin. Staff
    only, as the dashboard whose pages use it. The page thus never holds
    a token (docs/dashboard.md, Live view).
    """
    origin = _header(scope, b"origin")
    host = _header(scope, b"host")
    if origin is None or host is None:
        return None
    if urlsplit(origin).netloc.lower() != host.lower():
        return None
    cookies = parse_cookie(_header(scope, b"cookie") or "")
    key = cookies.get(settings.SESSION_COOKIE_NAME)
    if not key:
        return None
    store = import_module(settings.SESSION_ENGINE).SessionStore(key)
    # channels.auth.get_user reads only the scope's session.
    user = await get_user(cast(Any, {"session": store}))
    if not (user.is_authenticated and user.is_active and user.is_staff):  # type: ignore[attr-defined]
        return None
    return user


class TokenAuthMiddleware:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        # No copy of the scope: URLRouter hands each socket a copy of its
        # own, and a second one would be carried by every open socket.
        scope["user"] = await user_from_scope(scope)
        return await self.app(scope, receive, send)


def origin_allowed(origin: str, host: str | None) -> bool:
    """Whether a handshake's Origin is the node's own host or listed."""
    allowed = settings.DURABLECACHE_ALLOWED_ORIGINS
    if "*" in allowed:
        return True
    parts = urlsplit(origin)
    netloc = parts.netloc.lower()
    if origin in allowed or netloc in [a.lower() for a in allowed]:
        return True
    if any(urlsplit(a).netloc.lower() == netloc for a in allowed if "//" in a):
        return True
    return host is not None and netloc == host.lower()


class OriginCheckMiddleware:
    """Refuse (HTTP 403) a handshake whose Origin is a foreign site."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        origin = _header(scope, b"origin")
        if origin is not None and not origin_allowed(origin, _header(scope, b"host")):
            await receive()  # the websocket.connect message
            await send({"type": "websocket.close", "code": 1008})
            return None
        return await self.app(scope, receive, send)
