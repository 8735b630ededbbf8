"""Region handles of the asyncio client and what they registered.

A layer of `AsyncDurableClient` (see `_core`). Every interest and CQ is
remembered as first sent and sent again on each new session, so a
reconnect restores them (sdk/python/README.md, "Behaviour"); where no
replay covers the time away, or after a gap, they recover by key
(sdk/python/README.md, "Recovery").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from ._core import invoke, logger
from ._cq import CqState
from ._images import CqImage, ImageApplier, ImageMode, RegionImage
from ._registrations import Registration, cq_key, interest_key, selector_matcher
from ._requests import ClientRequests
from ._session import Session, SessionLostError
from .errors import DurableCacheError, SinceTooOldError
from .events import LISTENER_METHODS, CacheListener, CqEvent, CqListener, EntryEvent
from .region import POLICIES, Region


class ClientRegions(ClientRequests):
    default_listener: CacheListener | None

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

    async def close_cq(self, name: str) -> None:
        """Close the continuous query `name` (registered on any region).

        Its listener's `on_close` runs once the server confirms; events
        still on their way no longer reach it.
        """
        await self._app_request({"type": "close_cq", "name": name})
        await self._end_cq(name)

    async def _end_cq(self, name: str) -> None:
        """Forget the CQ `name` (closed here or by the server): it is not
        sent again after a reconnect and its listener hears `on_close`."""
        self._registrations.pop(cq_key(name), None)
        cq = self._cqs.pop(name, None)
        if cq is not None and cq.listener is not None:
            await invoke(getattr(cq.listener, "on_close", None))

    def _interest_covers(self, region: str, key: str) -> bool:
        """True when an interest of this client in `region` covers `key`.

        A pattern only the server can read counts as covering: the client
        does not guess.
        """
        for handle, registration in self._registrations.items():
            frame = registration.frame
            if frame["type"] != "register_interest" or registration.region != region:
                continue
            matcher = self._matcher(handle, registration)
            if matcher is None or matcher(key):
                return True
        return False

    def _matcher(
        self, handle: tuple[Any, ...], registration: Registration
    ) -> Callable[[str], bool] | None:
        """The interest's selector as a local predicate (None: unknown)."""
        cached = self._matchers.get(handle)
        if cached is None or cached[0] is not registration:
            matcher = selector_matcher(registration.frame)
            cached = self._matchers[handle] = (registration, matcher)
        return cached[1]

    def _later(self, session: Session, call: Callable[[], Awaitable[None]]) -> None:
        """Run `call` on the dispatcher, in order with the events."""
        self._dispatch_queue.put_nowait((session, "call", call))

    def _tell_region(self, session: Session, region: Region, event: EntryEvent) -> None:
        """Hand a resync `event` to the region's listener, in order with the
        events."""

        async def call() -> None:
            listener = region.listener or self.default_listener
            method_name = LISTENER_METHODS.get(event.op)
            if listener is not None and method_name is not None:
                await invoke(getattr(listener, method_name, None), event)

        self._later(session, call)

    def _tell_cq(self, session: Session, cq: CqState, event: CqEvent) -> None:
        """Hand `event` to the CQ's listener, in order with the events."""
        listener = cq.listener
        if listener is None:
            return

        async def call() -> None:
            await invoke(getattr(listener, "on_event", None), event)

        self._later(session, call)

    def _image_for(
        self,
        session: Session,
        handle: tuple[Any, ...],
        registration: Registration,
        mode: ImageMode,
        cq: CqState | None = None,
    ) -> ImageApplier:
        """The applier of `registration`'s image in `mode` (`_images`)."""
        if registration.frame["type"] == "register_cq":
            target = cq or self._cqs.get(registration.frame["name"])
            if target is None:
                return ImageApplier()  # forgotten meanwhile: nothing to fill
            return CqImage(target, mode, partial(self._tell_cq, session, target))
        region = self.region(registration.region)
        covers = self._matcher(handle, registration)
        tell = partial(self._tell_region, session, region)
        return RegionImage(region, mode, covers, tell)

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
        handle = interest_key(region.name, selector)
        registration = Registration(region.name, frame, bool(durable), policy)

        def image(session: Session) -> ImageApplier:
            return self._image_for(session, handle, registration, "silent")

        reply = await self._app_request(frame, image)
        self._registrations[handle] = registration
        return int(reply.get("count", 0))

    async def _unregister_interest(
        self, region: Region, selector: dict[str, Any]
    ) -> None:
        frame = {"type": "unregister_interest", "region": region.name, **selector}
        try:
            await self._app_request(frame)
        finally:
            self._registrations.pop(interest_key(region.name, selector), None)
            self._matchers.pop(interest_key(region.name, selector), None)

    async def _register_cq(
        self,
        region: Region,
        name: str,
        query: str,
        listener: CqListener | None,
        *,
        durable: bool,
    ) -> int:
        frame = {
            "type": "register_cq",
            "name": name,
            "region": region.name,
            "query": query,
            "durable": bool(durable),
        }
        held = self._cqs.get(name)
        cq = (
            held
            if held is not None and held.region == region.name
            else CqState(name, region.name, query, bool(durable), listener)
        )
        handle = cq_key(name)
        registration = Registration(region.name, frame, bool(durable), "keys_values")

        def image(session: Session) -> ImageApplier:
            return self._image_for(session, handle, registration, "silent", cq)

        reply = await self._app_request(frame, image)
        cq.listener = listener
        cq.query, cq.durable = query, bool(durable)
        self._cqs[name] = cq
        self._registrations[handle] = registration
        return int(reply.get("count", 0))

    # -- after a reconnect or a gap (sdk/python/README.md, "Recovery") ------------

    async def _restore_registrations(self, session: Session) -> None:
        """Send every registration again on a new session, in original order.

        Idempotent on the server. When no replay will cover the time away
        (the queue is new or lost, or overflowed: a `gap` in the welcome,
        or the registration is not durable, so the server dropped it
        meanwhile) it recovers by key instead: sent with `since`, the last
        seq delivered, and its image told to the listeners. An interest
        with policy `none` has no image to recover with and is sent as it
        was.
        """
        welcome = session.welcome
        lost_queue = welcome.pending_event_count < 0 or welcome.gap is not None
        since = self._last_seq
        for handle, registration in list(self._registrations.items()):
            recover = (
                session.is_reconnect
                and registration.policy != "none"
                and (lost_queue or not registration.durable)
            )
            try:
                if recover:
                    await self._recover(session, handle, registration, since)
                else:
                    await self._register_on(session, handle, registration, "silent")
            except DurableCacheError as exc:
                await self._registration_failed(registration, exc)

    async def _recover(
        self,
        session: Session,
        handle: tuple[Any, ...],
        registration: Registration,
        since: int | None,
    ) -> None:
        """Register with `since`; with a full image when it is unknown or
        the server answers `since_too_old`."""
        if since is not None:
            try:
                await self._register_on(session, handle, registration, "resync", since)
                return
            except SinceTooOldError:
                logger.info("since %s too old for %s: full image", since, registration)
        await self._register_on(session, handle, registration, "full")

    async def _register_on(
        self,
        session: Session,
        handle: tuple[Any, ...],
        registration: Registration,
        mode: ImageMode,
        since: int | None = None,
    ) -> None:
        frame = dict(registration.frame)
        if since is not None:
            frame["since"] = since
        image = self._image_for(session, handle, registration, mode)
        await self._request_on(session, frame, image)

    def _recover_after_gap(self, session: Session, since: int) -> None:
        """Recover every registration from `since` (after a `gap` frame),
        in a task of the session: the server's own resync goes on meanwhile,
        and the version rule makes the overlap harmless."""
        if session.closed_event.is_set():
            return  # the next session registers everything again
        if session.welcome.gap is not None and session.is_reconnect:
            return  # the welcome said so: restored from `since` already

        async def recover_all() -> None:
            for handle, registration in list(self._registrations.items()):
                if (
                    registration.policy == "none"
                    or self._registrations.get(handle) is not registration
                ):
                    continue
                try:
                    await self._recover(session, handle, registration, since)
                except (SessionLostError, TimeoutError) as exc:
                    logger.info("recovery after a gap stopped: %r", exc)
                    return
                except DurableCacheError as exc:
                    await self._registration_failed(registration, exc)

        task = asyncio.create_task(recover_all(), name="durablecache-recover")
        session.tasks.append(task)

    async def _registration_failed(
        self, registration: Registration, exc: DurableCacheError
    ) -> None:
        """A registration sent again was refused: tell `on_error` (and the
        CQ's listener); it stays registered and is sent on the next session."""
        logger.warning("re-registration %s failed: %s", registration, exc)
        await invoke(self.on_error, exc)
        frame = registration.frame
        cq = self._cqs.get(frame["name"]) if frame["type"] == "register_cq" else None
        if cq is not None and cq.listener is not None:
            await invoke(getattr(cq.listener, "on_error", None), exc)
