"""Copies of a client's queue on this node, filled page by page from a
host that holds a complete one (``clients.replication`` moves the pages)."""

import bisect
import json
import uuid
from typing import Any

from django.conf import settings
from django.db import connections, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from cache.selectors import region_names_conflating
from queues.models import QueuedEvent, QueueEntry, QueueState
from queues.routers import NODE_STORE
from queues.services.cursor import cursor_lock
from queues.services.events import events_store
from queues.services.queues import classify_updates
from queues.services.spans import queue_cut
from queues.services.store import state_pk


def queue_adopt(
    *,
    client_id: uuid.UUID,
    durable_id: str | None,
    conflate: str,
    node: str,
    source: str,
) -> QueueState:
    """Start (or restart) filling a copy of a client's queue on this node.

    Under this node's fan-out cursor lock, a new copy takes the cursor as
    ``copy_upto``: its own fan-out appends every later event, and the
    source sends the entries through ``copy_upto``. A copy that is already
    complete is left as it is.
    """
    with transaction.atomic(using=NODE_STORE):
        cursor = cursor_lock(node)
        state = QueueState.objects.select_for_update().filter(pk=client_id).first()
        now = timezone.now()
        if state is None:
            state = QueueState.objects.create(
                client_id=client_id,
                durable_id=durable_id,
                conflate=conflate,
                last_seq=cursor.fanout_through,
                delivered_through=0,
                is_synced=False,
                copy_upto=cursor.fanout_through,
                copy_after=0,
                copy_source=source,
                copy_requested_at=now,
            )
        elif not state.is_synced:
            state.copy_source = source
            state.copy_requested_at = now
            state.save(update_fields=["copy_source", "copy_requested_at"])
    return state


def queue_copy_in(*, client_id: uuid.UUID, page: dict[str, Any]) -> bool | None:
    """Store one page of a copy; return whether the copy is now complete.

    None when this node has no copy in progress for the client (dropped
    meanwhile, or complete already: a page that arrives twice is harmless).
    Entries at or below what the copy has acknowledged are skipped, and so
    are entries already present, so pages may repeat or overlap.

    Under this node's fan-out cursor lock, as the fan-out appends: the
    events the page's rows name are stored here if they are not
    (``events_store``), and the tick's prune, under the same lock, cannot
    delete one between.
    """
    with transaction.atomic(using=NODE_STORE):
        cursor_lock(settings.DURABLECACHE_NODE_NAME)
        state = QueueState.objects.select_for_update().filter(pk=client_id).first()
        if state is None:
            return None
        if state.is_synced:
            return True
        _ack_locked(state, int(page["acked_through"]))
        wanted = [
            e
            for e in page["entries"]
            if state.acked_through < e["seq"] <= state.copy_upto
        ]
        state.size += _store_missing(state, wanted)
        # The copy keeps its own mode (its client's, from adoption, a hello
        # or the fan-out): a page built before a change of mode says the
        # old one, and its rows come classified in that one.
        if wanted and page["conflate"] != state.conflate:
            classify_updates(client_id, state.conflate)
        if wanted and state.conflate != "false":
            state.size -= _conflate_copied(state)
        state.durable_id = page["durable_id"]
        state.copy_after = max(state.copy_after, int(page["next_after"]))
        state.copy_requested_at = timezone.now()
        state.is_synced = bool(page["done"])
        state.save()
    return state.is_synced


def _store_missing(state: QueueState, wanted: list[dict[str, Any]]) -> int:
    """Insert the page entries ``wanted`` (in seq order) that the copy does
    not hold yet; return how many."""
    if not wanted:
        return 0
    held = QueueEntry.objects.filter(
        queue=state, seq__lte=wanted[-1]["seq"], through__gte=wanted[0]["seq"]
    ).values_list("seq", "through")
    spans = sorted(held)
    missing = [e for e in wanted if not _held(spans, e["seq"])]
    connection = connections[NODE_STORE]
    events_store(connection, [_event_from_copy(e, connection) for e in missing])
    QueueEntry.objects.bulk_create([_entry_from_copy(state, e) for e in missing])
    return len(missing)


