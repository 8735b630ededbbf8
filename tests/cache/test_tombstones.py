"""The pruning of tombstones (cache.services.tombstones_prune): after their
keep time, in batches, leaving the region's marks behind."""

from datetime import timedelta

import pytest
from django.utils import timezone

from cache import selectors, services
from cache.exceptions import SinceTooOldError
from cache.models import Entry, Region
from clients import maintenance

pytestmark = pytest.mark.django_db(databases=["default", "node"])

DAY = 86400


def destroyed(*keys, age_s=2 * DAY):
    """Create and destroy ``keys`` (in order), their tombstones ``age_s``
    old; return the destroy events."""
    events = []
    for key in keys:
        services.entry_put(region="prices", key=key, value=key)
        events.append(services.entry_destroy(region="prices", key=key)[1])
    Entry.objects.filter(key__in=keys).update(
        updated_at=timezone.now() - timedelta(seconds=age_s)
    )
    return events


def marks():
    return Region.objects.values_list(
        "tombstones_pruned_through", "pruned_version"
    ).get(name="prices")


def test_only_tombstones_past_their_keep_time_go(region):
    destroyed("old")
    destroyed("young", age_s=60)
    services.entry_put(region="prices", key="live", value=1)
    Entry.objects.filter(key="live").update(
        updated_at=timezone.now() - timedelta(days=9)
    )
    assert services.tombstones_prune(keep_s=DAY) == 1
    assert sorted(Entry.objects.values_list("key", flat=True)) == ["live", "young"]
    assert services.tombstones_prune(keep_s=DAY) == 0


def test_pruning_goes_batch_by_batch_oldest_first(region):
    events = destroyed("a", "b", "c", "d", "e")
    for i, key in enumerate("abcde"):  # a is the oldest
        Entry.objects.filter(key=key).update(
            updated_at=timezone.now() - timedelta(days=10 - i)
        )
    assert services.tombstones_prune(keep_s=DAY, batch=2, batches=1) == 2
    assert sorted(Entry.objects.values_list("key", flat=True)) == ["c", "d", "e"]
    assert marks()[0] == events[1].seq
    assert services.tombstones_prune(keep_s=DAY, batch=2, batches=2) == 3
    assert not Entry.objects.exists()
    assert marks() == (events[-1].seq, 2)


def test_a_since_below_a_pruned_tombstone_is_too_old(region):
    _, second = destroyed("a", "b")
    services.tombstones_prune(keep_s=DAY)
    selectors.since_check(region="prices", since=second.seq)
    with pytest.raises(SinceTooOldError) as raised:
        selectors.since_check(region="prices", since=second.seq - 1)
    assert raised.value.code == "since_too_old"


def test_a_key_recreated_after_its_tombstone_went_keeps_growing_versions(region):
    services.entry_put(region="prices", key="k", value=1)
    services.entry_put(region="prices", key="k", value=2)
    destroyed("k")  # version 4 (a third put, then the destroy)
    services.tombstones_prune(keep_s=DAY)
    assert not Entry.objects.filter(key="k").exists()
    entry, event = services.entry_put(region="prices", key="k", value=3)
    assert (entry.version, event.op) == (5, "create")
    # Every door that creates rows starts above the pruned versions.
    [written] = services.entry_putall(region="prices", entries={"p": 1})
    [put] = services.entries_put_many(puts=[("prices", "m", 1)])
    assert (written.version, put.version) == (5, 5)


def test_the_tick_prunes_tombstones_after_the_keep_time(region, settings):
    settings.DURABLECACHE_TOMBSTONE_KEEP_S = 3600
    destroyed("old", age_s=7200)
    destroyed("young", age_s=60)
    maintenance.tick("node-1")
    assert list(Entry.objects.values_list("key", flat=True)) == ["young"]
