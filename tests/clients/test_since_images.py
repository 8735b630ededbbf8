"""``since`` images (clients.selectors.since_image_page and
cq_since_image_page): applied to what a client held at ``since``, they
give what the region holds now (docs/protocol.md, "Catching up by key")."""

import random
from datetime import timedelta

import pytest
from django.utils import timezone

from cache import services as cache_services
from cache.exceptions import SinceTooOldError
from cache.models import Entry, Event, EventLog
from clients import selectors
from clients.cq import compile_query
from clients.matching import parse_selector

pytestmark = pytest.mark.django_db

QUERY = "value.qty > 5"


def head():
    return EventLog.objects.get().last_seq


def held_at(since):
    """``{key: (value, version, is_destroyed)}`` as a client that applied
    every event of the log through ``since`` holds it."""
    held = {}
    for event in Event.objects.filter(seq__lte=since).order_by("seq"):
        if event.op == "region_clear":
            for key, (_, version, gone) in list(held.items()):
                if not gone:
                    held[key] = (None, version, True)
        elif event.op == "destroy":
            held[event.key] = (None, event.version, True)
        else:  # create, update, invalidate (value null)
            held[event.key] = (event.value, event.version, False)
    return held


def now_held():
    return {
        e.key: (None if e.is_destroyed else e.value, e.version, e.is_destroyed)
        for e in Entry.objects.all()
    }


def changed_after(since):
    """The keys a change after ``since`` touched, from the event log."""
    keys, live = set(), {k for k, (_, _, gone) in held_at(since).items() if not gone}
    for event in Event.objects.filter(seq__gt=since).order_by("seq"):
        if event.op == "region_clear":
            keys |= live
            live = set()
        else:
            keys.add(event.key)
            if event.op == "destroy":
                live.discard(event.key)
            else:
                live.add(event.key)
    return keys


def pages(read, size, **fields):
    """Every page of a since image, read ``size`` rows at a time."""
    found, after = [], None
    while True:
        page = read(after=after, size=size, **fields)
        assert page.items <= size
        found.append(page)
        if page.following is None:
            return found
        after = page.following


def interest_image(since, *, policy="keys_values", size=500, **selector):
    return pages(
        selectors.since_image_page,
        size,
        region="prices",
        selector=parse_selector(selector or {"all_keys": True}),
        policy=policy,
        since=since,
    )


def cq_image(since, *, size=500):
    return pages(
        selectors.cq_since_image_page, size, region="prices", query=QUERY, since=since
    )


def apply_entries(held, image):
    held = dict(held)
    for page in image:
        for item in page.fields["entries"]:
            if item.get("destroyed"):
                held[item["key"]] = (None, item["version"], True)
            else:
                held[item["key"]] = (item["value"], item["version"], False)
    return held


def members(held):
    compiled = compile_query(QUERY, region="prices")
    return {
        key: (value, version)
        for key, (value, version, gone) in held.items()
        if not gone and compiled.is_member(key, value)
    }


def apply_cq(held_members, image):
    held = dict(held_members)
    for page in image:
        for item in page.fields["entries"]:
            if item.get("destroyed") or item.get("cq_op") == "destroy":
                held.pop(item["key"], None)
            else:
                held[item["key"]] = (item["value"], item["version"])
    return held


def test_an_interest_image_holds_the_changes_after_since_tombstones_too(region):
    cache_services.entry_putall(region="prices", entries={"a": 1, "b": 2, "c": 3})
    since = head()
    cache_services.entry_put(region="prices", key="b", value=20)
    cache_services.entry_destroy(region="prices", key="c")
    cache_services.entry_invalidate(region="prices", key="a")
    cache_services.entry_put(region="prices", key="d", value=4)
    [page] = interest_image(since)
    assert page.fields == {
        "entries": [
            {"key": "b", "value": 20, "version": 2},
            {"key": "c", "version": 2, "destroyed": True},
            {"key": "a", "value": None, "version": 2},
            {"key": "d", "value": 4, "version": 1},
        ]
    }
    assert page.items == 4
    [keys] = interest_image(since, policy="keys")
    assert keys.fields == {"keys": ["b", "a", "d"], "destroyed": ["c"]}
    assert keys.items == 4
    [listed] = interest_image(since, keys=["d", "c", "untouched", "zz"])
    assert listed.fields["entries"] == [
        {"key": "d", "value": 4, "version": 1},
        {"key": "c", "version": 2, "destroyed": True},
    ]
    [matched] = interest_image(since, regex="[ab]")
    assert [e["key"] for e in matched.fields["entries"]] == ["b", "a"]
    assert interest_image(head())[0].fields == {"entries": []}


def test_a_cq_image_says_members_non_members_and_destroyed_keys(region):
    cache_services.entry_putall(
        region="prices",
        entries={"in": {"qty": 9}, "out": {"qty": 9}, "gone": {"qty": 9}},
    )
    since = head()
    cache_services.entry_put(region="prices", key="out", value={"qty": 1})
    cache_services.entry_destroy(region="prices", key="gone")
    cache_services.entry_put(region="prices", key="new", value={"qty": 7})
    cache_services.entry_put(region="prices", key="never", value={"qty": 2})
    [page] = cq_image(since)
    assert page.fields["entries"] == [
        {"key": "out", "version": 2, "cq_op": "destroy"},
        {"key": "gone", "version": 2, "destroyed": True},
        {"key": "new", "value": {"qty": 7}, "version": 1},
        {"key": "never", "version": 1, "cq_op": "destroy"},
    ]


