"""Region handles of the asyncio client and what they registered.

A layer of `AsyncDurableClient` (see `_core`). Every interest and CQ is
remembered as first sent and sent again on each new session, so a
reconnect restores them (sdk/python/README.md, "Behaviour").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ._core import invoke, logger
from ._cq import CqState
from ._registrations import Registration, cq_key, interest_key, selector_matcher
from ._requests import ClientRequests
from ._session import Session
from .errors import DurableCacheError
from .events import CacheListener, CqEvent, CqListener
from .region import POLICIES, Region


class ClientRegions(ClientRequests):
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
            cached = self._matchers.get(handle)
            if cached is None or cached[0] is not registration:
                cached = self._matchers[handle] = (
                    registration,
                    selector_matcher(frame),
                )
            matcher = cached[1]
            if matcher is None or matcher(key):
                return True
        return False

    def _later(self, session: Session, call: Callable[[], Awaitable[None]]) -> None:
        """Run `call` on the dispatcher, in order with the events."""
        self._dispatch_queue.put_nowait((session, "call", call))

    def _tell_cq(self, session: Session, cq: CqState, event: CqEvent) -> None:
        """Hand `event` to the CQ's listener, in order with the events."""
        listener = cq.listener
        if listener is None:
            return

        async def call() -> None:
            await invoke(getattr(listener, "on_event", None), event)

        self._later(session, call)

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
        reply = await self._app_request(frame, region, cq)
        cq.listener = listener
        cq.query, cq.durable = query, bool(durable)
        self._cqs[name] = cq
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
            frame = registration.frame
            cq = (
                self._cqs.get(frame["name"]) if frame["type"] == "register_cq" else None
            )
            # A CQ no replay covers hears from its fresh image what entered,
            # changed or left while the client was away.
            resync = (
                cq is not None
                and session.is_reconnect
                and (lost_queue or not registration.durable)
            )
            try:
                reply = await self._request_on(
                    session, dict(frame), region, cq=cq, resync=resync
                )
            except DurableCacheError as exc:
                logger.warning("re-registration %s failed: %s", registration, exc)
                await invoke(self.on_error, exc)
                if cq is not None and cq.listener is not None:
                    await invoke(getattr(cq.listener, "on_error", None), exc)
                continue
            if cq is not None:
                if resync:
                    for key, version in cq.prune_absent(reply["_image_keys"]):
                        left = CqEvent(
                            cq.name, "update", "destroy", cq.region, key, None,
                            version, is_replay=False, is_resync=True,
                        )  # fmt: skip
                        self._tell_cq(session, cq, left)
                continue
            prune = (
                session.is_reconnect
                and frame["type"] == "register_interest"
                and registration.policy != "none"
                and (lost_queue or not registration.durable)
            )
            matcher = selector_matcher(frame) if prune else None
            if matcher is not None:
                region._prune_absent(reply.get("_image_keys", set()), matcher)
