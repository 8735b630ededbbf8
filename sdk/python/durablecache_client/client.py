"""The asyncio durable client: its public API.

Protocol: docs/protocol.md; client behaviour: sdk/python/README.md ("Behaviour") and
sdk/python/README.md (reconnect, ack and duplicate rules). The machinery
behind the API is in the client's layers, one module each (`_core`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from ._connection import ClientConnection, ReconnectPolicy
from ._core import Callback, logger
from ._session import SessionLostError
from .errors import ClientClosedError, DurableCacheError
from .events import CacheListener, Marker, Welcome

CONFLATE_MODES = ("server", "true", "false")


class AsyncDurableClient(ClientConnection):
    """A durable (or non-durable) subscriber to a durablecache cluster.

    `urls` is one `ws://HOST:PORT/ws/v1/subscribe` url or a list of them; the
    client cycles through them on (re)connect and follows `redirect` frames.
    `durable_id=None` makes a non-durable client. `conflate` is "server",
    "true"/"false" or a bool. Use `connect()`, `region(name, listener)`,
    `ready_for_events()` and `close(keepalive=...)`; also an async context
    manager (`close(keepalive=False)` on exit). `on_gap(gap)` hears each
    `gap` the server reports (a `Gap`); the client recovers by key by itself.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        durable_id: str | None = None,
        timeout: int = 300,
        redundancy: int = 0,
        conflate: str | bool = "server",
        token: str | None = None,
        ack_interval: float = 0.1,
        message_tracking_timeout: float = 900.0,
        *,
        max_queued: int | None = None,
        default_listener: CacheListener | None = None,
        on_fatal: Callback | None = None,
        on_reconnect: Callback | None = None,
        on_marker: Callback | None = None,
        on_error: Callback | None = None,
        on_gap: Callback | None = None,
        connect_timeout: float | None = 30.0,
        request_timeout: float = 30.0,
        close_timeout: float = 10.0,
        reconnect_initial_delay: float = 0.1,
        reconnect_max_delay: float = 5.0,
        conflict_retries: int = 40,
        conflict_delay: float = 0.25,
        websocket_options: dict[str, Any] | None = None,
    ) -> None:
        self._urls = [urls] if isinstance(urls, str) else list(urls)
        if not self._urls:
            raise ValueError("at least one url is required")
        if ack_interval <= 0:
            raise ValueError("ack_interval must be positive")
        self.conflate = _conflate_mode(conflate)
        self.durable_id = durable_id
        self.timeout = timeout
        self.redundancy = redundancy
        if max_queued is not None and max_queued < 1:
            raise ValueError("max_queued must be at least 1")
        self.max_queued = max_queued
        self._token = token
        self.ack_interval = ack_interval
        self.message_tracking_timeout = message_tracking_timeout
        self.default_listener = default_listener
        self.on_fatal = on_fatal
        self.on_reconnect = on_reconnect
        self.on_marker = on_marker
        self.on_error = on_error
        self.on_gap = on_gap
        self._request_timeout = request_timeout
        self._close_timeout = close_timeout
        self._reconnect = ReconnectPolicy(
            connect_timeout=connect_timeout,
            initial_delay=reconnect_initial_delay,
            max_delay=reconnect_max_delay,
            conflict_retries=conflict_retries,
            conflict_delay=conflict_delay,
        )
        self._ws_options = dict(websocket_options or {})
        super().__init__()

    @property
    def welcome(self) -> Welcome | None:
        """The welcome of the current (or last) session."""
        return self._welcome

    @property
    def last_marker(self) -> Marker | None:
        """The last `marker` received, in any session."""
        return self._last_marker

    @property
    def last_seq(self) -> int | None:
        """The highest `seq` delivered (any region, any session): the
        `since` this client recovers from (sdk/python/README.md,
        "Recovery"); None before the first event."""
        return self._last_seq

    @property
    def connected(self) -> bool:
        """True while a session is established and its interests restored."""
        return self._session_ready.is_set()

    @property
    def closed(self) -> bool:
        """True once `close()` was called or a fatal error stopped the client."""
        return self._closing or self._fatal is not None

    async def __aenter__(self) -> AsyncDurableClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close(keepalive=False)

    async def connect(self) -> Welcome:
        """Connect, say `hello`, and return the welcome.

        Tries the urls in turn with backoff until one answers `welcome` or
        `connect_timeout` passes (ConnectFailedError). A fatal close raises
        FatalConnectionError. Calling it again returns the current welcome.
        """
        self._check_open()
        if self._supervisor is None:
            self._dispatcher = asyncio.create_task(
                self._dispatch_loop(), name="durablecache-dispatch"
            )
            self._supervisor = asyncio.create_task(
                self._run(), name="durablecache-supervisor"
            )
        await self._first_done.wait()
        self._check_open()
        if self._welcome is None:
            raise ClientClosedError()
        return self._welcome

    async def ready_for_events(self) -> None:
        """Send `ready`: replayed events, the marker, then live events follow.

        Remembered: every later reconnect sends `ready` again.
        """
        self._check_open()
        if self._supervisor is None:
            raise DurableCacheError("not_connected", "call connect() first")
        self._ready_requested = True
        session = await self._wait_session()
        await self._send_ready(session)

    async def wait_for_marker(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 - same as DurableClient's
    ) -> Marker:
        """Wait for the `marker` of the current session and return it."""
        async with asyncio.timeout(timeout):
            while True:
                session = await self._wait_session()
                if session.marker is not None:
                    return session.marker
                waiter = asyncio.ensure_future(session.marker_event.wait())
                closed = asyncio.ensure_future(session.closed_event.wait())
                try:
                    await asyncio.wait(
                        {waiter, closed}, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    waiter.cancel()
                    closed.cancel()

    async def wait_closed(self) -> None:
        """Wait until the client stops; raise the fatal error if one stopped it."""
        await self._stopped.wait()
        if self._fatal is not None:
            raise self._fatal

    async def close(self, keepalive: bool = False) -> None:
        """Send `close`, wait for `closed`, and stop reconnecting.

        `keepalive=True` asks the server to keep a durable client's queue and
        durable registrations for `timeout` seconds. Events already received
        reach the listener and are acked first. When no socket is open at
        that moment the server is not told; a durable queue then lives until
        its timeout.
        """
        if self._closing:
            await self._stop_tasks()
            return
        self._closing = True
        session = self._session
        if session is not None and not session.closed_event.is_set():
            await self._drain_dispatch()
            await self._flush_ack(session)
            # Events the server sent before it reads `close` may still
            # arrive: handed to the listener after the final ack, they would
            # never be acked, and a kept queue would give them to the
            # application again on its next connection.
            session.final_ack_sent = True
            frame = {"type": "close", "keepalive": bool(keepalive)}
            try:
                await self._request_on(session, frame, limit=self._close_timeout)
            except (SessionLostError, TimeoutError, DurableCacheError) as exc:
                logger.warning("close was not confirmed by the server: %r", exc)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._close_timeout):
                    await session.ws.close()
        await self._stop_tasks()


def _conflate_mode(conflate: str | bool) -> str:
    """The `conflate` of `hello`: "server", "true" or "false"."""
    if isinstance(conflate, bool):
        conflate = "true" if conflate else "false"
    if conflate not in CONFLATE_MODES:
        raise ValueError(f"invalid conflate: {conflate!r}")
    return conflate
