"""cache.services.entries_put_many: the websocket's puts of one round."""

import pytest

from cache import services
from cache.exceptions import NoSuchRegionError
from cache.models import Entry, Event, EventLog
from common.errors import ValidationError

pytestmark = pytest.mark.django_db


def test_each_put_is_its_own_event_in_the_order_given(region):
    written = services.entries_put_many(
        puts=[("prices", "a", 1), ("prices", "b", {"x": [1]}), ("prices", "a", None)]
    )
    assert [(w.key, w.op, w.version) for w in written] == [
        ("a", "create", 1),
        ("b", "create", 1),
        ("a", "update", 2),
    ]
    assert [w.seq for w in written] == [written[0].seq + i for i in range(3)]
    events = list(Event.objects.order_by("seq"))
    assert [(e.seq, e.event_id, e.key, e.value) for e in events] == [
        (w.seq, w.event_id, w.key, v)
        for w, v in zip(written, [1, {"x": [1]}, None], strict=True)
    ]
    entries = {e.key: (e.value, e.version) for e in Entry.objects.all()}
    assert entries == {"a": (None, 2), "b": ({"x": [1]}, 1)}


def test_versions_go_on_from_the_stored_ones(region):
    services.entry_put(region="prices", key="a", value=1)
    services.entry_put(region="prices", key="gone", value=1)
    services.entry_destroy(region="prices", key="gone")
    written = services.entries_put_many(
        puts=[("prices", "a", 2), ("prices", "gone", 3)]
    )
    assert [(w.key, w.op, w.version) for w in written] == [
        ("a", "update", 2),
        ("gone", "create", 3),  # re-created: its version continues
    ]
    assert Entry.objects.get(key="gone").is_destroyed is False


def test_a_refused_put_gets_its_error_and_the_others_are_written(region):
    results = services.entries_put_many(
        puts=[
            ("prices", "ok", 1),
            ("nowhere", "k", 1),
            ("prices", "bad\x00key", 1),
            ("prices", "nan", float("nan")),
            ("prices", "ok2", 2),
        ]
    )
    assert isinstance(results[1], NoSuchRegionError)
    assert isinstance(results[2], ValidationError)
    assert isinstance(results[3], ValidationError)
    assert [(r.key, r.version) for r in (results[0], results[4])] == [
        ("ok", 1),
        ("ok2", 1),
    ]
    assert sorted(Event.objects.values_list("key", flat=True)) == ["ok", "ok2"]
    # The refused puts' seqs were given back: no gap, the log ends there.
    assert results[4].seq == results[0].seq + 1
    assert EventLog.objects.get().last_seq == results[4].seq
    assert services.entries_put_many(puts=[("prices", "next", 3)])[0].seq == (
        results[4].seq + 1
    )


@pytest.mark.parametrize(
    ("put", "error"),
    [
        (("nowhere", "k", 1), NoSuchRegionError),  # refused for its region
        (("prices", "bad\x00key", 1), ValidationError),  # invalid: no seq reserved
    ],
)
def test_only_refused_puts_write_nothing(region, put, error):
    before = EventLog.objects.get().last_seq
    results = services.entries_put_many(puts=[put])
    assert isinstance(results[0], error)
    assert not Event.objects.exists()
    assert EventLog.objects.get().last_seq == before


def test_a_round_over_the_limit_is_refused(region):
    puts = [("prices", f"k{i}", i) for i in range(services.MAX_PUTS_PER_ROUND + 1)]
    with pytest.raises(ValidationError):
        services.entries_put_many(puts=puts)


def test_puts_of_two_regions_read_each_regions_own_rows(region):
    services.region_create(name="rates")
    services.entry_put(region="prices", key="k", value="p1")
    services.entry_put(region="rates", key="k", value="r1")
    written = services.entries_put_many(
        puts=[("rates", "k", "r2"), ("prices", "k", "p2"), ("rates", "new", 0)]
    )
    assert [(w.key, w.op, w.version) for w in written] == [
        ("k", "update", 2),
        ("k", "update", 2),
        ("new", "create", 1),
    ]
    # Each event's prior value is its own region's row.
    priors = {
        (e.region, e.key): e.prior_value
        for e in Event.objects.filter(seq__in=[w.seq for w in written])
    }
    assert priors == {
        ("rates", "k"): "r1",
        ("prices", "k"): "p1",
        ("rates", "new"): None,
    }
