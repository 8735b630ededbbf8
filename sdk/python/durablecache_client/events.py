"""Value objects parsed from server frames, and the listener interface.

Frame shapes: docs/protocol.md, "Server → client frames". When the
protocol adds a field, add it to the matching `from_frame` here; unknown
fields are ignored on purpose so an older client keeps working against a
newer server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

ENTRY_OPS = ("create", "update", "destroy", "invalidate")
REGION_OPS = ("region_clear", "region_destroy")
CQ_OPS = ("create", "update", "destroy", "region_clear", "region_destroy")


@dataclass(frozen=True)
class Gap:
    """A queue overflow the server recorded: every change after `since` (a
    `seq`) may be missing; `dropped` queued events were removed; `reason` is
    `"overflow"`. The client recovers by key by itself (README, "Recovery").
    """

    since: int
    dropped: int
    reason: str

    @classmethod
    def from_frame(cls, frame: Any) -> Gap | None:
        """Build a Gap from a `gap` frame or a welcome's `gap` field; None
        when absent or malformed."""
        if not isinstance(frame, dict):
            return None
        try:
            return cls(
                since=int(frame["since"]),
                dropped=int(frame.get("dropped") or 0),
                reason=str(frame.get("reason") or "overflow"),
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Welcome:
    """The server's answer to `hello`.

    `pending_event_count` is the frame's `pending_events`: -2 when no queue
    existed for this id (first connection, non-durable client, or after a close
    without keepalive), -1 when the queue was lost (expired or every host
    died), else the number of queued events that will be replayed after
    `ready_for_events()`. `gap` is set when the queue overflowed while the
    client was away: after `ready_for_events()` the server resyncs by key.
    """

    durable_id: str | None
    node: str | None
    primary: str | None
    secondaries: list[str]
    pending_event_count: int
    redundancy_satisfied: bool
    url: str = ""
    gap: Gap | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_frame(cls, frame: dict[str, Any], url: str = "") -> Welcome:
        """Build a Welcome from a `welcome` frame received on `url`."""
        return cls(
            durable_id=frame.get("durable_id"),
            node=frame.get("node"),
            primary=frame.get("primary"),
            secondaries=list(frame.get("secondaries") or []),
            pending_event_count=int(frame.get("pending_events", -2)),
            redundancy_satisfied=bool(frame.get("redundancy_satisfied", True)),
            url=url,
            gap=Gap.from_frame(frame.get("gap")),
            raw=dict(frame),
        )


@dataclass(frozen=True)
class Marker:
    """The end of the replay: `replayed` events came before it, and
    `resynced` entries of the server's resync after a gap (0 without one)."""

    replayed: int
    regions: list[str]
    resynced: int = 0

    @classmethod
    def from_frame(cls, frame: dict[str, Any]) -> Marker:
        """Build a Marker from a `marker` frame."""
        return cls(
            replayed=int(frame.get("replayed", 0)),
            regions=list(frame.get("regions") or []),
            resynced=int(frame.get("resynced") or 0),
        )


@dataclass(frozen=True)
class Written:
    """The server's answer to a `put`: the key's new version and the id of
    the event subscribers will see for it."""

    region: str
    key: str
    op: str
    version: int
    event_id: str

    @classmethod
    def from_frame(cls, frame: dict[str, Any]) -> Written:
        return cls(
            region=str(frame["region"]),
            key=str(frame["key"]),
            op=str(frame["op"]),
            version=int(frame["version"]),
            event_id=str(frame["event_id"]),
        )


@dataclass(frozen=True)
class EntryEvent:
    """One change delivered by the server.

    `is_replay` is the frame's `replay` flag: true for events queued before
    `ready_for_events()` (or before a reconnect). `key` is None for the region
    ops `region_clear` and `region_destroy`. `cq` is None for plain interest
    events, else the frame's list of `{"name": ..., "cq_op": ...}`.

    `is_resync` is true for an event the client made itself while it
    recovered by key (README, "Recovery"): a key that was created, updated
    or destroyed while events for it were lost. Such an event was never
    queued: its `id`, `seq` and `ts` are None and `is_replay` is false.
    """

    id: str | None
    seq: int | None
    region: str
    key: str | None
    op: str
    value: Any
    version: int | None
    ts: str | None
    is_replay: bool
    cq: list[dict[str, Any]] | None = None
    is_resync: bool = False

    @classmethod
    def resync(
        cls, region: str, key: str, op: str, value: Any, version: int | None
    ) -> EntryEvent:
        """The event that hands a key recovered by key to a listener."""
        return cls(
            id=None,
            seq=None,
            region=region,
            key=key,
            op=op,
            value=value,
            version=version,
            ts=None,
            is_replay=False,
            is_resync=True,
        )

    @classmethod
    def from_frame(cls, frame: dict[str, Any]) -> EntryEvent:
        """Build an EntryEvent from an `event` frame."""
        version = frame.get("version")
        return cls(
            id=str(frame["id"]),
            seq=int(frame["seq"]),
            region=str(frame["region"]),
            key=frame.get("key"),
            op=str(frame["op"]),
            value=frame.get("value"),
            version=None if version is None else int(version),
            ts=frame.get("ts"),
            is_replay=bool(frame.get("replay", False)),
            cq=frame.get("cq"),
        )

    @property
    def timestamp(self) -> datetime | None:
        """Return `ts` parsed as an aware datetime (None when absent)."""
        if not self.ts:
            return None
        return datetime.fromisoformat(self.ts.replace("Z", "+00:00"))

    def to_json_dict(self) -> dict[str, Any]:
        """Return the event as the protocol names its fields (`replay`, ...);
        a resync event also says `resync: true`."""
        data: dict[str, Any] = {
            "id": self.id,
            "seq": self.seq,
            "region": self.region,
            "key": self.key,
            "op": self.op,
            "value": self.value,
            "version": self.version,
            "ts": self.ts,
            "replay": self.is_replay,
        }
        if self.is_resync:
            data["resync"] = True
        if self.cq is not None:
            data["cq"] = self.cq
        return data


