"""Reads of regions, entries, events and nodes, shaped for the doors."""

from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from durablecache.cache.exceptions import NoSuchRegionError, NotFoundError
from durablecache.cache.models import Entry, Event, EventLog, Node, Region


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


def entries_iter(*, region: str, batch: int = 500):
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


def events_after(*, seq: int, limit: int) -> list[Event]:
    return list(Event.objects.filter(seq__gt=seq).order_by("seq")[:limit])


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
