"""Reads of regions, entries, events and nodes, shaped for the doors."""

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection
from django.db.models import Count, Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from cache.exceptions import NoSuchRegionError, SinceTooOldError
from cache.models import Entry, Event, EventLog, Node, Region
from common import sql
from common.errors import NotFoundError, ValidationError


def region_get(*, name: str) -> Region:
    region = Region.objects.filter(name=name).first()
    if region is None:
        raise NoSuchRegionError(f"region {name!r} does not exist")
    return region


def region_list() -> QuerySet[Region]:
    return Region.objects.order_by("name")


def region_overview() -> QuerySet[Region]:
    """Regions by name, each with ``live_entries`` (keys not destroyed)."""
    return Region.objects.order_by("name").annotate(
        live_entries=Count("entries", filter=Q(entries__is_destroyed=False))
    )


def region_names_existing(names: list[str]) -> set[str]:
    return set(Region.objects.filter(name__in=names).values_list("name", flat=True))


def region_names_conflating() -> list[str]:
    """The regions whose events conflate (``conflate_events``)."""
    return list(
        Region.objects.filter(conflate_events=True).values_list("name", flat=True)
    )


def entry_get(*, region: str, key: str) -> Entry:
    reg = region_get(name=region)
    entry = Entry.objects.filter(region=reg, key=key, is_destroyed=False).first()
    if entry is None:
        raise NotFoundError(f"no entry {key!r} in region {region!r}")
    return entry


def entry_list(
    *, region: str, after: str | None = None, prefix: str | None = None, limit: int
) -> list[Entry]:
    """Return live entries ordered by key, after the ``after`` key."""
    reg = region_get(name=region)
    qs = Entry.objects.filter(region=reg, is_destroyed=False).order_by("key")
    if prefix:
        qs = qs.filter(key__startswith=prefix)
    if after is not None:
        qs = qs.filter(key__gt=after)
    return list(qs[:limit])


def entries_iter(*, region: str, batch: int = 500) -> Iterator[Entry]:
    """Yield every live entry of a region in key order, a batch at a time."""
    after = None
    while True:
        page = entry_list(region=region, after=after, limit=batch)
        yield from page
        if len(page) < batch:
            return
        after = page[-1].key


def event_log_head() -> int:
    log = EventLog.objects.filter(pk=1).first()
    return log.last_seq if log else 0


def event_log_oldest() -> int | None:
    """The seq of the oldest event still in the log (None when empty)."""
    return Event.objects.order_by("seq").values_list("seq", flat=True).first()


class LoggedEvent(NamedTuple):
    """One event of the log as the fan-out copies it into queues.

    The value stays the JSON text stored: the fan-out copies it into queue
    rows as it is, without decoding and encoding it again (nor a model
    instance per event, with its init signals and its fields'
    conversions).
    """

    seq: int
    event_id: str
    region: str
    key: str | None
    op: str
    value_json: str | None
    version: int | None
    conflate: bool
    ts: datetime
    # The entry's value before the change, as JSON text (None: absent,
    # destroyed or null): what continuous queries judge membership by.
    prior_json: str | None = None

    @classmethod
    def of(cls, event: Event) -> "LoggedEvent":
        """An Event instance in this form (as the log would give it back)."""
        return cls(
            event.seq,
            event.event_id,
            event.region,
            event.key,
            event.op,
            None if event.value is None else json.dumps(event.value),
            event.version,
            event.conflate,
            event.ts,
            None if event.prior_value is None else json.dumps(event.prior_value),
        )


def logged_events_after(*, seq: int, limit: int) -> list[LoggedEvent]:
    """The events after ``seq``, in seq order, at most ``limit``: one
    statement, rows as read.

    Timestamps are read as text and parsed once per distinct one (a putall's
    events share theirs, and then their one object, which the fan-out
    prepares once): the drivers' per-row conversion (Django's timestamptz
    loader on PostgreSQL) costs many times the parse of a shared text.
    """
    quote = connection.ops.quote_name
    columns = ", ".join(quote(c) for c in _LOGGED_FIELDS[:-2])
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns}, CAST({quote('ts')} AS TEXT),"  # noqa: S608
            f" {quote('prior_value')}"
            f" FROM {sql.table(Event, connection)}"
            f" WHERE {quote('seq')} > %s ORDER BY {quote('seq')} LIMIT %s",
            [seq, limit],
        )
        rows = cursor.fetchall()
    stamps: dict[str, datetime] = {}
    events = []
    for row in rows:
        text = row[8]
        ts = stamps.get(text)
        if ts is None:
            ts = stamps[text] = _aware(text)
        events.append(LoggedEvent._make((*row[:7], bool(row[7]), ts, row[9])))
    return events


