"""common.sql: statements and prepared values for the hot paths."""

import datetime as dt
import json
import time

import pytest
from django.db import OperationalError, connections, transaction
from django.test.utils import CaptureQueriesContext

from cache.models import Entry, Event
from common import sql

FIELDS = list(Event._meta.concrete_fields)


class _CountingField:
    """A field that records what it was asked to prepare."""

    def __init__(self, attname):
        self.attname = attname
        self.prepared = []

    def get_db_prep_save(self, value, connection):
        self.prepared.append(value)
        return ("prepared", value)


def test_prepared_rows_are_what_each_field_prepares():
    now = dt.datetime(2026, 12, 2, 1, 2, 3, 456789, tzinfo=dt.UTC)
    events = [
        Event(seq=s, event_id=f"e{s}", ts=now, key=f"k{s}", op="update", value={"s": s})
        for s in (1, 2)
    ]
    connection = connections["default"]
    rows = sql.prepared_rows(events, FIELDS, connection)
    assert _plain(rows) == _plain(
        [
            [f.get_db_prep_save(getattr(e, f.attname), connection) for f in FIELDS]
            for e in events
        ]
    )


def _plain(rows):
    """psycopg's JSON adapters compare by identity: compare what they wrap."""
    return [[getattr(v, "obj", v) for v in row] for row in rows]


def test_a_value_repeating_the_previous_rows_object_is_prepared_once():
    shared_ts, op = object(), "update"

    class Row:
        def __init__(self, value):
            self.ts, self.op, self.value = shared_ts, op, value

    ts, op_field, value = (_CountingField(n) for n in ("ts", "op", "value"))
    equal_but_distinct = [{"a": 1}, {"a": 1}]
    rows = sql.prepared_rows(
        [Row(v) for v in equal_but_distinct], [ts, op_field, value], None
    )
    assert ts.prepared == [shared_ts]
    assert op_field.prepared == [op]
    # Equal values that are different objects are each prepared: identity,
    # not equality, decides (a mutable value is never taken for another).
    assert len(value.prepared) == 2
    assert [row[2] for row in rows] == [("prepared", {"a": 1})] * 2


@pytest.mark.parametrize("count", [0, 1, 3])
def test_prepared_rows_has_one_row_per_object(count):
    field = _CountingField("x")

    class Obj:
        x = 7

    assert (
        sql.prepared_rows([Obj()] * count, [field], None) == [[("prepared", 7)]] * count
    )


@pytest.mark.parametrize(("count", "size"), [(0, 3), (3, 3), (7, 3), (2, 5)])
def test_chunks_cover_every_item_once_in_order(count, size):
    items = list(range(count))
    parts = list(sql.chunks(items, size))
    assert [i for part in parts for i in part] == items
    assert all(0 < len(part) <= size for part in parts)


AWKWARD = [
    {"tab\t": "line\nbreak", "back\\slash": "\\N", "quote": "'\""},
    "caf\u00e9 \U0001f600",
    [1, 2.5, None, True],
    None,
]


@pytest.mark.django_db
def test_inserted_rows_read_back_as_written():
    # On PostgreSQL the rows go through COPY's text format: its escapes
    # (tab, newline, backslash, \N for null) must not touch the values.
    connection = connections["default"]
    now = dt.datetime(2026, 12, 2, 1, 2, 3, 456789, tzinfo=dt.UTC)
    ts = Event._meta.get_field("ts").get_db_prep_save(now, connection)
    rows = [
        [
            i + 1,
            f"e{i}",
            "r\tx",
            f"k\n{i}",
            "update",
            value_text,
            i,
            False,
            ts,
            value_text,
        ]
        for i, value_text in enumerate(
            None if v is None else json.dumps(v) for v in AWKWARD
        )
    ]
    sql.insert_rows(connection, Event, FIELDS, rows)
    got = Event.objects.order_by("seq").values_list(
        "region", "key", "value", "ts", "prior_value"
    )
    got = list(got)
    assert got == [("r\tx", f"k\n{i}", v, now, v) for i, v in enumerate(AWKWARD)]


@pytest.mark.django_db
def test_inserted_rows_are_one_logged_statement():
    # PostgreSQL's COPY goes past Django's cursor: it is logged as an
    # executemany is, so query counts see it on either vendor.
    connection = connections["default"]
    ts = Event._meta.get_field("ts").get_db_prep_save(
        dt.datetime.now(dt.UTC), connection
    )
    rows = [
        [seq, f"e{seq}", "r", "k", "update", "1", 1, False, ts, None] for seq in (1, 2)
    ]
    with CaptureQueriesContext(connection) as logged:
        sql.insert_rows(connection, Event, FIELDS, rows)
    [query] = logged.captured_queries
    assert query["sql"].startswith("2 times: ")
    assert Event.objects.count() == 2


@pytest.mark.django_db
def test_inserting_no_rows_is_nothing():
    sql.insert_rows(connections["default"], Event, FIELDS, [])
    assert not Event.objects.exists()


@pytest.mark.django_db
def test_updated_rows_are_matched_on_every_key_and_others_are_left_alone():
    # On PostgreSQL one UPDATE over arrays (unnest), elsewhere one per row.
    connection = connections["default"]
    then = dt.datetime(2026, 12, 2, 1, 2, 3, tzinfo=dt.UTC)
    later = then + dt.timedelta(seconds=5, microseconds=7)
    for seq, (region, key) in enumerate(
        [("r", "a"), ("r", "b"), ("s", "a"), ("r", "c\t'x")], start=1
    ):
        Event.objects.create(
            seq=seq, event_id=f"e{seq}", region=region, key=key, op="update", ts=then
        )
    fields = [Event._meta.get_field(f) for f in ("op", "version", "ts")]
    keys = [Event._meta.get_field(f) for f in ("region", "key")]
    ts = Event._meta.get_field("ts").get_db_prep_save(later, connection)
    rows = [
        ["destroy", 7, ts, "r", "a"],
        ["invalidate", None, ts, "r", "c\t'x"],
        ["destroy", 9, ts, "t", "a"],  # no such row: nothing
    ]
    sql.update_rows(connection, Event, fields, keys, rows)
    got = Event.objects.order_by("seq").values_list("op", "version", "ts")
    assert list(got) == [
        ("destroy", 7, later),
        ("update", None, then),
        ("update", None, then),
        ("invalidate", None, later),
    ]