def _held(spans: list[tuple[int, int]], seq: int) -> bool:
    """Whether one of a queue's rows, as (seq, through) in seq order, holds
    ``seq``."""
    at = bisect.bisect_right(spans, (seq, _NO_SEQ)) - 1
    return at >= 0 and spans[at][1] >= seq


_NO_SEQ = 2**63


def _ack_locked(state: QueueState, up_to: int) -> int:
    """Apply an ack to the copy's locked head; return the events dropped."""
    if up_to <= state.acked_through:
        return 0
    connection = connections[NODE_STORE]
    with connection.cursor() as cursor:
        deleted = queue_cut(cursor, state_pk(state.client_id, connection), up_to)
    state.acked_through = up_to
    state.delivered_through = max(state.delivered_through, up_to)
    state.size = max(0, state.size - deleted)
    state.save(update_fields=["acked_through", "delivered_through", "size"])
    return deleted


def _conflate_copied(state: QueueState) -> int:
    """Conflate the copied rows that this copy's own fan-out has superseded;
    return how many went.

    The copy's fan-out appends the events after ``copy_upto`` while the
    source's pages, built earlier, bring the rows up to it. So an update
    that the source conflated away when a later one came can arrive below
    ``copy_upto``, next to that later one, which this fan-out appended
    with nothing of the key to conflate yet; a client served by the
    source, given only the later one, would be replayed the older after a
    failover. It goes as the fan-out would conflate it
    (``append._drop_undelivered_update``): an update that may conflate,
    not delivered by this copy's marks, with a later update of its key
    that supersedes it: an update in a conflating region of the queue's
    mode, even one that may not conflate itself because a CQ entered or
    left with it (as the fan-out's ``_append`` has it)."""
    later = QueueEntry.objects.filter(
        queue=state,
        op="update",
        seq__gt=state.copy_upto,
        region=OuterRef("region"),
        key=OuterRef("key"),
    )
    if state.conflate == "server":
        later = later.filter(region__in=region_names_conflating())
    superseded = QueueEntry.objects.filter(
        Exists(later),
        queue=state,
        conflates=True,
        seq__lte=state.copy_upto,
        seq__gt=state.delivered_through,
    )
    return int(superseded.delete()[0])


_TS = QueuedEvent._meta.get_field("ts")


def _event_from_copy(data: dict[str, Any], connection: Any) -> list[Any]:
    """A copied entry's event as a ``QueuedEvent`` row in database form."""
    ts = parse_datetime(data["ts"])
    if ts is None:
        raise ValueError(f"bad timestamp in a queue copy: {data['ts']!r}")
    value = data["value"]
    return [
        data["seq"],
        data["event_id"],
        data["region"],
        data["key"],
        data["op"],
        None if value is None else json.dumps(value),
        data["version"],
        _TS.get_db_prep_save(ts, connection),
    ]


def _entry_from_copy(state: QueueState, data: dict[str, Any]) -> QueueEntry:
    return QueueEntry(
        queue=state,
        seq=data["seq"],
        region=data["region"],
        key=data["key"],
        op=data["op"],
        # A page without the field (from a node that does not send it): an
        # update may conflate unless the queue never does (in mode "server"
        # its region decides, which the page does not say; a mark too many
        # is harmless), nor one naming a CQ for which it is not an update
        # (an entered or left event never conflates). A page of another
        # mode is reclassified in the copy's (``queue_copy_in``).
        conflates=data.get(
            "conflates",
            data["op"] == "update"
            and state.conflate != "false"
            and all(c.get("cq_op") == "update" for c in data.get("cq") or []),
        ),
        cq=data.get("cq"),
        through=data["seq"],
    )
