"""The event log's lock and appends: every write takes the lock first and
appends its events under it.

Lock order everywhere: the EventLog row first, then entry rows. The first
lock serialises writers, which makes event seq order equal commit order and
per-key versions strictly increasing (docs/protocol.md#ordering).
"""

import uuid
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.utils import timezone

from cache import hooks
from cache.models import Event, EventLog
from common import sql


def lock_log(reserve: int, cursor: Any = None) -> int:
    """Lock the event log and reserve ``reserve`` seqs; return the seq
    before them.

    One statement (UPDATE ... RETURNING) both takes the row lock that
    serialises writers and hands out the seqs, instead of a locking read
    and a later write. Call inside a transaction, before any other lock.
    ``cursor``: the write's own, if it has one (see ``entries_put_many``).
    """
    if cursor is None:
        with connection.cursor() as cursor:
            return lock_log(reserve, cursor)
    table = EventLog._meta.db_table
    for _ in range(2):
        cursor.execute(
            f"UPDATE {table} SET last_seq = last_seq + %s WHERE id = 1"  # noqa: S608
            " RETURNING last_seq",
            [reserve],
        )
        row = cursor.fetchone()
        if row is not None:
            return int(row[0]) - reserve
        EventLog.objects.get_or_create(pk=1)
    raise RuntimeError("the event log row cannot be created")


def event_log_head_locked() -> int:
    """Lock the event log until the caller's transaction ends and return
    its head, reserving nothing (``lock_log``): every write that reserved
    a seq has committed, and none commits another before the caller does.
    Unlike a write, the caller may hold other locks first, none of which a
    writer takes (``clients.services._end_interests``: client rows)."""
    return lock_log(0)


def insert_sql(model: Any, fields: list[Any]) -> str:
    """``INSERT`` of ``fields`` into ``model``'s table on the cluster."""
    return sql.insert_sql(model, fields, connection)


EVENT_FIELDS = list(Event._meta.concrete_fields)


def append_events(before: int, specs: list[dict[str, Any]]) -> list[Event]:
    """Give each spec its reserved seq (after ``before``) and an id, and
    insert them in one batch."""
    now = timezone.now()
    events = [
        Event(seq=before + i, event_id=uuid.uuid4().hex, ts=now, **spec)
        for i, spec in enumerate(specs, start=1)
    ]
    rows = sql.prepared_rows(events, EVENT_FIELDS, connections[DEFAULT_DB_ALIAS])
    with connection.cursor() as cursor:
        cursor.executemany(insert_sql(Event, EVENT_FIELDS), rows)
    for event in events:
        event._state.adding = False
    hooks.events_written(before + len(specs))
    return events
