"""Periodic work every node runs on its own worker (no node is special).

Each step is idempotent, so running it on every node at once is safe.
"""

import logging
from datetime import timedelta

from django.db.models import Min
from django.utils import timezone

from clients import fanout, services
from clients.models import DurableClient, QueueSizeReport
from durablecache.cache.models import Event, Node
from queues import selectors as queue_selectors
from queues import services as queue_services

log = logging.getLogger(__name__)
EVENT_RETENTION = timedelta(minutes=10)


def tick(node: str) -> None:
    """1. fan out unread events, 2. disconnect clients of dead nodes,
    3. expire clients, 4. report queue sizes, 5. drop orphaned queues,
    6. prune the event log."""
    fanout.fanout_node(node)
    services.clients_of_dead_nodes_disconnect()
    services.clients_expire()
    report_queue_sizes(node)
    drop_orphans()
    prune_event_log()


def report_queue_sizes(node: str) -> None:
    sizes = queue_selectors.queue_sizes()
    known = set(
        DurableClient.objects.filter(pk__in=list(sizes)).values_list("pk", flat=True)
    )
    for client_id, size in sizes.items():
        if client_id in known:
            QueueSizeReport.objects.update_or_create(
                client_id=client_id, node=node, defaults={"size": size}
            )
    QueueSizeReport.objects.filter(node=node).exclude(client_id__in=known).delete()


def drop_orphans() -> int:
    hosted = queue_selectors.queue_client_ids()
    if not hosted:
        return 0
    node = services.self_node()
    keep = {
        pk
        for pk, primary, secondaries in DurableClient.objects.filter(
            pk__in=hosted
        ).values_list("pk", "primary", "secondaries")
        if node in (primary, *secondaries)
    }
    # A queue is created just after its client row commits, never before, so
    # a queue without a row is one whose client was deleted; a queue whose
    # client moved to other hosts is a stale copy.
    return queue_services.queue_drop_orphans(keep=keep)


def prune_event_log() -> int:
    """Delete events every node has fanned out and that are old enough."""
    low = Node.objects.aggregate(low=Min("fanout_through"))["low"]
    if not low:
        return 0
    horizon = timezone.now() - EVENT_RETENTION
    return Event.objects.filter(seq__lte=low, ts__lt=horizon).delete()[0]
