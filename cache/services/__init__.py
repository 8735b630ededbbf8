"""Every write to regions and entries; each one appends to the event log.

Callers import the package (``from cache import services``); the modules
are by topic: ``log`` (the event log's lock and appends, which every write
takes first), ``regions``, ``entries`` (single-key writes), ``batches``
(many keys in one transaction), ``nodes`` (the cluster's node records),
``tombstones`` (the pruning of destroyed keys' rows).
The write path's statements are SQL, not querysets
(docs/decisions/0010-hot-statements-in-sql.md).
"""

from cache.services.batches import (
    MAX_PUTALL,
    MAX_PUTS_PER_ROUND,
    WrittenEvent,
    entries_put_many,
    entry_putall,
)
from cache.services.entries import entry_destroy, entry_invalidate, entry_put
from cache.services.log import event_log_head_locked
from cache.services.nodes import node_drain, node_heartbeat, node_register
from cache.services.regions import region_clear, region_create, region_destroy
from cache.services.tombstones import tombstones_prune

__all__ = [
    "MAX_PUTALL",
    "MAX_PUTS_PER_ROUND",
    "WrittenEvent",
    "entries_put_many",
    "entry_destroy",
    "entry_invalidate",
    "entry_put",
    "entry_putall",
    "event_log_head_locked",
    "node_drain",
    "node_heartbeat",
    "node_register",
    "region_clear",
    "region_create",
    "region_destroy",
    "tombstones_prune",
]
