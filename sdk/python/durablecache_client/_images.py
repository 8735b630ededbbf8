"""`image` chunks applied to a region's cache or to a CQ's result set.

An image is applied in one of three modes (sdk/python/README.md,
"Recovery"):

- `silent`: the image of a registration; it fills the cache or the result
  set and tells no listener.
- `full`: a full image taken to recover (no `since` known, or
  `since_too_old`): each key it changes goes to the listener as a resync
  event, and `finish` destroys the keys the selector covers that the image
  lacks (their destroy was never queued for this client).
- `resync`: a `since` image or the server's own resync after a gap: current
  entries, tombstones (`destroyed`) and CQ non-member markers (`cq_op`
  destroy), each change going to the listener as a resync event. A reply
  that does not say `since` back came from a server that ignored it and
  sent every entry: `finish` then prunes as in `full`.

Every change is version-aware: an item whose version is not newer than the
one held changes nothing and tells nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .events import CqEvent, EntryEvent

if TYPE_CHECKING:
    from ._cq import CqState
    from .region import Region

ImageMode = Literal["silent", "full", "resync"]


@dataclass(frozen=True)
class ImageItem:
    """One item of an image chunk."""

    key: str
    value: Any
    version: int | None
    destroyed: bool = False  # a tombstone: the key was destroyed
    left: bool = False  # a CQ non-member marker: not in the result now
    key_only: bool = False  # from a `keys` policy chunk: the value is unknown


def _version(raw: Any) -> int | None:
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def image_items(frame: dict[str, Any]) -> list[ImageItem]:
    """The items of one chunk: its `entries`, or its `keys` and `destroyed`
    key lists (a `keys` policy image)."""
    items: list[ImageItem] = []
    for entry in frame.get("entries") or []:
        key = entry.get("key") if isinstance(entry, dict) else None
        if not isinstance(key, str):
            continue
        items.append(
            ImageItem(
                key,
                entry.get("value"),
                _version(entry.get("version")),
                destroyed=entry.get("destroyed") is True,
                left=entry.get("cq_op") == "destroy",
            )
        )
    for field, destroyed in (("keys", False), ("destroyed", True)):
        keys = frame.get(field)
        for key in keys if isinstance(keys, list) else []:
            if isinstance(key, str):
                items.append(ImageItem(key, None, None, destroyed, key_only=True))
    return items


def was_full(mode: ImageMode, reply: dict[str, Any]) -> bool:
    """True when the image `reply` ends held every entry, not only changes."""
    return mode == "full" or (mode == "resync" and reply.get("since") is None)


class ImageApplier:
    """Takes the chunks of one image, then `finish` with its reply."""

    def chunk(self, frame: dict[str, Any]) -> None:
        """Apply one `image` frame (this base class ignores it)."""

    def finish(self, reply: dict[str, Any]) -> None:
        """The image is complete (`reply` is `*_registered`)."""


class RegionImage(ImageApplier):
    """Apply images to `region`'s cache; `covers` is the interest's selector
    as a predicate (None: the client cannot tell, so nothing is pruned)."""

    def __init__(
        self,
        region: Region,
        mode: ImageMode,
        covers: Callable[[str], bool] | None,
        tell: Callable[[EntryEvent], None],
    ) -> None:
        self.region = region
        self.mode = mode
        self.covers = covers
        self._tell = tell
        self._present: set[str] = set()

    def _told(self, key: str, op: str | None, value: Any, version: int | None) -> None:
        if op is not None and self.mode != "silent":
            self._tell(EntryEvent.resync(self.region.name, key, op, value, version))

    def chunk(self, frame: dict[str, Any]) -> None:
        region = self.region
        for item in image_items(frame):
            key = item.key
            if item.left:
                continue  # a CQ's marker: says nothing of the region's entry
            self._present.add(key)
            if item.destroyed:
                gone = region._apply_resync_destroy(key, item.version)
                self._told(key, "destroy" if gone else None, None, item.version)
            elif item.key_only:
                if self.mode == "resync" and region._forget_value(key):
                    # Changed after `since`, value unknown: the held one is stale.
                    self._told(key, "update", None, None)
                else:
                    created = region._apply_image_key(key)
                    self._told(key, "create" if created else None, None, None)
            elif item.version is not None:
                op = region._apply_image_entry(key, item.value, item.version)
                self._told(key, op, item.value, item.version)

    def finish(self, reply: dict[str, Any]) -> None:
        if self.covers is None or not was_full(self.mode, reply):
            return
        for key, version in self.region._prune_absent(self._present, self.covers):
            self._told(key, "destroy", None, version)


class CqImage(ImageApplier):
    """Apply images to the result set of `cq` (never to the region's cache)."""

    def __init__(
        self, cq: CqState, mode: ImageMode, tell: Callable[[CqEvent], None]
    ) -> None:
        self.cq = cq
        self.mode = mode
        self._tell = tell
        self._present: set[str] = set()

    def _told(
        self, key: str, base_op: str, query_op: str, value: Any, version: int | None
    ) -> None:
        if self.mode == "silent":
            return
        cq = self.cq
        event = CqEvent(
            cq.name, base_op, query_op, cq.region, key, value, version,
            is_replay=False, is_resync=True,
        )  # fmt: skip
        self._tell(event)

    def chunk(self, frame: dict[str, Any]) -> None:
        cq = self.cq
        for item in image_items(frame):
            key = item.key
            if item.destroyed or item.left:
                if cq.apply_left(key, item.version):
                    base_op = "destroy" if item.destroyed else "update"
                    self._told(key, base_op, "destroy", None, item.version)
            elif item.version is not None:
                self._present.add(key)
                op = cq.apply_member(key, item.value, item.version)
                if op is not None:
                    self._told(key, op, op, item.value, item.version)

    def finish(self, reply: dict[str, Any]) -> None:
        if not was_full(self.mode, reply):
            return
        for key, version in self.cq.prune_absent(self._present):
            self._told(key, "update", "destroy", None, version)