@dataclass(frozen=True)
class CqEvent:
    """A change as one continuous query sees it (Geode's `CqEvent`).

    `base_op` is the entry's op (`create`, `update`, `destroy`,
    `invalidate`, `region_clear`, `region_destroy`); `query_op` is the
    frame's `cq_op` for this CQ: `create` (the entry entered the result),
    `update` (changed, still in), `destroy` (left), `region_clear` or
    `region_destroy`. `entry` is the delivered event (whose `cq` names every
    CQ of the client the change concerns); it is None for an event the
    client made itself while it recovered by key (`is_resync` true; README,
    "Recovery"): a key that entered, changed or left the result while its
    events were lost. A key that left by a destroy says `base_op` destroy;
    one that left otherwise (or is missing from a full image) says `update`.
    """

    cq_name: str
    base_op: str
    query_op: str
    region: str
    key: str | None
    value: Any
    version: int | None
    is_replay: bool
    is_resync: bool = False
    entry: EntryEvent | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, entry: EntryEvent, name: str, query_op: str) -> CqEvent:
        """The CQ `name`'s view of a delivered event."""
        return cls(
            cq_name=name,
            base_op=entry.op,
            query_op=query_op,
            region=entry.region,
            key=entry.key,
            value=entry.value,
            version=entry.version,
            is_replay=entry.is_replay,
            entry=entry,
        )

    def to_json_dict(self) -> dict[str, Any]:
        """Return the event as the protocol names its fields; a resync event
        (no delivered event behind it) says `resync: true` and lists this CQ
        alone in `cq`."""
        if self.entry is not None:
            return self.entry.to_json_dict()
        return {
            "id": None,
            "seq": None,
            "region": self.region,
            "key": self.key,
            "op": self.base_op,
            "value": self.value,
            "version": self.version,
            "ts": None,
            "replay": self.is_replay,
            "resync": True,
            "cq": [{"name": self.cq_name, "cq_op": self.query_op}],
        }


@dataclass(frozen=True)
class RegionLiveEvent:
    """Passed to `after_region_live`: the replay of `region` is over."""

    region: str
    replayed: int


class CacheListener:
    """Receive the events of one region; override the methods you need.

    Methods may be plain functions or coroutines. They run on the client's
    event loop (for `DurableClient`, its background thread), one at a time and
    in delivery order; an exception is logged and does not stop delivery.
    Do not call blocking `DurableClient` methods from inside a listener.
    """

    def after_create(self, event: EntryEvent) -> Any:
        """Handle a `create` event."""

    def after_update(self, event: EntryEvent) -> Any:
        """Handle an `update` event."""

    def after_destroy(self, event: EntryEvent) -> Any:
        """Handle a `destroy` event."""

    def after_invalidate(self, event: EntryEvent) -> Any:
        """Handle an `invalidate` event (the value is now None)."""

    def after_region_clear(self, event: EntryEvent) -> Any:
        """Handle a `region_clear` event (`key` is None)."""

    def after_region_destroy(self, event: EntryEvent) -> Any:
        """Handle a `region_destroy` event (`key` is None)."""

    def after_region_live(self, event: RegionLiveEvent) -> Any:
        """Handle the end of the replay for this region (once per `marker`)."""


class CqListener:
    """Receive the events of one continuous query (Geode's `CqListener`).

    Methods may be plain functions or coroutines; they run like a
    `CacheListener`'s (on the client's event loop, one at a time, in
    delivery order; an exception is logged and delivery goes on).
    """

    def on_event(self, event: CqEvent) -> Any:
        """Handle a change of the CQ's result (see `CqEvent.query_op`)."""

    def on_error(self, error: Exception) -> Any:
        """The server refused the CQ when the client sent it again after a
        reconnect (a `DurableCacheError`, e.g. `no_such_region`). The CQ
        stays registered on the client and is sent again on the next
        session."""

    def on_close(self) -> Any:
        """The CQ ended: `close_cq`, an operator's close, or a
        `region_destroy` of its region. No event names it afterwards."""


LISTENER_METHODS = {
    "create": "after_create",
    "update": "after_update",
    "destroy": "after_destroy",
    "invalidate": "after_invalidate",
    "region_clear": "after_region_clear",
    "region_destroy": "after_region_destroy",
}