def _aware(text: str) -> datetime:
    """A timestamp column's text: PostgreSQL's has its offset, SQLite's is
    naive UTC (USE_TZ)."""
    parsed = parse_datetime(text)
    if parsed is None:
        raise ValueError(f"not a timestamp: {text!r}")
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


_LOGGED_FIELDS = (
    *LoggedEvent._fields[:5],
    "value",
    *LoggedEvent._fields[6:-1],
    "prior_value",
)


def node_is_up(node: Node) -> bool:
    horizon = timezone.now() - timedelta(seconds=settings.DURABLECACHE_NODE_TIMEOUT_S)
    return node.last_heartbeat >= horizon and not node.is_draining


def node_list() -> list[Node]:
    return list(Node.objects.order_by("name"))


def nodes_up() -> list[Node]:
    return [n for n in node_list() if node_is_up(n)]


def entries_for_keys(*, region: str, keys: list[str]) -> list[Entry]:
    """Return the live entries of ``keys`` in the given key order."""
    found = {
        e.key: e
        for e in Entry.objects.filter(
            region__name=region, key__in=keys, is_destroyed=False
        )
    }
    return [found[k] for k in keys if k in found]


# ``since`` catch-ups (docs/protocol.md, "Catching up by key").


class ChangedEntry(NamedTuple):
    """An entry as a ``since`` image reads it: destroyed ones too (their
    tombstones), with the seq of its last change."""

    pk: int
    key: str
    value: Any
    version: int
    is_destroyed: bool
    seq: int

    @property
    def position(self) -> tuple[int, int]:
        """Where the next page of ``entries_changed_after`` goes on from."""
        return self.seq, self.pk


# Above every entry id: ``(seq, id) > (since, _ID_MAX)`` is ``seq > since``.
_ID_MAX = 2**63 - 1


def since_within_log(since: int) -> None:
    """Refuse (``bad_field``) a ``since`` above the log head: no event the
    cluster ever wrote has it (the head read without the writers' lock is
    at least any seq already delivered)."""
    head = event_log_head()
    if since > head:
        raise ValidationError(f"since {since} is beyond the event log's head {head}")


def since_check(*, region: str, since: int) -> None:
    """Raise SinceTooOldError when the region's tombstones no longer cover
    ``since``: one pruned had a later seq, or the region was created after
    it (NoSuchRegionError without the region)."""
    floor = (
        Region.objects.filter(name=region)
        .values_list("tombstones_pruned_through", flat=True)
        .first()
    )
    if floor is None:
        raise NoSuchRegionError(f"region {region!r} does not exist")
    if since < floor:
        raise SinceTooOldError(
            f"since {since} is older than what region {region!r} still knows"
            f" ({floor}): register without since for a full image"
        )


def entries_changed_after(
    *, region: str, since: int, after: tuple[int, int] | None, limit: int
) -> list[ChangedEntry]:
    """The region's entries, tombstones too, whose last change is after
    seq ``since``, in (seq, id) order, from after the row at ``after`` (a
    ``ChangedEntry.position``; None: from the first), at most ``limit``.

    One statement on the (region, seq, id) index: its cost is the page's,
    whatever the size of the region. A row changed while the pages are
    read moves to a later seq, so it is read again there, never skipped.
    """
    seq, pk = after if after is not None else (since, _ID_MAX)
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT e.id, e.{quote('key')}, e.{quote('value')}, e.version,"  # noqa: S608
            " e.is_destroyed, e.seq"
            f" FROM {sql.table(Entry, connection)} e"
            f" WHERE e.region_id = (SELECT r.id FROM {sql.table(Region, connection)} r"
            " WHERE r.name = %s) AND (e.seq, e.id) > (%s, %s)"
            " ORDER BY e.seq, e.id LIMIT %s",
            [region, seq, pk, limit],
        )
        rows = cursor.fetchall()
    return [_changed(row) for row in rows]


def entries_changed_for_keys(
    *, region: str, keys: list[str], since: int
) -> list[ChangedEntry]:
    """The entries of ``keys``, tombstones too, whose last change is after
    seq ``since``, in the given key order (by the (region, key) index)."""
    found = {
        row[1]: row
        for row in Entry.objects.filter(
            region__name=region, key__in=keys, seq__gt=since
        ).values_list("pk", "key", "value", "version", "is_destroyed", "seq")
    }
    return [ChangedEntry._make(found[k]) for k in keys if k in found]


def _changed(row: tuple[Any, ...]) -> ChangedEntry:
    """A row of ``entries_changed_after``: its value is JSON text."""
    pk, key, value, version, is_destroyed, seq = row
    value = None if value is None else json.loads(value)
    return ChangedEntry(pk, key, value, version, bool(is_destroyed), seq)
