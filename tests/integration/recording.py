"""What an application built on the client library saw, for e2e asserts."""

import threading
import time
from collections import defaultdict
from typing import Any

from durablecache_client import CacheListener, EntryEvent, RegionLiveEvent


class Recorder(CacheListener):
    """Record every callback in order, with its arrival time (monotonic).

    Listeners run on the client's loop thread; the test reads from another.
    Optionally records the cache value each event found (``region``).
    """

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []
        self.arrivals: list[float] = []
        self.cache_seen: list[Any] = []
        self.region: Any = None  # set to read the local cache from callbacks
        self._lock = threading.Lock()

    def _event(self, event: EntryEvent) -> None:
        with self._lock:
            if self.region is not None:
                self.cache_seen.append(self.region.get_entry(event.key))
            self.log.append(("event", event))
            self.arrivals.append(time.monotonic())

    after_create = after_update = after_destroy = after_invalidate = _event
    after_region_clear = after_region_destroy = _event

    def after_region_live(self, event: RegionLiveEvent) -> None:
        with self._lock:
            self.log.append(("live", event))
            self.arrivals.append(time.monotonic())

    def entries(self) -> list[tuple[str, Any]]:
        with self._lock:
            return list(self.log)

    def events(self) -> list[EntryEvent]:
        return [item for kind, item in self.entries() if kind == "event"]

    def lives(self) -> list[RegionLiveEvent]:
        return [item for kind, item in self.entries() if kind == "live"]

    def first_arrival_of(self, ids: set[str]) -> float | None:
        """Arrival time of the first event received whose id is in ``ids``."""
        with self._lock:
            for (kind, item), at in zip(self.log, self.arrivals, strict=True):
                if kind == "event" and item.id in ids:
                    return at
        return None

    def first_event_after(self, moment: float) -> float | None:
        """Arrival time of the first event received after ``moment``."""
        with self._lock:
            for (kind, _), at in zip(self.log, self.arrivals, strict=True):
                if kind == "event" and at > moment:
                    return at
        return None


def assert_versions_increase(events: list[EntryEvent]) -> None:
    by_key: dict[str, list[int]] = defaultdict(list)
    for event in events:
        by_key[event.key].append(event.version)
    for key, versions in by_key.items():
        assert versions == sorted(set(versions)), (key, versions)