def test_a_region_clear_after_since_is_every_live_key_destroyed(region):
    cache_services.entry_putall(region="prices", entries={"a": 1, "b": 2})
    since = head()
    cache_services.region_clear(name="prices")
    cache_services.entry_put(region="prices", key="b", value=3)
    [page] = interest_image(since)
    assert page.fields["entries"] == [
        {"key": "a", "version": 1, "destroyed": True},
        {"key": "b", "value": 3, "version": 2},
    ]


def test_pages_hold_at_most_their_size_and_go_on_through_shared_seqs(region):
    cache_services.entry_putall(
        region="prices", entries={f"k{i:03}": i for i in range(25)}
    )
    cache_services.region_clear(name="prices")  # 25 rows of one seq
    image = interest_image(0, size=10)
    assert [p.items for p in image] == [10, 10, 5]
    keys = [e["key"] for p in image for e in p.fields["entries"]]
    assert sorted(keys) == [f"k{i:03}" for i in range(25)]
    assert len(set(keys)) == 25


def test_a_tombstone_pruned_while_the_pages_are_read_makes_it_too_old(region):
    cache_services.entry_putall(region="prices", entries={f"k{i}": i for i in range(4)})
    since = head()
    for i in range(4):
        cache_services.entry_destroy(region="prices", key=f"k{i}")
    first = selectors.since_image_page(
        region="prices",
        selector=parse_selector({"all_keys": True}),
        policy="keys_values",
        since=since,
        after=None,
        size=2,
    )
    Entry.objects.update(updated_at=timezone.now() - timedelta(days=2))
    cache_services.tombstones_prune(keep_s=86400)
    with pytest.raises(SinceTooOldError):
        interest_image(since, size=2)
    with pytest.raises(SinceTooOldError):
        selectors.since_image_page(
            region="prices",
            selector=parse_selector({"all_keys": True}),
            policy="keys_values",
            since=since,
            after=first.following,
            size=2,
        )


def random_writes(rng, count, keys):
    """``count`` random writes over ``keys``: puts, destroys, invalidates,
    putalls, rounds of puts and, rarely, region clears."""
    live = set()

    def value():
        return rng.choice([None, {"qty": rng.randrange(10)}, rng.randrange(100)])

    for _ in range(count):
        roll = rng.random()
        key = rng.choice(keys)
        if roll < 0.005:
            cache_services.region_clear(name="prices")
            live.clear()
        elif roll < 0.2 and key in live:
            cache_services.entry_destroy(region="prices", key=key)
            live.discard(key)
        elif roll < 0.3 and key in live:
            cache_services.entry_invalidate(region="prices", key=key)
        elif roll < 0.38:
            chosen = rng.sample(keys, rng.randrange(1, 8))
            cache_services.entry_putall(
                region="prices", entries={k: value() for k in chosen}
            )
            live.update(chosen)
        elif roll < 0.46:
            chosen = [rng.choice(keys) for _ in range(rng.randrange(1, 8))]
            cache_services.entries_put_many(
                puts=[("prices", k, value()) for k in chosen]
            )
            live.update(chosen)
        else:
            cache_services.entry_put(region="prices", key=key, value=value())
            live.add(key)
        yield


def test_since_images_bring_any_past_state_to_the_present(region):
    """~2,000 random writes over 200 keys; from several ``since`` points,
    the image applied to what a client held then is what the region holds
    now, key for key (values, versions, destroyed keys), for every policy,
    selector and a CQ."""
    rng = random.Random(20261206)
    keys = [f"k{i:03}" for i in range(200)]
    points = [0]
    for i, _ in enumerate(random_writes(rng, 2000, keys)):
        if i in (150, 700, 1400, 1900, 1990):
            points.append(head())
    points.append(head())
    now = now_held()
    assert any(gone for _, _, gone in now.values())
    for since in points:
        then = held_at(since)
        image = interest_image(since, size=37)
        assert apply_entries(then, image) == now, since
        assert sum(p.items for p in image) == len(changed_after(since))

        listed = rng.sample(keys, 60)
        image = interest_image(since, size=37, keys=listed)
        got = apply_entries({k: v for k, v in then.items() if k in listed}, image)
        assert got == {k: v for k, v in now.items() if k in listed}

        image = interest_image(since, size=37, regex="k1.*")
        got = apply_entries({k: v for k, v in then.items() if k[1] == "1"}, image)
        assert got == {k: v for k, v in now.items() if k[1] == "1"}

        image = interest_image(since, policy="keys", size=37)
        live = {k for p in image for k in p.fields["keys"]}
        gone = {k for p in image for k in p.fields["destroyed"]}
        assert live | gone == changed_after(since)
        assert live == {k for k in live | gone if not now[k][2]}

        image = cq_image(since, size=37)
        assert apply_cq(members(then), image) == members(now), since
