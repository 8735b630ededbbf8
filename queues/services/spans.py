"""Spans: queue rows that hold a run of a queue's events, from ``seq``
through ``through`` (``QueueEntry``). What the node store does to a
queue's rows by range, where a row may hold many events: count the events
an ack drops and cut the rows it reaches, and split spans into rows of
one event when the queue's mode changes (which may let their updates
conflate)."""

import functools
from typing import Any

from django.db import connections

from common import sql
from queues.models import QueuedEvent, QueueEntry
from queues.routers import NODE_STORE


@functools.cache
def held_between(after: str, up_to: str) -> str:
    """The join condition of queue rows ``e`` with the events ``v`` they
    hold after ``after`` through ``up_to`` (SQL expressions). One bound
    each way: given two lower bounds (the row's seq and ``after``), SQLite
    walks the events' key from the one it picks, the range's, to each
    row, not from the row."""
    connection = connections[NODE_STORE]
    seq, through = (connection.ops.quote_name(c) for c in ("seq", "through"))
    most, least = ("max", "min")
    if connection.vendor == "postgresql":
        most, least = ("GREATEST", "LEAST")
    return (
        f"v.{seq} >= {most}(e.{seq}, {after} + 1)"
        f" AND v.{seq} <= {least}(e.{through}, {up_to})"
    )


@functools.cache
def held_count(after: str, up_to: str) -> str:
    """How many events a queue row ``e`` holds after ``after`` through
    ``up_to`` (SQL expressions), as a scalar subquery: one range of the
    events' key per row, whatever the planner estimates. A join of the
    rows to the events instead lets PostgreSQL, with stale statistics,
    take the events as the outer side and scan the queues' rows once per
    event, for seconds while the heads stay locked."""
    events = sql.table(QueuedEvent, connections[NODE_STORE])
    return f"(SELECT COUNT(*) FROM {events} v WHERE {held_between(after, up_to)})"  # noqa: S608


@functools.cache
def cut_sql() -> tuple[str, str]:
    """Two statements that drop one queue's events through a seq, with
    parameters ``[queue, up_to, up_to]`` and ``[up_to, queue, up_to]``:
    delete the rows that end at or below it, then start the row across it
    (a span: at most one, rows do not overlap) after it. Both bound the
    rows' ``seq`` (a row ending at or below the seq starts there too), so
    they walk the queue's (queue, seq) index up to it, not every row of
    the queue."""
    quote = connections[NODE_STORE].ops.quote_name
    entries = sql.table(QueueEntry, connections[NODE_STORE])
    seq, through, queue = quote("seq"), quote("through"), quote("queue_id")
    return (
        f"DELETE FROM {entries} WHERE {queue} = %s AND {seq} <= %s"  # noqa: S608
        f" AND {through} <= %s",
        f"UPDATE {entries} SET {seq} = %s + 1"  # noqa: S608
        f" WHERE {queue} = %s AND {seq} <= %s",
    )


@functools.cache
def _count_sql() -> str:
    connection = connections[NODE_STORE]
    quote = connection.ops.quote_name
    entries = sql.table(QueueEntry, connection)
    return (
        f"SELECT COALESCE(SUM({held_count('0', '%s')}), 0)"  # noqa: S608
        f" FROM {entries} e"
        f" WHERE e.{quote('queue_id')} = %s AND e.{quote('seq')} <= %s"
    )


def queue_cut(cursor: Any, queue: Any, up_to: int) -> int:
    """Drop a locked queue's events through ``up_to`` (``queue``: its
    head's primary key as the driver takes it); return how many went."""
    cursor.execute(_count_sql(), [up_to, queue, up_to])
    (count,) = cursor.fetchone()
    delete, cut = cut_sql()
    cursor.execute(delete, [queue, up_to, up_to])
    cursor.execute(cut, [up_to, queue, up_to])
    return int(count)


def spans_split(queue: Any) -> int:
    """Make the events of a queue's spans (``queue``: its head's primary
    key as the driver takes it) rows of one event each, with the event's
    region, key and op, plain; return how many spans there were. In SQL:
    a span may hold a large backlog. Under the queue head's lock, as every
    writer of rows."""
    connection = connections[NODE_STORE]
    quote = connection.ops.quote_name
    entries = sql.table(QueueEntry, connection)
    events = sql.table(QueuedEvent, connection)
    seq, through, queue_id = quote("seq"), quote("through"), quote("queue_id")
    key, op, region = quote("key"), quote("op"), quote("region")
    spans = f"{queue_id} = %s AND {op} = %s"
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {seq}, {through} FROM {entries} WHERE {spans}",  # noqa: S608
            [queue, QueueEntry.SPAN],
        )
        ranges = cursor.fetchall()
        if not ranges:
            return 0
        cursor.execute(
            f"DELETE FROM {entries} WHERE {spans}",  # noqa: S608
            [queue, QueueEntry.SPAN],
        )
        columns = f"{queue_id}, {seq}, {region}, {key}, {op}, conflates, cq, {through}"
        cursor.executemany(
            f"INSERT INTO {entries} ({columns})"  # noqa: S608
            f" SELECT %s, {seq}, {region}, {key}, {op}, %s, NULL, {seq}"
            f" FROM {events} WHERE {seq} >= %s AND {seq} <= %s",
            [[queue, False, first, last] for first, last in ranges],
        )
    return len(ranges)
