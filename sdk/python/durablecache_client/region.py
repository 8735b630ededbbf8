"""A region handle: the local cache of one region and its registrations.

Cache rule (sdk/python/README.md, "Behaviour"): an image entry or an event changes the
cache only when its `version` is newer than the version held for that key, so
a replayed old update never overwrites a current value. A destroyed key keeps
a tombstone with its version for `tombstone_ttl` seconds so an older replay
cannot resurrect it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Collection, Iterable
from time import monotonic
from typing import TYPE_CHECKING, Any

from .events import CacheListener, CqListener, EntryEvent, Written

if TYPE_CHECKING:
    from ._regions import ClientRegions

POLICIES = ("keys_values", "keys", "none")
_REGION_NAME = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def validate_region_name(name: str) -> str:
    """Return `name` if it is a valid region name, else raise ValueError."""
    if not isinstance(name, str) or not _REGION_NAME.fullmatch(name):
        raise ValueError(f"invalid region name: {name!r}")
    return name


class Region:
    """The application's view of one server region.

    Reads (`get`, `get_entry`, `snapshot`, ...) are served from the local cache
    and are safe from any thread. The `register_*`, `unregister_*`,
    `register_cq` and `close_cq` coroutines talk to the server through the
    client that made this handle (`client.region(name)`).
    """

    def __init__(
        self,
        client: ClientRegions,
        name: str,
        listener: CacheListener | None = None,
        *,
        tombstone_ttl: float = 900.0,
    ) -> None:
        self.name = validate_region_name(name)
        self.listener = listener
        self._client = client
        self._tombstone_ttl = tombstone_ttl
        self._entries: dict[str, tuple[Any, int]] = {}
        # key -> (version, monotonic time of the destroy); insertion order is
        # time order, so expiry pops from the front.
        self._tombstones: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()
        self._last_seq: int | None = None

    def __repr__(self) -> str:
        return f"<Region {self.name!r} entries={len(self._entries)}>"

    # -- cache reads ---------------------------------------------------------

    def get(self, key: str, default: Any = None) -> Any:
        """Return the cached value of `key` (None once invalidated)."""
        entry = self._entries.get(key)
        return default if entry is None else entry[0]

    def get_entry(self, key: str) -> tuple[Any, int] | None:
        """Return `(value, version)` for `key`, or None when not cached."""
        return self._entries.get(key)

    def version_of(self, key: str) -> int | None:
        """Return the newest version known for `key`, destroyed ones included."""
        with self._lock:
            return self._held_version(key)

    def keys(self) -> list[str]:
        """Return the cached keys."""
        with self._lock:
            return list(self._entries)

    def snapshot(self) -> dict[str, tuple[Any, int]]:
        """Return a copy of the cache as `{key: (value, version)}`."""
        with self._lock:
            return dict(self._entries)

    @property
    def last_seq(self) -> int | None:
        """The highest `seq` of an event of this region delivered to this
        client (None before the first); the client's own `last_seq` is the
        highest of all regions."""
        return self._last_seq

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    # -- registrations -------------------------------------------------------

    async def register_keys(
        self,
        keys: str | Iterable[str],
        durable: bool = False,
        policy: str = "keys_values",
    ) -> int:
        """Register interest in a list of keys; return the image count."""
        key_list = [keys] if isinstance(keys, str) else list(keys)
        return await self._client._register_interest(
            self, {"keys": key_list}, durable=durable, policy=policy
        )

    async def register_regex(
        self, pattern: str, durable: bool = False, policy: str = "keys_values"
    ) -> int:
        """Register interest in keys fully matching `pattern`."""
        return await self._client._register_interest(
            self, {"regex": pattern}, durable=durable, policy=policy
        )

    async def register_all_keys(
        self, durable: bool = False, policy: str = "keys_values"
    ) -> int:
        """Register interest in every key of the region."""
        return await self._client._register_interest(
            self, {"all_keys": True}, durable=durable, policy=policy
        )

    async def unregister_keys(self, keys: str | Iterable[str]) -> None:
        """Drop the interest registered with the same key list."""
        key_list = [keys] if isinstance(keys, str) else list(keys)
        await self._client._unregister_interest(self, {"keys": key_list})

    async def unregister_regex(self, pattern: str) -> None:
        """Drop the interest registered with the same pattern."""
        await self._client._unregister_interest(self, {"regex": pattern})

    async def unregister_all_keys(self) -> None:
        """Drop the all-keys interest."""
        await self._client._unregister_interest(self, {"all_keys": True})

    async def register_cq(
        self,
        name: str,
        query: str,
        listener: CqListener | None = None,
        durable: bool = False,
    ) -> int:
        """Register the continuous query `name` on this region; return the
        number of entries in its initial result (see `cq_results`).

        `listener.on_event` gets a `CqEvent` for each change of the result.
        As in Geode, neither the initial result nor the CQ's events touch
        this region's cache; an event that an interest of the client also
        covers updates the cache and reaches the region's listener too.
        The CQ is sent again after every reconnect. A refused query raises
        `BadQueryError` (the server's message gives line and column).
        """
        if isinstance(listener, bool):
            raise TypeError(
                "register_cq(name, query, listener=None, durable=False): "
                "pass durable by keyword"
            )
        return await self._client._register_cq(
            self, name, query, listener, durable=durable
        )

    async def close_cq(self, name: str) -> None:
        """Close the continuous query `name`."""
        await self._client.close_cq(name)

    def cq_results(self, name: str) -> dict[str, tuple[Any, int]] | None:
        """The result set of the CQ `name` as last known, `{key: (value,
        version)}`, or None when this client holds no such CQ here."""
        cq = self._client._cqs.get(name)
        return None if cq is None or cq.region != self.name else cq.results()

    # -- writes ----------------------------------------------------------------

    async def put(self, key: str, value: Any) -> Written:
        """Create or update `key` on the server through the client's socket
        (the `put` frame; no HTTP request); return once the event is
        durable. The local cache changes when the event comes back, like any
        other event (register interest in the key to see it). A put whose
        answer was lost with its socket is sent again on the next one, so
        it may be applied twice: two events, the same value."""
        reply = await self._client._app_request(
            {"type": "put", "region": self.name, "key": key, "value": value}
        )
        return Written.from_frame(reply)

    # -- cache writes (called by the client on its event loop) ----------------

    def _held_version(self, key: str) -> int | None:
        entry = self._entries.get(key)
        if entry is not None:
            return entry[1]
        tomb = self._tombstones.get(key)
        return None if tomb is None else tomb[0]

    def _is_newer(self, key: str, version: int | None) -> bool:
        held = self._held_version(key)
        return held is None or version is None or version > held

    def _store(self, key: str, value: Any, version: int) -> None:
        self._tombstones.pop(key, None)
        self._entries[key] = (value, version)

    def _apply_image_entry(self, key: str, value: Any, version: int) -> str | None:
        """Store an image entry unless a version as new is already held;
        return the change it made (`create` or `update`), or None."""
        with self._lock:
            if not self._is_newer(key, version):
                return None
            existed = key in self._entries
            self._store(key, value, version)
            return "update" if existed else "create"

    def _apply_image_key(self, key: str) -> bool:
        """Record a key sent by a `keys` policy image (value unknown: None);
        True when the key was not cached."""
        with self._lock:
            if key in self._entries:
                return False
            tomb = self._tombstones.get(key)
            # The real version is unknown but newer than any tombstone; any
            # event carrying a real version replaces this placeholder.
            self._store(key, None, 0 if tomb is None else tomb[0])
            return True

    def _forget_value(self, key: str) -> bool:
        """Keep `key` with its version but an unknown (None) value; True when
        it was cached (a `keys` resync: it changed, its value is stale)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return False
            self._entries[key] = (None, entry[1])
            return True

    def _apply_resync_destroy(self, key: str, version: int | None) -> bool:
        """Apply a resync's tombstone (version None: a `keys` policy one);
        True when a cached entry went."""
        with self._lock:
            if not self._is_newer(key, version):
                return False
            entry = self._entries.pop(key, None)
            held = self._held_version(key) if entry is None else entry[1]
            self._add_tombstone(key, version if version is not None else held or 0)
            return entry is not None

    def _apply_event(self, event: EntryEvent) -> bool:
        """Apply one event under the version rule; return True if it changed."""
        with self._lock:
            if event.op in ("region_clear", "region_destroy"):
                # Versions are forgotten too: the contract does not say
                # whether versions continue after a clear, and a stale
                # tombstone must never hide a genuinely new entry.
                self._entries.clear()
                self._tombstones.clear()
                return True
            key = event.key
            if key is None or not self._is_newer(key, event.version):
                return False
            version = event.version if event.version is not None else 0
            if event.op == "destroy":
                self._entries.pop(key, None)
                self._add_tombstone(key, version)
            elif event.op == "invalidate":
                self._store(key, None, version)
            elif event.op in ("create", "update"):
                self._store(key, event.value, version)
            else:
                return False
            return True

    def _prune_absent(
        self, present: Collection[str], matches: Callable[[str], bool]
    ) -> list[tuple[str, int]]:
        """Destroy the cached keys the selector covers but a full image
        (`present`) lacks; return them with their last versions."""
        with self._lock:
            gone = [
                (key, version)
                for key, (_, version) in self._entries.items()
                if key not in present and matches(key)
            ]
            for key, version in gone:
                del self._entries[key]
                self._add_tombstone(key, version)
            return gone

    def _note_seq(self, seq: int) -> None:
        """Record that an event of this region with `seq` was delivered."""
        if self._last_seq is None or seq > self._last_seq:
            self._last_seq = seq

    def _add_tombstone(self, key: str, version: int) -> None:
        now = monotonic()
        self._tombstones.pop(key, None)
        self._tombstones[key] = (version, now)
        horizon = now - self._tombstone_ttl
        while self._tombstones:
            oldest = next(iter(self._tombstones))
            if self._tombstones[oldest][1] >= horizon:
                break
            del self._tombstones[oldest]
