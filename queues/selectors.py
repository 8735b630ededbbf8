"""Reads of this node's store, shaped for the consumer and the API."""

import uuid
from typing import Any

from durablecache.cache.events import format_ts
from queues.models import FanoutCursor, QueueEntry, QueueState

NO_QUEUE = -2


def queue_get(*, client_id: uuid.UUID) -> QueueState | None:
    return QueueState.objects.filter(pk=client_id).first()


def queue_size(*, client_id: uuid.UUID) -> int:
    """Return the pending count in constant time, or -2 when there is no queue."""
    size = QueueState.objects.filter(pk=client_id).values_list("size", flat=True)
    return size[0] if size else NO_QUEUE


def queue_head(*, client_id: uuid.UUID) -> int:
    head = QueueState.objects.filter(pk=client_id).values_list("last_seq", flat=True)
    return head[0] if head else 0


def queue_entries_after(
    *, client_id: uuid.UUID, after: int, limit: int, through: int | None = None
) -> list[QueueEntry]:
    qs = QueueEntry.objects.filter(queue_id=client_id, seq__gt=after)
    if through is not None:
        qs = qs.filter(seq__lte=through)
    return list(qs.order_by("seq")[:limit])


def queue_sizes() -> dict[uuid.UUID, int]:
    return dict(QueueState.objects.values_list("client_id", "size"))


def queue_client_ids() -> list[uuid.UUID]:
    return list(QueueState.objects.values_list("client_id", flat=True))


def fanout_cursor(*, node: str) -> int:
    """How far this node's fan-out has read the cluster event log."""
    found = FanoutCursor.objects.filter(node=node).values_list(
        "fanout_through", flat=True
    )
    return found[0] if found else 0


def entry_to_event(entry: QueueEntry) -> dict[str, Any]:
    """Return the public event object of a queued entry (without session fields)."""
    return {
        "id": entry.event_id,
        "seq": entry.seq,
        "region": entry.region,
        "key": entry.key,
        "op": entry.op,
        "value": entry.value,
        "version": entry.version,
        "ts": format_ts(entry.ts),
    }
