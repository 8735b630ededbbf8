"""The pruning of tombstones: the rows of destroyed keys, once kept long
enough for ``since`` catch-ups (docs/protocol.md, "Catching up by key").

A pruned tombstone leaves two marks on its region: its seq, below which a
``since`` is ``since_too_old`` (the catch-up could not say the key went),
and its version, above which a key without a row starts (its versions
keep growing when it is created again).
"""

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models.functions import Greatest
from django.utils import timezone

from cache.models import Entry, Region
from cache.services.log import lock_log

# Tombstones per transaction, and transactions per call.
PRUNE_BATCH = 1000
PRUNE_BATCHES = 10


def tombstones_prune(
    *, keep_s: float, batch: int = PRUNE_BATCH, batches: int = PRUNE_BATCHES
) -> int:
    """Delete the tombstones destroyed more than ``keep_s`` seconds ago,
    oldest first, ``batch`` rows a transaction, at most ``batches``
    transactions; return how many went.

    1. Look, without a lock, for one old enough (the tombstones' age
       index; most calls stop here).
    2. Per batch, lock the event log first, as writers do: a write that
       re-creates a key reads its region's ``pruned_version`` and the
       key's row under that lock, so it sees either the tombstone or the
       marks its pruning left, never neither.
    3. Delete the batch's rows and raise each region's marks to the
       highest seq and version pruned, in the same transaction.
    """
    cutoff = timezone.now() - timedelta(seconds=keep_s)
    old = Entry.objects.filter(is_destroyed=True, updated_at__lt=cutoff)
    if not old.exists():
        return 0
    pruned = 0
    for _ in range(batches):
        with transaction.atomic():
            lock_log(0)
            rows = list(
                old.order_by("updated_at").values_list(
                    "pk", "region_id", "seq", "version"
                )[:batch]
            )
            if rows:
                Entry.objects.filter(pk__in=[row[0] for row in rows]).delete()
                _raise_marks(rows)
        pruned += len(rows)
        if len(rows) < batch:
            break
    return pruned


def _raise_marks(rows: list[tuple[Any, ...]]) -> None:
    """Raise each region's marks to the highest seq and version among its
    pruned ``rows`` (pk, region id, seq, version)."""
    marks: dict[int, tuple[int, int]] = {}
    for _, region_id, seq, version in rows:
        high_seq, high_version = marks.get(region_id, (0, 0))
        marks[region_id] = (max(high_seq, seq), max(high_version, version))
    for region_id, (seq, version) in sorted(marks.items()):
        Region.objects.filter(pk=region_id).update(
            tombstones_pruned_through=Greatest("tombstones_pruned_through", seq),
            pruned_version=Greatest("pruned_version", version),
        )
