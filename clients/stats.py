"""Counters and samples behind the dashboard's charts.

Each Daphne process counts the event frames its sockets send and adds them
to its node's row every few seconds (``delivered``); each node's tick takes
a sample about every ``SAMPLE_S``: the node's queued events and counters,
and the depth of every queue it is primary of. Samples older than
``SAMPLE_RETENTION`` are pruned. Rates are differences between samples.
"""

import contextlib
import threading
import time
from datetime import timedelta

from django.db import close_old_connections
from django.db.models import F
from django.utils import timezone

from clients.models import ClientSample, DurableClient, NodeSample
from durablecache.cache import selectors as cache_selectors
from durablecache.cache.models import Node
from queues import selectors as queue_selectors

SAMPLE_S = 5.0
SAMPLE_RETENTION = timedelta(hours=1)
MAX_CLIENT_SAMPLES = 2000
FLUSH_S = 2.0


class DeliveryCounter:
    """Frames sent by this process's sockets, flushed to the node's row."""

    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def add(self, node: str, n: int) -> None:
        with self.lock:
            self.count += n
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(
                    target=self._run, args=(node,), name="delivery-counter", daemon=True
                )
                self.thread.start()

    def _run(self, node: str) -> None:
        while True:
            time.sleep(FLUSH_S)
            with self.lock:
                count, self.count = self.count, 0
            if not count:
                continue
            try:
                Node.objects.filter(name=node).update(
                    delivered_total=F("delivered_total") + count
                )
            except Exception:  # a chart is not worth a retry storm
                with self.lock:
                    self.count += count
            finally:
                with contextlib.suppress(Exception):
                    close_old_connections()


delivered = DeliveryCounter()


def sample(node: str) -> bool:
    """Take this node's sample if the last one is ``SAMPLE_S`` old; return
    whether one was taken."""
    now = timezone.now()
    mine = NodeSample.objects.filter(node=node).order_by("-at")
    last = mine.values_list("at", flat=True).first()
    if last is not None and (now - last).total_seconds() < SAMPLE_S * 0.9:
        return False
    states = queue_selectors.queue_states()
    row = Node.objects.filter(name=node).values_list("delivered_total", flat=True)
    NodeSample.objects.create(
        node=node,
        at=now,
        queued_events=sum(s.size for s in states),
        hosted_queues=len(states),
        log_head=cache_selectors.event_log_head(),
        delivered_total=row.first() or 0,
    )
    primaried = set(
        DurableClient.objects.filter(
            primary=node, durable_id__isnull=False
        ).values_list("pk", flat=True)
    )
    ClientSample.objects.bulk_create(
        [
            ClientSample(durable_id=s.durable_id, node=node, at=now, size=s.size)
            for s in states
            if s.client_id in primaried and s.durable_id
        ][:MAX_CLIENT_SAMPLES]
    )
    horizon = now - SAMPLE_RETENTION
    NodeSample.objects.filter(node=node, at__lt=horizon).delete()
    ClientSample.objects.filter(node=node, at__lt=horizon).delete()
    return True
