"""The node's HTTP handler: Django's ASGI handler, one thread hop per request.

Django's own ``ASGIHandler`` runs every request in a fresh
``ThreadSensitiveContext`` (a new thread, and with it a new database
connection, per request) and, with an async middleware chain, crosses
from the event loop to that thread twice per ``MiddlewareMixin``
middleware (``process_request`` and ``process_response``) and once more
for a sync view: about fifteen crossings per REST call with our
settings. Profiled under Daphne, a ``GET /healthz/`` cost ~8 ms of CPU.

``PooledASGIHandler`` reads the body on the event loop, then runs the
whole sync chain (middleware and view, as under WSGI) in one call on a
fixed pool of threads, so threads and their database connections
(``CONN_MAX_AGE``) live across requests. Views here are all sync; an
async view would still work (Django adapts it), just without the gain.
"""

import asyncio
import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.base import BaseHandler
from django.http import FileResponse
from django.urls import set_script_prefix

from common.threads import Connections


class _PoolThread(threading.local):
    """What each pool thread keeps of its own: its connection checks."""

    def __init__(self) -> None:
        self.checks = Connections()


class PooledASGIHandler(ASGIHandler):
    """Serve HTTP with the sync middleware chain on a fixed thread pool."""

    def __init__(self, threads: int | None = None) -> None:
        BaseHandler.__init__(self)
        self.load_middleware(is_async=False)
        self.pool = ThreadPoolExecutor(
            threads or settings.DURABLECACHE_HTTP_THREADS,
            thread_name_prefix="http",
        )
        self._threads = _PoolThread()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"HTTP only, not {scope['type']}")
        await self.handle(scope, receive, send)

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        loop = asyncio.get_running_loop()
        try:
            response: Any = await loop.run_in_executor(
                self.pool,
                contextvars.copy_context().run,
                self._respond,
                scope,
                body_file,
            )
            try:
                if response.streaming and not response.is_async:
                    await self._send_sync_stream(response, send)
                else:
                    await self.send_response(response, send)
            except asyncio.CancelledError:
                pass  # the client went away while the answer was written
            finally:
                if response.streaming:
                    await loop.run_in_executor(self.pool, response.close)
        finally:
            body_file.close()

    async def _send_sync_stream(self, response: Any, send: Any) -> None:
        """A streamed response with a sync iterator (a static file): each
        chunk is read on the pool, the sends stay on the loop."""
        loop = asyncio.get_running_loop()
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": _headers(response),
            }
        )
        parts = iter(response.streaming_content)
        while True:
            part = await loop.run_in_executor(self.pool, next, parts, None)
            if part is None:
                break
            for chunk, _ in self.chunk_bytes(part):
                await send(
                    {"type": "http.response.body", "body": chunk, "more_body": True}
                )
        await send({"type": "http.response.body"})

    def _respond(self, scope: dict[str, Any], body_file: Any) -> Any:
        """What a WSGI server's thread does for one request."""
        set_script_prefix(get_script_prefix(scope))
        checks = self._threads.checks
        try:
            # Receivers include close_old_connections: this thread's
            # connections, their health check armed; a busy thread's
            # healthy ones skip it (common.threads.Connections: on
            # PostgreSQL a ``SELECT 1`` round trip per request otherwise).
            signals.request_started.send(sender=self.__class__, scope=scope)
            checks.request_started()
            request, error_response = self.create_request(scope, body_file)
            response: Any
            if request is None:
                response = error_response
            else:
                response = self.get_response(request)
                response._handler_class = self.__class__
                if isinstance(response, FileResponse):
                    response.block_size = self.chunk_size
            if not response.streaming:
                # The content is bytes already; request_finished (connections
                # returned, obsolete ones closed) runs in this same thread.
                response.close()
            return response
        finally:
            checks.request_finished()


def _headers(response: Any) -> list[tuple[bytes, bytes]]:
    """Response headers and cookies as ASGI wants them (as Django does)."""
    headers = [
        (
            bytes(h.encode("ascii") if isinstance(h, str) else h),
            bytes(v.encode("latin1") if isinstance(v, str) else v),
        )
        for h, v in response.items()
    ]
    for cookie in response.cookies.values():
        headers.append(
            (b"Set-Cookie", cookie.output(header="").encode("ascii").strip())
        )
    return headers
