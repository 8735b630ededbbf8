"""A closed continuous query leaves the queued rows: its name goes from
their ``cq`` lists, and a row left naming no CQ that no interest wants
goes (docs/protocol.md, continuous queries)."""

import uuid
from collections.abc import Callable

from django.db import transaction

from queues.models import QueueEntry, QueueState
from queues.routers import NODE_STORE
from queues.services.cursor import cursor_read_locked


def queue_forget_cq(
    *,
    client_id: uuid.UUID,
    name: str,
    node: str,
    wanted: Callable[[str, str | None], bool],
    through: int | None = None,
) -> tuple[int, bool]:
    """Take the CQ ``name`` out of the client's queued rows on this node;
    return how many rows went, and whether the queue here is done with
    it: absent, or complete (a copy still being filled may yet get pages
    built before the close). ``wanted(region, key)``: whether an interest
    of the client's still wants a row of that key. ``through``: only rows
    up to this seq (a CQ registered again under the name judges the
    events after it, and its rows keep the name).

    Runs under this node's fan-out cursor lock, then the queue head's (the
    fan-out's order): a fan-out pass that judged the CQ before it closed
    has committed its rows by then, and a later pass no longer sees it,
    so no row naming it is queued after this. Idempotent."""
    with transaction.atomic(using=NODE_STORE):
        cursor_read_locked(node)
        state = QueueState.objects.select_for_update().filter(pk=client_id).first()
        if state is None:
            return 0, True
        rows = QueueEntry.objects.filter(queue=state, cq__isnull=False)
        if through is not None:
            rows = rows.filter(seq__lte=through)
        gone: list[int] = []
        for pk, region, key, cq in rows.values_list("pk", "region", "key", "cq"):
            listed = list(cq or [])
            names = [c for c in listed if c.get("name") != name]
            if len(names) == len(listed):
                continue
            if names:
                QueueEntry.objects.filter(pk=pk).update(cq=names)
            elif wanted(region, key):
                QueueEntry.objects.filter(pk=pk).update(cq=None)
            else:
                gone.append(pk)
        if gone:
            QueueEntry.objects.filter(pk__in=gone).delete()
            state.size = max(0, state.size - len(gone))
            state.save(update_fields=["size"])
        return len(gone), state.is_synced
