"""The client's side of one continuous query: its listener and result set.

As in Geode, a CQ's results and events do not touch the region's local
cache: the result set is kept here, apart from it. Like that cache it is
version-aware (an image entry or event older than what is held changes
nothing), and it remembers keys that left, so a fresh image after a
reconnect can tell "left the result" from "was never in it".
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from typing import Any

from .events import CqListener, EntryEvent


class CqState:
    """One CQ the application registered: its definition, listener and
    result set as last known."""

    def __init__(
        self,
        name: str,
        region: str,
        query: str,
        durable: bool,
        listener: CqListener | None,
    ) -> None:
        self.name = name
        self.region = region
        self.query = query
        self.durable = durable
        self.listener = listener
        # key -> (value, version, member)
        self._known: dict[str, tuple[Any, int, bool]] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<CqState {self.name!r} on {self.region!r}: {self.query!r}>"

    def results(self) -> dict[str, tuple[Any, int]]:
        """Return the result set as `{key: (value, version)}` (a copy)."""
        with self._lock:
            return {k: (v, n) for k, (v, n, member) in self._known.items() if member}

    def is_member(self, key: str) -> bool:
        """True when `key` is in the result set as last known."""
        known = self._known.get(key)
        return known is not None and known[2]

    def _is_newer(self, key: str, version: int | None) -> bool:
        known = self._known.get(key)
        return known is None or version is None or version > known[1]

    def apply_member(self, key: str, value: Any, version: int) -> str | None:
        """Record a member sent by an image; return how it changed the result
        (`create` entered, `update` changed) or None when the version held is
        as new."""
        with self._lock:
            if not self._is_newer(key, version):
                return None
            was_member = self.is_member(key)
            self._known[key] = (value, version, True)
            return "update" if was_member else "create"

    def apply_left(self, key: str, version: int | None) -> bool:
        """Record that `key` is not in the result; True when it was."""
        with self._lock:
            return self._left(key, version)

    def _left(self, key: str, version: int | None) -> bool:
        if not self._is_newer(key, version):
            return False
        known = self._known.get(key)
        was_member = known is not None and known[2]
        held = known[1] if known is not None else 0
        self._known[key] = (None, held if version is None else version, False)
        return was_member

    def apply_event(self, event: EntryEvent, cq_op: str) -> None:
        """Apply a delivered event's `cq_op` for this CQ."""
        if cq_op in ("region_clear", "region_destroy"):
            with self._lock:
                self._known.clear()
            return
        if event.key is None or event.version is None:
            return
        if cq_op == "destroy":
            self.apply_left(event.key, event.version)
        else:
            self.apply_member(event.key, event.value, event.version)

    def prune_absent(self, present: Collection[str]) -> list[tuple[str, int]]:
        """Mark as left the members a full image (`present`) lacks; return
        them as `(key, version)`."""
        with self._lock:
            gone = [
                (key, version)
                for key, (_, version, member) in self._known.items()
                if member and key not in present
            ]
            for key, version in gone:
                self._known[key] = (None, version, False)
            return gone
