"""Regions: their creation, their destruction, and the clearing of all
their entries, each but the creation an event of its own."""

from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from cache.exceptions import NoSuchRegionError, RegionExistsError
from cache.models import Entry, Event, Op, Region
from cache.services.log import append_events, lock_log
from cache.validation import validate_name
from common import sql
from common.errors import ValidationError


def region_by_name(name: str, cursor: Any = None) -> Region:
    """The region ``name`` with its id, ``conflate_events`` and
    ``pruned_version`` only (what a write needs of it), read with
    ``cursor`` when the write has one."""
    if cursor is None:
        with connection.cursor() as cursor:
            return region_by_name(name, cursor)
    cursor.execute(
        "SELECT id, conflate_events, pruned_version"  # noqa: S608
        f" FROM {sql.table(Region, cursor.db)}"
        " WHERE name = %s",
        [name],
    )
    row = cursor.fetchone()
    if row is None:
        raise NoSuchRegionError(f"region {name!r} does not exist")
    return Region.from_db(
        connection.alias,
        ["id", "name", "conflate_events", "pruned_version"],
        [row[0], name, row[1], row[2]],
    )


def region_create(*, name: str, conflate_events: bool = False) -> Region:
    """Create a region; a second create of the same name is a conflict.

    A ``since`` catch-up from before the creation is ``since_too_old``: a
    region of that name destroyed earlier left no tombstones to say which
    of its keys went."""
    validate_name(name, what="region name")
    if not isinstance(conflate_events, bool):
        raise ValidationError("conflate_events must be a boolean")
    with transaction.atomic():
        head = lock_log(0)
        if Region.objects.filter(name=name).exists():
            raise RegionExistsError(f"region {name!r} already exists")
        return Region.objects.create(
            name=name, conflate_events=conflate_events, tombstones_pruned_through=head
        )


def region_destroy(*, name: str) -> Event:
    """Delete a region and its entries; emit ``region_destroy``."""
    with transaction.atomic():
        before = lock_log(1)
        region = region_by_name(name)
        (event,) = append_events(
            before, [{"region": name, "key": None, "op": Op.REGION_DESTROY}]
        )
        region.delete()
    return event


def region_clear(*, name: str) -> Event:
    """Destroy every entry of a region (versions are kept); emit one event."""
    with transaction.atomic():
        before = lock_log(1)
        region = region_by_name(name)
        Entry.objects.filter(region=region, is_destroyed=False).update(
            is_destroyed=True, value=None, updated_at=timezone.now(), seq=before + 1
        )
        (event,) = append_events(
            before, [{"region": name, "key": None, "op": Op.REGION_CLEAR}]
        )
    return event
