"""Write-side operations on the subscription queues of this node's store.

Every function here writes only the ``node`` database alias (and reads the
cluster's only for which regions conflate). Callers import the package
(``from queues import services as queue_services``); the modules are by
topic: ``queues`` (a queue as a whole), ``append`` (the fan-out's appends
and conflation), ``acks`` (acks and delivery marks), ``copies`` (copies
filled from another host), ``cursor`` (the fan-out cursor), ``events``
(the events the queues hold, once per node), ``store`` (shared statement
helpers).

Delivery rules (seq, ack, replay, conflation): docs/protocol.md#delivery.
"""

from queues.services.acks import (
    queue_ack,
    queue_ack_and_mark_many,
    queue_ack_many,
)
from queues.services.append import CqList, Overflow, queue_append_many
from queues.services.copies import queue_adopt, queue_copy_in
from queues.services.cqs import queue_forget_cq
from queues.services.cursor import (
    cursor_flushed,
    cursor_init,
    cursor_lock,
    cursor_move,
    cursor_read_locked,
)
from queues.services.events import queued_events_prune
from queues.services.queues import (
    node_store_vacuum,
    queue_drop,
    queue_drop_many,
    queue_drop_orphans,
    queue_ensure,
    queue_reset_delivery,
)
from queues.services.store import commit_unflushed

__all__ = [
    "CqList",
    "Overflow",
    "commit_unflushed",
    "cursor_flushed",
    "cursor_init",
    "cursor_lock",
    "cursor_move",
    "cursor_read_locked",
    "node_store_vacuum",
    "queue_ack",
    "queue_ack_and_mark_many",
    "queue_ack_many",
    "queue_adopt",
    "queue_append_many",
    "queue_copy_in",
    "queue_drop",
    "queue_drop_many",
    "queue_drop_orphans",
    "queue_ensure",
    "queue_forget_cq",
    "queue_reset_delivery",
    "queued_events_prune",
]
