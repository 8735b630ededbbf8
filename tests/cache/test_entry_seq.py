"""Each entry row keeps the seq of its last change, written by the very
statement that writes the row, and the region's ``since`` marks
(docs/protocol.md, "Catching up by key")."""

import pytest
from django.db import connection
from django.db.backends.utils import CursorWrapper

from cache import selectors, services
from cache.exceptions import SinceTooOldError
from cache.models import Entry, Event, EventLog, Region
from common.errors import ValidationError

pytestmark = pytest.mark.django_db


def seqs():
    """``{key: (seq, is_destroyed)}`` of the region's rows."""
    return {
        key: (seq, destroyed)
        for key, seq, destroyed in Entry.objects.values_list(
            "key", "seq", "is_destroyed"
        )
    }


def last_seq_of(key):
    return Event.objects.filter(key=key).order_by("-seq").values_list("seq")[0][0]


def test_every_single_key_write_stamps_the_row_with_its_event(region):
    _, created = services.entry_put(region="prices", key="a", value=1)
    assert seqs() == {"a": (created.seq, False)}
    _, updated = services.entry_put(region="prices", key="a", value=2)
    _, other = services.entry_put(region="prices", key="b", value=1)
    _, invalidated = services.entry_invalidate(region="prices", key="b")
    _, destroyed = services.entry_destroy(region="prices", key="a")
    assert seqs() == {"a": (destroyed.seq, True), "b": (invalidated.seq, False)}
    assert updated.seq < other.seq < invalidated.seq < destroyed.seq


def test_a_putall_stamps_each_row_with_its_own_event(region):
    services.entry_put(region="prices", key="b", value=0)
    written = services.entry_putall(region="prices", entries={"a": 1, "b": 2})
    assert seqs() == {w.key: (w.seq, False) for w in written}


def test_a_round_of_puts_stamps_a_key_put_twice_with_its_last_put(region):
    services.entry_put(region="prices", key="old", value=0)
    written = services.entries_put_many(
        puts=[("prices", "a", 1), ("prices", "old", 1), ("prices", "a", 2)]
    )
    assert seqs() == {"a": (written[2].seq, False), "old": (written[1].seq, False)}


def test_a_region_clear_stamps_every_live_row_with_the_clear(region):
    services.entry_put(region="prices", key="a", value=1)
    services.entry_put(region="prices", key="gone", value=1)
    _, destroyed = services.entry_destroy(region="prices", key="gone")
    cleared = services.region_clear(name="prices")
    # A tombstone already there keeps its own seq: it went before the clear.
    assert seqs() == {"a": (cleared.seq, True), "gone": (destroyed.seq, True)}


def test_a_region_is_created_with_the_log_head_as_its_since_floor(db):
    services.region_create(name="first")
    services.entry_put(region="first", key="k", value=1)
    services.entry_put(region="first", key="k", value=2)
    later = services.region_create(name="later")
    assert Region.objects.get(name="first").tombstones_pruned_through == 0
    assert later.tombstones_pruned_through == 2
    selectors.since_check(region="later", since=2)
    with pytest.raises(SinceTooOldError):
        selectors.since_check(region="later", since=1)


def test_a_since_above_the_log_head_is_a_bad_field(region):
    services.entry_put(region="prices", key="k", value=1)
    selectors.since_within_log(1)
    with pytest.raises(ValidationError):
        selectors.since_within_log(2)


def test_changed_after_reads_tombstones_too_in_seq_order_page_by_page(region):
    for key in ("a", "b", "c", "d"):
        services.entry_put(region="prices", key=key, value=key)
    since = EventLog.objects.get().last_seq
    services.entry_put(region="prices", key="c", value="c2")
    services.entry_destroy(region="prices", key="a")
    services.region_clear(name="prices")  # b, c, d share its seq
    services.entry_put(region="prices", key="e", value="e")
    keys, after = [], None
    while True:
        page = selectors.entries_changed_after(
            region="prices", since=since, after=after, limit=2
        )
        keys += [(row.key, row.is_destroyed) for row in page]
        if len(page) < 2:
            break
        after = page[-1].position
    # a (destroyed before the clear), then the clear's rows by id, then e.
    assert keys == [
        ("a", True),
        ("b", True),
        ("c", True),
        ("d", True),
        ("e", False),
    ]


def test_changed_for_keys_reads_the_keys_given_in_their_order(region):
    services.entry_put(region="prices", key="a", value=1)
    services.entry_put(region="prices", key="b", value=1)
    since = EventLog.objects.get().last_seq
    services.entry_put(region="prices", key="b", value=2)
    services.entry_destroy(region="prices", key="a")
    rows = selectors.entries_changed_for_keys(
        region="prices", keys=["b", "nope", "a"], since=since
    )
    assert [(r.key, r.value, r.version, r.is_destroyed) for r in rows] == [
        ("b", 2, 2, False),
        ("a", None, 2, True),
    ]


def plan_of(statement, params):
    """The database's plan for a statement, as one text."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # Whether an index serves the statement in its order, whatever
            # the planner would choose for a table this small.
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_sort = off")
            cursor.execute(f"EXPLAIN {statement}", params)
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {statement}", params)
        return "\n".join(str(row) for row in cursor.fetchall())


def test_a_since_page_is_one_range_of_the_region_seq_index(region, monkeypatch):
    services.entry_put(region="prices", key="a", value=1)
    sent = []
    execute = CursorWrapper.execute

    def recording(self, sql, params=None):
        sent.append((sql, params))
        return execute(self, sql, params)

    monkeypatch.setattr(CursorWrapper, "execute", recording)
    selectors.entries_changed_after(region="prices", since=0, after=(5, 7), limit=500)
    monkeypatch.undo()
    [(statement, params)] = sent
    plan = plan_of(statement, params)
    assert "entry_region_seq" in plan, plan
    # A range of it: the page starts at (seq, id), not at the region's start.
    if connection.vendor == "postgresql":
        conditions = [line for line in plan.splitlines() if "Index Cond" in line]
        assert any("ROW(seq, id) > ROW(" in line for line in conditions), plan
    else:
        assert "(region_id=? AND seq>?)" in plan, plan
    # The index gives the order: no sort of the region's changed rows.
    assert "Sort" not in plan, plan
    assert "TEMP B-TREE" not in plan, plan
