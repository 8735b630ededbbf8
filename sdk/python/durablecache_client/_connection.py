"""The session loop of the asyncio client: connect, restore, reconnect.

A layer of `AsyncDurableClient` (see `_core`). One supervisor task keeps
one session alive until `close()` or a fatal error; which closes are fatal
and why: sdk/python/README.md ("Fatal closes").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import Any

from websockets.exceptions import ConnectionClosed

from ._core import Callback, invoke, logger
from ._delivery import ClientDelivery
from ._session import (
    CONFLICT_CLOSE_CODE,
    FATAL_CLOSE_CODES,
    ConflictError,
    Session,
    SessionLostError,
    TransientError,
    backoff_delay,
    open_session,
)
from .errors import ConnectFailedError, DurableCacheError, FatalConnectionError


@dataclass(frozen=True)
class ReconnectPolicy:
    """How long and how often the client tries to (re)connect."""

    connect_timeout: float | None  # the first connection only; None: forever
    initial_delay: float
    max_delay: float
    conflict_retries: int
    conflict_delay: float


class _Attempts:
    """The failed connection attempts since the last session started."""

    def __init__(self, policy: ReconnectPolicy) -> None:
        self.policy = policy
        self.started = asyncio.get_running_loop().time()
        self.count = 0
        self.conflicts = 0

    async def pause(self) -> None:
        """Wait before the next attempt: the backoff, if any failed."""
        if not self.count:
            return
        delay = backoff_delay(
            self.count, self.policy.initial_delay, self.policy.max_delay
        )
        if self.conflicts:
            # 4409: the old socket's node has not been taken for dead yet;
            # ask again soon, failover is near.
            delay = min(delay, self.policy.conflict_delay)
        await asyncio.sleep(delay)

    def failed(self, exc: TransientError, *, first: bool) -> None:
        """Count a failed attempt; raise once retrying cannot help.

        `first`: no session was ever started, so `connect_timeout` applies.
        """
        self.count += 1
        if isinstance(exc, ConflictError):
            self.conflicts += 1
            if self.conflicts > self.policy.conflict_retries:
                raise FatalConnectionError(
                    CONFLICT_CLOSE_CODE, "durable id already connected"
                ) from exc
        logger.info("connection attempt failed: %s", exc)
        timeout = self.policy.connect_timeout
        elapsed = asyncio.get_running_loop().time() - self.started
        if first and timeout is not None and elapsed > timeout:
            raise ConnectFailedError(str(exc)) from exc

    def reset(self) -> None:
        self.count = self.conflicts = 0

    def lost(self) -> None:
        """A session ended: back off before the next attempt."""
        self.count = max(self.count, 1)


class ClientConnection(ClientDelivery):
    durable_id: str | None
    timeout: int
    redundancy: int
    max_queued: int | None
    conflate: str
    on_fatal: Callback | None
    on_reconnect: Callback | None
    _urls: list[str]
    _token: str | None
    _reconnect: ReconnectPolicy
    _ws_options: dict[str, Any]

    async def _run(self) -> None:
        """Keep one session alive until close() or a fatal error.

        1. Open a session (hello, following redirects) on the next url.
        2. Restore registrations, resend `ready` if it was asked for.
        3. Wait for the socket to end; classify its close code.
        4. Back off and go to 1, unless closing or fatal.
        """
        try:
            await self._keep_session()
        except DurableCacheError as exc:
            await self._fail(exc)
        except Exception as exc:  # a bug: surface it instead of dying silently
            logger.exception("durablecache client supervisor crashed")
            await self._fail(exc)
        finally:
            if self._session is not None:
                self._end_session(self._session)
            self._first_done.set()
            self._stopped_set()

    async def _keep_session(self) -> None:
        """Steps 1-4 of `_run`, until closing or a fatal error (raised)."""
        attempts = _Attempts(self._reconnect)
        while not self._closing:
            await attempts.pause()
            session = await self._open(attempts)
            if session is None:
                continue
            await self._hold(session, attempts)
            if self._closing:
                break
            code = session.close_code or 1006
            if code in FATAL_CLOSE_CODES:
                raise FatalConnectionError(code, session.close_reason)
            logger.info("connection lost (%s), reconnecting", code)
            attempts.lost()

    async def _open(self, attempts: _Attempts) -> Session | None:
        """Open a session on the next url; None after a transient failure."""
        try:
            return await open_session(
                self._next_url(),
                self._hello(),
                token=self._token,
                reply_timeout=self._request_timeout,
                websocket_options=self._ws_options,
            )
        except TransientError as exc:
            attempts.failed(exc, first=not self._first_done.is_set())
            return None

    async def _hold(self, session: Session, attempts: _Attempts) -> None:
        """Start `session`, then wait until it ends."""
        session.is_reconnect = self._first_done.is_set()
        if await self._start_session(session):
            attempts.reset()
            if not self._first_done.is_set():
                self._first_done.set()
            else:
                self.reconnects += 1
                await invoke(self.on_reconnect, session.welcome)
        await session.closed_event.wait()
        self._end_session(session)

    async def _fail(self, exc: BaseException) -> None:
        self._fatal = exc
        if not self._first_done.is_set():
            self._first_done.set()  # connect() raises it
        else:
            await invoke(self.on_fatal, exc)

    def _stopped_set(self) -> None:
        self._session_ready.clear()
        self._stopped.set()

    def _next_url(self) -> str:
        url = self._urls[self._url_index % len(self._urls)]
        self._url_index += 1
        return url

    def _hello(self) -> dict[str, Any]:
        hello = {
            "type": "hello",
            "durable_id": self.durable_id,
            "timeout": self.timeout,
            "redundancy": self.redundancy,
            "conflate": self.conflate,
        }
        if self.max_queued is not None:  # else the server's default
            hello["max_queued"] = self.max_queued
        return hello

    async def _start_session(self, session: Session) -> bool:
        """Start reading, restore registrations and ready; False if it dropped."""
        self._session = session
        self._welcome = session.welcome
        session.tasks.append(
            asyncio.create_task(self._read_loop(session), name="durablecache-read")
        )
        try:
            await self._restore_registrations(session)
            if self._ready_requested:
                await self._send_ready(session)
        except (SessionLostError, TimeoutError) as exc:
            logger.info("session lost while restoring registrations: %r", exc)
            with contextlib.suppress(Exception):
                await session.ws.close(1011, "restore failed")
            return False
        session.tasks.append(
            asyncio.create_task(self._ack_loop(session), name="durablecache-ack")
        )
        self._session_ready.set()
        return True

    def _end_session(self, session: Session) -> None:
        if self._session is session:
            self._session_ready.clear()
        for task in session.tasks:
            task.cancel()
        session.fail_pending()
        session.closed_event.set()

    async def _send_ready(self, session: Session) -> None:
        if session.ready_sent:
            return
        session.ready_sent = True
        # No reply except the marker: an `error` would come without a waiter
        # and reach on_error.
        with contextlib.suppress(ConnectionClosed):
            await session.ws.send(json.dumps({"type": "ready"}))

    async def _stop_tasks(self) -> None:
        current = asyncio.current_task()
        others = [
            task
            for task in (self._supervisor, self._dispatcher)
            if task is not None and task is not current
        ]
        for task in others:
            task.cancel()
        for task in others:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._first_done.set()
        self._stopped_set()
        if current is not None and current in (self._supervisor, self._dispatcher):
            # close() called from a listener or callback: that task ends at
            # its next await.
            current.cancel()
