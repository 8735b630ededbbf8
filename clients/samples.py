"""The samples behind the dashboard's charts.

Each node's tick takes a sample about every ``SAMPLE_S``: the node's
queued events and counters, and the depth of every queue it is primary
of. Samples older than ``SAMPLE_RETENTION`` are pruned. Rates are
differences between samples.
"""

from datetime import timedelta

from django.utils import timezone

from cache import selectors as cache_selectors
from cache.models import Node
from clients.models import ClientSample, DurableClient, NodeSample
from queues import selectors as queue_selectors

SAMPLE_S = 5.0
SAMPLE_RETENTION = timedelta(hours=1)
MAX_CLIENT_SAMPLES = 2000


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