@pytest.mark.django_db
def test_updating_no_rows_sends_no_statement(django_assert_num_queries):
    with django_assert_num_queries(0):
        sql.update_rows(connections["default"], Event, FIELDS[:1], FIELDS[1:2], [])


def test_a_table_is_due_for_vacuum_past_both_bounds():
    stats = [
        ("few_dead", 100, 9_999),
        ("churned", 100, 10_000),
        ("big", 1_000_000, 199_999),
        ("bigger", 1_000_000, 200_000),
    ]
    assert sql.due_for_vacuum(stats) == ["bigger", "churned"]


def test_a_table_is_due_for_analyze_past_a_base_and_a_tenth():
    stats = [
        ("new", 0, 999),
        ("filled", 0, 1_000),
        ("big", 1_000_000, 100_999),
        ("changed", 1_000_000, 101_000),
    ]
    assert sql.due_for_analyze(stats) == ["changed", "filled"]


@pytest.mark.django_db(transaction=True)
def test_stale_statistics_are_analyzed_on_postgresql(monkeypatch):
    connection = connections["default"]
    if connection.vendor != "postgresql":
        assert sql.vacuum_bloated(connection, [Event]) == []
        return
    monkeypatch.setattr(sql, "ANALYZE_MIN_CHANGED", 0)
    monkeypatch.setattr(sql, "ANALYZE_CHANGED_SHARE", 0.0)  # every table is due

    def analyzed() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT analyze_count FROM pg_stat_user_tables WHERE relname = %s",
                [Event._meta.db_table],
            )
            return cursor.fetchone()[0]

    before = analyzed()
    assert Event._meta.db_table in sql.vacuum_bloated(connection, [Event])
    # The statistics collector reports with a delay: wait for the count.
    deadline = time.monotonic() + 10
    while analyzed() == before and time.monotonic() < deadline:
        connection.close()  # a new backend reads fresh statistics
        time.sleep(0.1)
    assert analyzed() == before + 1


@pytest.mark.django_db(transaction=True)
def test_vacuum_runs_on_postgresql_and_outside_a_transaction_only(monkeypatch):
    # transaction=True: outside the atomic block below there is no
    # transaction, as in a worker's tick.
    monkeypatch.setattr(sql, "VACUUM_MIN_DEAD", 0)
    monkeypatch.setattr(sql, "VACUUM_DEAD_SHARE", 0.0)  # every table is due
    connection = connections["default"]
    with transaction.atomic():
        assert sql.vacuum_bloated(connection, [Event, Entry]) == []
    done = sql.vacuum_bloated(connection, [Event, Entry])
    if connection.vendor != "postgresql":
        assert done == []  # SQLite reuses a deleted row's space
        return
    assert done == sorted([Event._meta.db_table, Entry._meta.db_table])


@pytest.fixture
def held_lock(tmp_path, django_db_blocker):
    """A connection of the default database's kind that waits (``waiter``)
    and another that holds a write lock on what it writes (``holder``), on a
    scratch table outside pytest-django's transaction: a scratch file on
    SQLite (the test database is in memory there), the test database on
    PostgreSQL."""
    default = connections["default"]
    settings = dict(default.settings_dict)
    if default.vendor == "sqlite":
        settings["NAME"] = str(tmp_path / "locks.sqlite3")
    holder, waiter = (type(default)(dict(settings), alias=f"locks{i}") for i in (0, 1))
    connections[waiter.alias] = waiter  # for transaction.atomic(using=...)
    with django_db_blocker.unblock():
        with holder.cursor() as cursor:
            cursor.execute("CREATE TABLE lock_probe (n integer)")
            cursor.execute("INSERT INTO lock_probe VALUES (1)")
        holder.set_autocommit(
            False, force_begin_transaction_with_broken_autocommit=True
        )
        with holder.cursor() as cursor:
            cursor.execute("UPDATE lock_probe SET n = 2")
        try:
            yield waiter
        finally:
            holder.rollback()
            holder.set_autocommit(True)
            with holder.cursor() as cursor:
                cursor.execute("DROP TABLE lock_probe")
            waiter.close()
            holder.close()
            del connections[waiter.alias]


def _lock_wait_setting(connection):
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SHOW lock_timeout")
        else:
            cursor.execute("PRAGMA busy_timeout")
        return cursor.fetchone()[0]


@pytest.mark.django_db  # the test database made (the scratch table is on it)
def test_a_bounded_lock_wait_raises_instead_of_waiting_on(held_lock):
    """What the supervisor's heartbeat relies on: a write whose lock another
    transaction holds fails after the bound (without it: 30 s on SQLite,
    no end on PostgreSQL), and the connection's own setting is back."""
    waiter = held_lock
    before = _lock_wait_setting(waiter)
    with sql.lock_wait_bounded(waiter, 0.05), waiter.cursor() as cursor:
        assert str(_lock_wait_setting(waiter)) in ("50", "50ms")
        with pytest.raises(OperationalError):
            cursor.execute("UPDATE lock_probe SET n = 3")
    assert _lock_wait_setting(waiter) == before
