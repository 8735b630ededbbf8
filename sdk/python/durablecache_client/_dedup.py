"""Duplicate event ids, remembered for a sliding window of seconds."""

from __future__ import annotations

from time import monotonic


class SeenIds:
    """Event ids delivered within the last `window` seconds."""

    def __init__(self, window: float) -> None:
        self.window = window
        # id -> monotonic time last seen; insertion order is time order, so
        # expiry pops from the front.
        self._seen: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def check_and_add(self, event_id: str) -> bool:
        """Record `event_id`; return True if it was already seen."""
        now = monotonic()
        horizon = now - self.window
        seen = self._seen
        while seen:
            oldest = next(iter(seen))
            if seen[oldest] >= horizon:
                break
            del seen[oldest]
        duplicate = seen.pop(event_id, None) is not None
        seen[event_id] = now
        return duplicate
