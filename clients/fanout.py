"""Fan-out: move committed events from the cluster log into this node's queues.

The log is read with a cursor kept in the node store and moved in the same
transaction as the appends, so each event lands in each hosted queue once,
whatever the number of doorbells, retries or crashes (ARCHITECTURE.md,
"Life of a write").
"""

import logging
import time
import uuid
from collections import defaultdict
from typing import Any

from django.conf import settings
from django.db import transaction

from clients import selectors
from clients.matching import key_matches
from durablecache import liveness
from durablecache.cache import selectors as cache_selectors
from queues import notify
from queues import selectors as queue_selectors
from queues import services as queue_services
from queues.routers import NODE_STORE

log = logging.getLogger(__name__)
REGION_OPS = {"region_clear", "region_destroy"}


def match_events(
    events: list[Any], hosted: set[uuid.UUID]
) -> dict[uuid.UUID, list[Any]]:
    """Return, per hosted client, the events its interests want, in order."""
    interests = selectors.interest_rows(
        regions={e.region for e in events}, client_ids=hosted
    )
    by_region: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for row in interests:
        if row[0] in hosted:
            by_region[row[1]].append(row)
    appends: dict[uuid.UUID, list[Any]] = defaultdict(list)
    for event in events:
        wanted: set[uuid.UUID] = set()
        for client_id, _, kind, selector, since in by_region.get(event.region, ()):
            if event.seq <= since or client_id in wanted:
                continue
            if event.op in REGION_OPS or key_matches(kind, selector, event.key):
                wanted.add(client_id)
        for client_id in wanted:
            appends[client_id].append(event)
    return appends


def fanout_node(node: str | None = None) -> int:
    """Append every unread event to the queues hosted here; return the count."""
    node = node or settings.DURABLECACHE_NODE_NAME
    total = 0
    while True:
        with transaction.atomic(using=NODE_STORE):
            through = queue_services.cursor_read_locked(node)
            events = cache_selectors.logged_events_after(
                seq=through, limit=settings.DURABLECACHE_FANOUT_BATCH
            )
            if not events:
                break
            hosted = set(queue_selectors.queue_client_ids())
            heads = queue_services.queue_append_many(match_events(events, hosted))
            queue_services.cursor_move(node, events[-1].seq)
        total += len(events)
        liveness.beat()  # a long backlog is progress, not a wedged worker
        notify.ring_many(heads, node)
        if len(events) < settings.DURABLECACHE_FANOUT_BATCH:
            # Read through the head: an event committed since then rang its
            # own doorbell after its commit, so no second (empty) pass.
            break
    return total


_live_nodes: tuple[float, list[str]] = (0.0, [])
LIVE_NODES_TTL_S = 1.0


def _nodes_to_ring() -> list[str]:
    """Live node names, read at most once a second per process."""
    global _live_nodes
    read_at, names = _live_nodes
    if time.monotonic() - read_at > LIVE_NODES_TTL_S:
        names = [n.name for n in cache_selectors.nodes_up()]
        _live_nodes = (time.monotonic(), names)
    return names or [settings.DURABLECACHE_NODE_NAME]


def ring_fanout(last_seq: int) -> None:
    """After a write commits: ask every live node to fan the new events out."""
    from clients.tasks import fanout_on

    for node in _nodes_to_ring():
        fanout_on(node)
