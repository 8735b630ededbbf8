"""Per-node counters kept on the node's row in the cluster database.

``Node`` carries monotonic totals (events delivered to sockets, events
acked, failovers, expiries, queued events naming a CQ, queue overflows and
the events they dropped, entries sent by resyncs) for ``/metrics``
and the dashboard's charts. The paths that count them (a socket's send, an
ack round, a fan-out pass, a failover or expiry) add to this process's
tally: a lock and an addition, not a statement. Each process (every Daphne
process and the Celery worker of a node) adds its tally to the row every
``FLUSH_S`` from a thread of its own, in one UPDATE. A process that dies
loses at most its last ``FLUSH_S`` of counts
(docs/decisions/0025-counters-on-the-node-row.md).
"""

import atexit
import contextlib
import os
import threading
import time
from collections import Counter

from django.db import close_old_connections
from django.db.models import F

from cache.models import Node

FLUSH_S = 2.0

DELIVERED = "delivered_total"
ACKED = "acked_total"
FAILOVERS = "failovers_total"
EXPIRIES = "expiries_total"
CQ_EVENTS = "cq_events_total"
OVERFLOWS = "overflows_total"
DROPPED_EVENTS = "dropped_events_total"
RESYNCED_ENTRIES = "resynced_entries_total"
FIELDS = (
    DELIVERED,
    ACKED,
    FAILOVERS,
    EXPIRIES,
    CQ_EVENTS,
    OVERFLOWS,
    DROPPED_EVENTS,
    RESYNCED_ENTRIES,
)


class NodeCounters:
    """This process's tallies per node, flushed to the nodes' rows."""

    def __init__(self) -> None:
        self.counts: dict[str, Counter[str]] = {}
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def add(self, node: str, n: int, field: str = DELIVERED) -> None:
        """Count ``n`` more of ``field`` for ``node`` (flushed later).

        Called per socket and push by the wake-up hub: a lock and two dict
        lookups, no more (the flushing thread is started once; it never
        ends, and a forked child starts its own: ``_forked``)."""
        if n <= 0:
            return
        with self.lock:
            fields = self.counts.get(node)
            if fields is None:
                fields = self.counts[node] = Counter()
            fields[field] += n
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._run, name="node-counters", daemon=True
                )
                self.thread.start()

    def _forked(self) -> None:
        """In a forked child: the parent's tallies are the parent's to
        flush, and its flushing thread does not run here."""
        self.lock = threading.Lock()
        self.counts = {}
        self.thread = None

    def _run(self) -> None:
        while True:
            time.sleep(FLUSH_S)
            self.flush()
            with contextlib.suppress(Exception):
                close_old_connections()

    def discard(self) -> None:
        """Forget every tally not yet flushed (a test starts from zero,
        not with what the previous one's sockets counted)."""
        with self.lock:
            self.counts = {}

    def flush(self) -> None:
        """Add every tally to its node's row now (one UPDATE per node); a
        tally whose UPDATE fails is kept for the next flush."""
        with self.lock:
            counts, self.counts = self.counts, {}
        for node, fields in counts.items():
            try:
                Node.objects.filter(name=node).update(
                    **{field: F(field) + n for field, n in fields.items()}
                )
            except Exception:  # a counter is not worth a retry storm
                with self.lock:
                    self.counts.setdefault(node, Counter()).update(fields)


counter = NodeCounters()
os.register_at_fork(after_in_child=counter._forked)


@atexit.register
def _flush_at_exit() -> None:
    with contextlib.suppress(Exception):
        counter.flush()
