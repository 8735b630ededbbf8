"""cache.group_commit: concurrent single puts of request threads, one round."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import close_old_connections, connections, transaction

from cache import group_commit, services
from cache.exceptions import NoSuchRegionError
from cache.models import Entry, Event
from common.errors import ValidationError

pytestmark = pytest.mark.django_db(transaction=True)

WAIT_S = 10


def wait_for(predicate, *, timeout):
    """Poll ``predicate`` until true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout}s")
        time.sleep(0.005)


@pytest.fixture
def region():
    return services.region_create(name="prices")


@pytest.fixture
def rounds(monkeypatch):
    """Each round's puts; the first round waits until ``hold`` puts have
    joined the group behind it (so the test decides what a round holds,
    not the scheduler)."""
    seen: list[list[tuple[str, str, object]]] = []
    held = {"behind": 0}
    real = services.entries_put_many

    def counting(*, puts):
        if not seen and held["behind"]:
            wait_for(
                lambda: len(group_commit.group._waiting) >= held["behind"],
                timeout=WAIT_S,
            )
        seen.append(list(puts))
        return real(puts=puts)

    monkeypatch.setattr(services, "entries_put_many", counting)
    return seen, held


def _in_threads(calls):
    """Run each call in a thread of its own; each one's result or error."""

    def run(call):
        try:
            return call()
        except Exception as exc:
            return exc
        finally:
            close_old_connections()
            connections.close_all()

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


def _put(key, value, region_name="prices"):
    return lambda: group_commit.entry_put_together(
        region=region_name, key=key, value=value
    )


def test_puts_that_arrive_together_are_one_round_each_its_own_event(region, rounds):
    seen, held = rounds
    held["behind"] = 4  # the first round is written once 4 more wait
    results = _in_threads([_put(f"k{i}", i) for i in range(5)])
    assert [len(r) for r in seen] == [1, 4]
    assert sorted(r.key for r in results) == [f"k{i}" for i in range(5)]
    assert len({r.event_id for r in results}) == 5
    # Each put answers with its own event, as committed.
    stored = {e.event_id: (e.key, e.value, e.version) for e in Event.objects.all()}
    for written in results:
        assert stored[written.event_id] == (written.key, int(written.key[1:]), 1)


def test_a_refused_put_fails_alone(region, rounds):
    seen, held = rounds
    held["behind"] = 2
    ok, bad_key, no_region = _in_threads(
        [_put("a", 1), _put("bad\u0000key", 2), _put("b", 3, region_name="nowhere")]
    )
    assert ok.key == "a"
    assert isinstance(bad_key, ValidationError)
    assert isinstance(no_region, NoSuchRegionError)
    assert [len(puts) for puts in seen] == [1, 2]  # refused in their round
    assert sorted(Entry.objects.values_list("key", flat=True)) == ["a"]


def test_a_failed_round_fails_its_puts_and_the_next_round_is_written(
    region, monkeypatch
):
    real = services.entries_put_many
    calls = []

    def failing_first(*, puts):
        calls.append(puts)
        if len(calls) == 1:
            # The second put joins the next round while this one fails.
            wait_for(lambda: len(group_commit.group._waiting) >= 1, timeout=WAIT_S)
            raise RuntimeError("database down")
        return real(puts=puts)

    def second():
        wait_for(lambda: group_commit.group._writing, timeout=WAIT_S)
        return group_commit.entry_put_together(region="prices", key="b", value=2)

    monkeypatch.setattr(services, "entries_put_many", failing_first)
    first, written = _in_threads([_put("a", 1), second])
    assert isinstance(first, RuntimeError)
    assert written.key == "b"
    assert [[key for _, key, _ in puts] for puts in calls] == [["a"], ["b"]]
    # The failed round wrote nothing; the one it handed over did.
    assert list(Entry.objects.values_list("key", flat=True)) == ["b"]
    assert not group_commit.group._writing  # the group is free again


class _RolledBackError(Exception):
    pass


def test_a_put_inside_a_transaction_is_written_alone_in_it(region, rounds):
    seen, _ = rounds
    try:
        with transaction.atomic():
            group_commit.entry_put_together(region="prices", key="a", value=1)
            inside = Entry.objects.filter(key="a").exists()
            raise _RolledBackError
    except _RolledBackError:
        pass
    assert inside  # written in the caller's transaction...
    assert not Entry.objects.filter(key="a").exists()  # ...and rolled back
    assert seen == [[("prices", "a", 1)]]
    assert not group_commit.group._writing
