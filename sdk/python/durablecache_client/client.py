"""The asyncio durable client: connection, registrations, delivery, acks.

Protocol: DESIGN.md section 3; client behaviour: DESIGN.md section 6 and
sdk/python/README.md (reconnect, ack and duplicate rules).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from websockets.exceptions import ConnectionClosed

from ._dedup import SeenIds
from ._registrations import Registration, cq_key, interest_key, selector_matcher
from ._session import (
    CONFLICT_CLOSE_CODE,
    FATAL_CLOSE_CODES,
    ConflictError,
    Pending,
    Session,
    SessionLostError,
    TransientError,
    backoff_delay,
    open_session,
)
from .errors import (
    ClientClosedError,
    ConnectFailedError,
    DurableCacheError,
    FatalConnectionError,
)
from .events import (
    LISTENER_METHODS,
    CacheListener,
    EntryEvent,
    Marker,
    RegionLiveEvent,
    Welcome,
)
from .region import POLICIES, Region

logger = logging.getLogger("durablecache_client")

Callback = Callable[..., Any]


async def _invoke(fn: Callback | None, *args: Any) -> None:
    """Call a listener or callback, awaiting it if needed; log its failure."""
    if fn is None:
        return
    try:
        result = fn(*args)
        if inspect.isawaitable(result):
            await result
    except Exception:
        logger.exception("listener/callback %r raised", fn)


class AsyncDurableClient:
    """A durable (or non-durable) subscriber to a durablecache cluster.

    `urls` is one `ws://HOST:PORT/ws/v1/subscribe` url or a list of them; the
    client cycles through them on (re)connect and follows `redirect` frames.
    `durable_id=None` makes a non-durable client. `conflate` is "server",
    "true"/"false" or a bool. Use `connect()`, `region(name, listener)`,
    `ready_for_events()` and `close(keepalive=...)`; also an async context
    manager (`close(keepalive=False)` on exit).
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
        default_listener: CacheListener | None = None,
        on_fatal: Callback | None = None,
        on_reconnect: Callback | None = None,
        on_marker: Callback | None = None,
        on_error: Callback | None = None,
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
        if isinstance(conflate, bool):
            conflate = "true" if conflate else "false"
        if conflate not in ("server", "true", "false"):
            raise ValueError(f"invalid conflate: {conflate!r}")
        self.durable_id = durable_id
        self.timeout = timeout
        self.redundancy = redundancy
        self.conflate = conflate
        self._token = token
        self.ack_interval = ack_interval
        self.message_tracking_timeout = message_tracking_timeout
        self.default_listener = default_listener
        self.on_fatal = on_fatal
        self.on_reconnect = on_reconnect
        self.on_marker = on_marker
        self.on_error = on_error
        self._connect_timeout = connect_timeout
        self._request_timeout = request_timeout
        self._close_timeout = close_timeout
        self._initial_delay = reconnect_initial_delay
        self._max_delay = reconnect_max_delay
        self._conflict_retries = conflict_retries
        self._conflict_delay = conflict_delay
        self._ws_options = dict(websocket_options or {})

        self._regions: dict[str, Region] = {}
        self._registrations: dict[tuple[Any, ...], Registration] = {}
        self._ready_requested = False
        self._ids = itertools.count(1)
        self._url_index = 0
        self._seen = SeenIds(message_tracking_timeout)
        self.duplicates_dropped = 0
        self.reconnects = 0

        self._session: Session | None = None
        self._welcome: Welcome | None = None
        self._last_marker: Marker | None = None
        self._closing = False
        self._fatal: BaseException | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        # asyncio primitives bind to the loop that first uses them (3.10+).
        self._first_done = asyncio.Event()
        self._session_ready = asyncio.Event()
        self._stopped = asyncio.Event()
        self._dispatch_queue: asyncio.Queue[tuple[Session, str, Any]] = asyncio.Queue()

    # -- public API ------------------------------------------------------------

    @property
    def welcome(self) -> Welcome | None:
        """The welcome of the current (or last) session."""
        return self._welcome

    @property
    def last_marker(self) -> Marker | None:
        """The last `marker` received, in any session."""
        return self._last_marker

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

    def region(self, name: str, listener: CacheListener | None = None) -> Region:
        """Return the handle of region `name`, setting its listener if given."""
        region = self._regions.get(name)
        if region is None:
            region = Region(
                self, name, listener, tombstone_ttl=self.message_tracking_timeout
            )
            self._regions[name] = region
        elif listener is not None:
            region.listener = listener
        return region

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

    async def close_cq(self, name: str) -> None:
        """Close the continuous query `name` (registered on any region)."""
        await self._app_request({"type": "close_cq", "name": name})
        self._registrations.pop(cq_key(name), None)

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
            # arrive: handed to the listener after the final ack, they were
            # never acked, and a kept queue gave them to the application
            # again on its next connection.
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

    # -- registrations --------------------------------------------------------

    async def _register_interest(
        self, region: Region, selector: dict[str, Any], *, durable: bool, policy: str
    ) -> int:
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, not {policy!r}")
        frame = {
            "type": "register_interest",
            "region": region.name,
            **selector,
            "durable": bool(durable),
            "policy": policy,
        }
        reply = await self._app_request(frame, region)
        self._registrations[interest_key(region.name, selector)] = Registration(
            region.name, frame, bool(durable), policy
        )
        return int(reply.get("count", 0))

    async def _unregister_interest(
        self, region: Region, selector: dict[str, Any]
    ) -> None:
        frame = {"type": "unregister_interest", "region": region.name, **selector}
        try:
            await self._app_request(frame)
        finally:
            self._registrations.pop(interest_key(region.name, selector), None)

    async def _register_cq(
        self, region: Region, name: str, query: str, *, durable: bool
    ) -> int:
        frame = {
            "type": "register_cq",
            "name": name,
            "region": region.name,
            "query": query,
            "durable": bool(durable),
        }
        reply = await self._app_request(frame, region)
        self._registrations[cq_key(name)] = Registration(
            region.name, frame, bool(durable), "keys_values"
        )
        return int(reply.get("count", 0))

    async def _restore_registrations(self, session: Session) -> None:
        """Re-send every registration on a new session, in original order.

        Idempotent on the server. When no replay will cover the time away
        (the queue is new or lost, or the interest was not durable), cached
        keys that the fresh image no longer holds are dropped.
        """
        lost_queue = session.welcome.pending_event_count < 0
        for registration in list(self._registrations.values()):
            region = self.region(registration.region)
            try:
                reply = await self._request_on(
                    session, dict(registration.frame), region
                )
            except DurableCacheError as exc:
                logger.warning("re-registration %s failed: %s", registration, exc)
                await _invoke(self.on_error, exc)
                continue
            frame = registration.frame
            prune = (
                session.is_reconnect
                and frame["type"] == "register_interest"
                and registration.policy != "none"
                and (lost_queue or not registration.durable)
            )
            matcher = selector_matcher(frame) if prune else None
            if matcher is not None:
                region._prune_absent(reply.get("_image_keys", set()), matcher)

    # -- requests -------------------------------------------------------------

    async def _app_request(
        self, frame: dict[str, Any], region: Region | None = None
    ) -> dict[str, Any]:
        """Send a request on the live session, retrying on the next one if lost."""
        self._check_open()
        async with asyncio.timeout(self._request_timeout):
            while True:
                session = await self._wait_session()
                try:
                    return await self._request_on(session, dict(frame), region)
                except SessionLostError:
                    # send() on a closed socket fails without yielding: wait
                    # for the reader to see the close, or this loop would spin
                    # and starve it.
                    await session.closed_event.wait()

    async def _request_on(
        self,
        session: Session,
        frame: dict[str, Any],
        region: Region | None = None,
        limit: float | None = None,
    ) -> dict[str, Any]:
        """Send one request on `session` and return its reply frame.

        The reply of register requests carries the collected image keys under
        the private key `_image_keys`.
        """
        request_id = f"r{next(self._ids)}"
        frame["id"] = request_id
        future: asyncio.Future[dict[str, Any]] = (
            asyncio.get_running_loop().create_future()
        )
        pending = Pending(frame["type"], region, future)
        session.pending[request_id] = pending
        try:
            if session.closed_event.is_set():
                raise SessionLostError
            try:
                await session.ws.send(json.dumps(frame))
            except ConnectionClosed as exc:
                raise SessionLostError from exc
            async with asyncio.timeout(limit or self._request_timeout):
                reply = await future
        finally:
            session.pending.pop(request_id, None)
        reply["_image_keys"] = pending.image_keys
        return reply

    async def _wait_session(self) -> Session:
        """Return the live session, waiting through a reconnect if needed."""
        while True:
            self._check_open()
            if self._supervisor is None:
                raise DurableCacheError("not_connected", "call connect() first")
            session = self._session
            if (
                self._session_ready.is_set()
                and session is not None
                and not session.closed_event.is_set()
            ):
                return session
            ready = asyncio.ensure_future(self._session_ready.wait())
            stopped = asyncio.ensure_future(self._stopped.wait())
            try:
                await asyncio.wait(
                    {ready, stopped}, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                ready.cancel()
                stopped.cancel()

    def _check_open(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._closing:
            raise ClientClosedError()

    # -- connection supervisor ------------------------------------------------

    async def _run(self) -> None:
        """Keep one session alive until close() or a fatal error.

        1. Open a session (hello, following redirects) on the next url.
        2. Restore registrations, resend `ready` if it was asked for.
        3. Wait for the socket to end; classify its close code.
        4. Back off and go to 1, unless closing or fatal.
        """
        loop = asyncio.get_running_loop()
        started = loop.time()
        attempt = 0
        conflicts = 0
        try:
            while not self._closing:
                if attempt:
                    delay = backoff_delay(attempt, self._initial_delay, self._max_delay)
                    if conflicts:
                        # 4409: our old socket's node has not been taken for
                        # dead yet; ask again soon, failover is near.
                        delay = min(delay, self._conflict_delay)
                    await asyncio.sleep(delay)
                try:
                    session = await open_session(
                        self._next_url(),
                        self._hello(),
                        token=self._token,
                        reply_timeout=self._request_timeout,
                        websocket_options=self._ws_options,
                    )
                except TransientError as exc:
                    attempt += 1
                    if isinstance(exc, ConflictError):
                        conflicts += 1
                        if conflicts > self._conflict_retries:
                            raise FatalConnectionError(
                                CONFLICT_CLOSE_CODE, "durable id already connected"
                            ) from exc
                    logger.info("connection attempt failed: %s", exc)
                    if (
                        not self._first_done.is_set()
                        and self._connect_timeout is not None
                        and loop.time() - started > self._connect_timeout
                    ):
                        raise ConnectFailedError(str(exc)) from exc
                    continue
                session.is_reconnect = self._first_done.is_set()
                if await self._start_session(session):
                    attempt, conflicts = 0, 0
                    if not self._first_done.is_set():
                        self._first_done.set()
                    else:
                        self.reconnects += 1
                        await _invoke(self.on_reconnect, session.welcome)
                await session.closed_event.wait()
                self._end_session(session)
                if self._closing:
                    break
                code = session.close_code or 1006
                if code in FATAL_CLOSE_CODES:
                    raise FatalConnectionError(code, session.close_reason)
                logger.info("connection lost (%s), reconnecting", code)
                attempt = max(attempt, 1)
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

    async def _fail(self, exc: BaseException) -> None:
        self._fatal = exc
        if not self._first_done.is_set():
            self._first_done.set()  # connect() raises it
        else:
            await _invoke(self.on_fatal, exc)

    def _stopped_set(self) -> None:
        self._session_ready.clear()
        self._stopped.set()

    def _next_url(self) -> str:
        url = self._urls[self._url_index % len(self._urls)]
        self._url_index += 1
        return url

    def _hello(self) -> dict[str, Any]:
        return {
            "type": "hello",
            "durable_id": self.durable_id,
            "timeout": self.timeout,
            "redundancy": self.redundancy,
            "conflate": self.conflate,
        }

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

    # -- reading and dispatching ----------------------------------------------

    async def _read_loop(self, session: Session) -> None:
        code, reason = 1006, ""
        try:
            while True:
                try:
                    raw = await session.ws.recv()
                except ConnectionClosed as exc:
                    if exc.rcvd is not None:
                        code, reason = exc.rcvd.code, exc.rcvd.reason
                    return
                if not isinstance(raw, str):
                    logger.warning("ignoring a binary frame")
                    continue
                try:
                    frame = json.loads(raw)
                except ValueError:
                    logger.warning("ignoring a frame that is not JSON: %.200r", raw)
                    continue
                if not isinstance(frame, dict):
                    continue
                try:
                    await self._handle_frame(session, frame)
                except Exception:  # one malformed frame must not end the session
                    logger.exception("could not handle frame %.200r", frame)
        finally:
            session.close_code, session.close_reason = code, reason
            if self._session is session:
                self._session_ready.clear()
            # Fail waiting requests at once: the supervisor may itself be
            # waiting on one (restoring registrations).
            session.fail_pending()
            session.closed_event.set()

    async def _handle_frame(self, session: Session, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "event":
            try:
                event = EntryEvent.from_frame(frame)
            except (KeyError, TypeError, ValueError):
                logger.warning("ignoring a malformed event: %.200r", frame)
                return
            self._dispatch_queue.put_nowait((session, "event", event))
        elif kind == "marker":
            self._dispatch_queue.put_nowait(
                (session, "marker", Marker.from_frame(frame))
            )
        elif kind == "image":
            self._apply_image(session, frame)
        elif kind == "error":
            pending = session.pending.get(str(frame.get("id")))
            exc = DurableCacheError(
                str(frame.get("code")), str(frame.get("message", ""))
            )
            if pending is not None and not pending.future.done():
                pending.future.set_exception(exc)
            else:
                logger.warning("server error: %s", exc)
                await _invoke(self.on_error, exc)
        elif kind in (
            "interest_registered",
            "interest_unregistered",
            "cq_registered",
            "cq_closed",
            "written",
            "closed",
        ):
            pending = session.pending.get(str(frame.get("id")))
            if pending is None and kind == "closed":
                pending = next(
                    (p for p in session.pending.values() if p.kind == "close"), None
                )
            if pending is not None and not pending.future.done():
                pending.future.set_result(frame)
        else:
            logger.debug("ignoring frame %.200r", frame)

    def _apply_image(self, session: Session, frame: dict[str, Any]) -> None:
        pending = session.pending.get(str(frame.get("id")))
        name = frame.get("region") or (
            pending.region.name if pending and pending.region else None
        )
        if not name:
            logger.warning("ignoring an image without region: %.200r", frame)
            return
        region = self.region(str(name))
        keys = pending.image_keys if pending is not None else set()
        for entry in frame.get("entries") or []:
            key = entry.get("key")
            if key is None:
                continue
            keys.add(key)
            region._apply_image_entry(
                key, entry.get("value"), int(entry.get("version", 0))
            )
        for key in frame.get("keys") or []:
            keys.add(key)
            region._apply_image_key(key)

    async def _dispatch_loop(self) -> None:
        """Deliver events and markers in order, off the socket reader.

        A separate task, so a listener may await client requests without
        blocking the reader that would carry their replies.
        """
        while True:
            session, kind, item = await self._dispatch_queue.get()
            if kind == "event" and session.final_ack_sent:
                self._dispatch_queue.task_done()
                continue
            try:
                if kind == "event":
                    await self._deliver_event(item)
                else:
                    await self._deliver_marker(session, item)
            except Exception:
                logger.exception("delivering %s failed", kind)
            finally:
                # Acked only once delivered (at-least-once to the listener),
                # and even when delivery failed, or it would come back forever.
                if kind == "event" and (
                    session.ack_high is None or item.seq > session.ack_high
                ):
                    session.ack_high = item.seq
                self._dispatch_queue.task_done()

    async def _deliver_event(self, event: EntryEvent) -> None:
        if self._seen.check_and_add(event.id):
            self.duplicates_dropped += 1
            logger.debug("dropping duplicate event %s", event.id)
            return
        region = self.region(event.region)
        region._apply_event(event)
        listener = region.listener or self.default_listener
        method_name = LISTENER_METHODS.get(event.op)
        if listener is None or method_name is None:
            return
        await _invoke(getattr(listener, method_name, None), event)

    async def _deliver_marker(self, session: Session, marker: Marker) -> None:
        session.marker = marker
        self._last_marker = marker
        for name in marker.regions:
            region = self._regions.get(name)
            listener = region.listener if region is not None else None
            listener = listener or self.default_listener
            if listener is not None:
                live = RegionLiveEvent(name, marker.replayed)
                await _invoke(getattr(listener, "after_region_live", None), live)
        await _invoke(self.on_marker, marker)
        session.marker_event.set()

    async def _drain_dispatch(self) -> None:
        """Let queued events reach the listener (unless called from one)."""
        if asyncio.current_task() is self._dispatcher:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._close_timeout):
                await self._dispatch_queue.join()

    # -- acks -----------------------------------------------------------------

    async def _ack_loop(self, session: Session) -> None:
        while True:
            await asyncio.sleep(self.ack_interval)
            await self._flush_ack(session)

    async def _flush_ack(self, session: Session) -> None:
        """Send `ack` with the session's highest delivered seq if it advanced."""
        high = session.ack_high
        if high is None or (session.acked is not None and high <= session.acked):
            return
        session.acked = high
        with contextlib.suppress(ConnectionClosed):
            await session.ws.send(json.dumps({"type": "ack", "up_to": high}))
