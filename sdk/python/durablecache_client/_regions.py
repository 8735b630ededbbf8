"""Region handles of the asyncio client and what they registered.

A layer of `AsyncDurableClient` (see `_core`). Every interest and CQ is
remembered as first sent and sent again on each new session, so a
reconnect restores them (sdk/python/README.md, "Behaviour").
"""

from __future__ import annotations

from typing import Any

from ._core import invoke, logger
from ._registrations import Registration, cq_key, interest_key, selector_matcher
from ._requests import ClientRequests
from ._session import Session
from .errors import DurableCacheError
from .events import CacheListener
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
        """Close the continuous query `name` (registered on any region)."""
        await self._app_request({"type": "close_cq", "name": name})
        self._registrations.pop(cq_key(name), None)

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
                await invoke(self.on_error, exc)
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
