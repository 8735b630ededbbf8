"""A queue as a whole on this node: its creation and mode, the delivery
it forgets when a session ends, its drop, and the store's vacuum."""

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connections, transaction
from django.db.models import BooleanField, ExpressionWrapper, F, Q, Value

from cache.selectors import region_names_conflating
from common import sql
from queues.models import QueuedEvent, QueueEntry, QueueState
from queues.routers import NODE_STORE
from queues.services.spans import spans_split
from queues.services.store import state_pk, table


def queue_ensure(
    *, client_id: uuid.UUID, durable_id: str | None, conflate: str
) -> QueueState:
    """Create the client's queue on this node if missing; update its mode
    (and, with it, which of its queued updates may conflate)."""
    with transaction.atomic(using=NODE_STORE):
        state, created = QueueState.objects.select_for_update().get_or_create(
            client_id=client_id,
            defaults={"durable_id": durable_id, "conflate": conflate},
        )
        if not created and state.conflate != conflate:
            state.conflate = conflate
            state.save(update_fields=["conflate"])
            classify_updates(client_id, conflate)
    return state


def classify_updates(client_id: uuid.UUID, conflate: str) -> None:
    """Set ``conflates`` on every update queued for the client as its mode
    ``conflate`` has it (a mode changed by a ``hello``, here or, as the
    fan-out finds, on another host: an update queued before may conflate
    now, or no longer). Mode "server" follows each update's region, whose
    ``conflate_events`` never changes.

    Only while no socket of the client's is live (a ``hello`` is refused
    while one is, and a session's end forgets what it was sent): a row
    sent and not marked, because it could not conflate then, would be
    removable after it.

    The queue's spans are split into rows of one event first: a span holds
    only events that could not conflate in the mode it was appended in.
    Under the queue head's lock (its callers hold it)."""
    spans_split(state_pk(client_id, connections[NODE_STORE]))
    names = region_names_conflating() if conflate == "server" else []
    conflates: Any = Value(conflate == "true")
    if names:  # (Django skips the whole UPDATE on an IN of no names)
        conflates = ExpressionWrapper(Q(region__in=names), output_field=BooleanField())
    updates = QueueEntry.objects.filter(queue_id=client_id, op="update")
    updates.filter(cq__isnull=True).update(conflates=conflates)
    # A row that names a CQ may conflate only while every ``cq_op`` in it
    # is ``update`` (judged when it was queued; an entered or left event
    # must stay): read in Python, which a change of mode (rare) can
    # afford and which needs no JSON function of either database.
    may: list[int] = []
    may_not: list[int] = []
    for pk, region, cq in updates.filter(cq__isnull=False).values_list(
        "pk", "region", "cq"
    ):
        only_updates = all(c.get("cq_op") == "update" for c in cq or [])
        by_mode = conflate == "true" or (conflate == "server" and region in names)
        (may if only_updates and by_mode else may_not).append(pk)
    for pks, value in ((may, True), (may_not, False)):
        for chunk in sql.chunks(pks, 500):
            QueueEntry.objects.filter(pk__in=chunk).update(conflates=value)


def queue_reset_delivery(*, client_ids: Sequence[uuid.UUID]) -> None:
    """Forget what the ended sessions were sent: unacked entries are
    undelivered (one statement for them all)."""
    QueueState.objects.filter(pk__in=client_ids).update(
        delivered_through=F("acked_through")
    )


def queue_drop(*, client_id: uuid.UUID) -> bool:
    """Delete a client's queue on this node; return whether it existed."""
    return _drop_locked(client_id)


def queue_drop_many(*, client_ids: Sequence[uuid.UUID]) -> int:
    """``queue_drop`` for many queues in one transaction (their heads locked
    in id order, as the fan-out locks them); return how many existed."""
    with transaction.atomic(using=NODE_STORE):
        return sum(_drop_locked(pk) for pk in sorted(client_ids))


def _drop_locked(client_id: uuid.UUID, created_at: Any = None) -> bool:
    """Delete one queue and its entries (only the queue row created at
    ``created_at``, when given).

    The head row is locked first, as the fan-out locks it to append: an
    append in flight commits before the entries are deleted (they go too),
    one that comes later finds no queue. Without the lock an append
    committed in between would leave rows of a deleted head (the rows'
    ``queue`` has no foreign-key constraint: every writer of rows holds
    its head's lock instead, ``QueueEntry.queue``). In SQL rather than the ORM's
    delete, which collects the related rows first: every ``close`` drops
    a queue, and closes come in storms
    (docs/decisions/0010-hot-statements-in-sql.md).
    """
    connection = connections[NODE_STORE]
    pk = state_pk(client_id, connection)
    state, entries = table(QueueState), table(QueueEntry)
    where, params = "client_id = %s", [pk]
    if created_at is not None:
        field = QueueState._meta.get_field("created_at")
        where += " AND created_at = %s"
        params.append(field.get_db_prep_value(created_at, connection))
    lock = sql.for_update(connection)
    with transaction.atomic(using=NODE_STORE), connection.cursor() as cursor:
        cursor.execute(
            f"SELECT client_id FROM {state} WHERE {where}{lock}",  # noqa: S608
            params,
        )
        if cursor.fetchone() is None:
            return False
        cursor.execute(f"DELETE FROM {entries} WHERE queue_id = %s", [pk])  # noqa: S608
        cursor.execute(f"DELETE FROM {state} WHERE client_id = %s", [pk])  # noqa: S608
    return True


def queue_drop_orphans(*, orphans: Mapping[uuid.UUID, Any]) -> int:
    """Delete the queues judged orphaned; return how many went.

    ``orphans`` maps each client id to the ``created_at`` of the queue row
    that was judged. Only that row is deleted: a queue created since (a
    ``hello`` that starts the client afresh here after the judgement) is
    another queue, and the next sweep judges it with its client's row.
    """
    return sum(_drop_locked(pk, created_at) for pk, created_at in orphans.items())


def node_store_vacuum() -> list[str]:
    """Vacuum the node store's queue tables once their dead rows pile up:
    every queued event is a row inserted, then deleted once acked, and
    every append or ack rewrites its queue's head (``sql.vacuum_bloated``;
    PostgreSQL only). The tables vacuumed."""
    return sql.vacuum_bloated(
        connections[NODE_STORE], [QueueEntry, QueuedEvent, QueueState]
    )
