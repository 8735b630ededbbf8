"""This node's fan-out cursor: how far it has read the cluster's event
log, moved in the transaction of the appends it read for."""

import functools
from typing import Any

from django.db import connections, transaction
from django.utils import timezone

from common import sql
from queues.models import FanoutCursor, QueuedEvent, QueueEntry, QueueState
from queues.routers import NODE_STORE


def cursor_lock(node: str) -> FanoutCursor:
    """Lock this node's fan-out cursor (call inside a node-store transaction)."""
    cursor, _ = FanoutCursor.objects.select_for_update().get_or_create(node=node)
    return cursor


# The cursor's read and move run once per fan-out, about once per write
# under a light load: SQL, not querysets
# (docs/decisions/0010-hot-statements-in-sql.md). cursor_lock and
# cursor_init, which may create the row, are querysets.


def cursor_read_locked(node: str) -> int:
    """Lock this node's fan-out cursor and return how far it has read
    (call inside a node-store transaction; the cursor is created at 0 if
    it is missing, as ``cursor_lock`` does)."""
    connection = connections[NODE_STORE]
    lock = sql.for_update(connection)
    through = _cursor_position(connection, node, lock=lock)
    return cursor_lock(node).fanout_through if through is None else through


def cursor_flushed(node: str) -> int:
    """How far this node's fan-out has read the log, as it stands on disk.

    Fan-outs commit without waiting for the flush on PostgreSQL
    (``commit_unflushed``), so the cursor they leave may be ahead of what
    a crash of the server keeps. This writes the cursor back in a commit
    that does wait, which flushes the WAL through every commit before it:
    the value returned survives. (SQLite: its value as is.)
    """
    connection = connections[NODE_STORE]
    if connection.vendor != "postgresql":
        return _cursor_position(connection, node, lock="") or 0
    with transaction.atomic(using=NODE_STORE):
        through = _cursor_position(connection, node, lock=" FOR UPDATE") or 0
        cursor_move(node, through)  # nothing when there is no cursor yet
    return through


def _cursor_position(connection: Any, node: str, *, lock: str) -> int | None:
    """The cursor's position, None when the node has none yet (not made
    here: ``cursor_init`` places a new one, ``cursor_lock`` a missing one)."""
    with connection.cursor() as cursor:
        cursor.execute(_cursor_sql(connection.vendor, "read") + lock, [node])
        row = cursor.fetchone()
    return None if row is None else int(row[0])


def cursor_move(node: str, through: int) -> None:
    """Move this node's locked fan-out cursor to ``through``."""
    connection = connections[NODE_STORE]
    at = FanoutCursor._meta.get_field("updated_at").get_db_prep_save(
        timezone.now(), connection
    )
    with connection.cursor() as cursor:
        cursor.execute(_cursor_sql(connection.vendor, "move"), [through, at, node])


@functools.cache
def _cursor_sql(vendor: str, which: str) -> str:
    table = sql.table(FanoutCursor, connections[NODE_STORE])
    if which == "read":
        return f"SELECT fanout_through FROM {table} WHERE node = %s"  # noqa: S608
    return f"UPDATE {table} SET fanout_through = %s, updated_at = %s WHERE node = %s"  # noqa: S608


def cursor_init(*, node: str, head: int, oldest: int | None) -> int:
    """Place this node's fan-out cursor at start; return queues dropped.

    A new store gets its cursor at ``head``: it hosts no queue yet, so
    events before ``head`` concern no one here. So does a store that hosts
    no queue (a node that handed its queues over when it stopped), which
    would otherwise read every event it missed, up to the log's retention,
    before its first useful fan-out. A store whose cursor is behind the
    oldest event still in the log (``oldest``; or behind ``head`` when the
    log is empty) missed events pruned meanwhile, which the cluster allows
    only for a node that was down and hosted nothing: its queues are stale
    copies, so they are dropped and the cursor jumps to ``head`` (a copy
    placed here later starts from there).
    """
    with transaction.atomic(using=NODE_STORE):
        cursor, created = FanoutCursor.objects.select_for_update().get_or_create(
            node=node, defaults={"fanout_through": head}
        )
        if created:
            return 0
        if not QueueState.objects.exists():
            if cursor.fanout_through < head:
                cursor.fanout_through = head
                cursor.save(update_fields=["fanout_through", "updated_at"])
            return 0
        # Every event after the cursor is still in the log, or none was
        # written: an emptied log with the head past the cursor was pruned
        # past it, as much a gap as an oldest event beyond it.
        first_kept = head + 1 if oldest is None else oldest
        if cursor.fanout_through >= first_kept - 1:
            return 0
        dropped = QueueState.objects.count()
        QueueEntry.objects.all().delete()
        QueuedEvent.objects.all().delete()
        QueueState.objects.all().delete()
        cursor.fanout_through = head
        cursor.save(update_fields=["fanout_through", "updated_at"])
    return dropped
