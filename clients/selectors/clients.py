"""Reads of durable clients for REST, the CLI and the dashboard: one
client, the list a user may see, queue sizes, the nodes' overview."""

import uuid
from collections import Counter
from typing import Any

from django.db.models import QuerySet

from cache import selectors as cache_selectors
from clients.exceptions import UnknownClientError
from clients.models import (
    DurableClient,
    Interest,
    QueueSizeReport,
)
from common.errors import ConflictError
from queues import selectors as queue_selectors


def client_get(*, client_id: uuid.UUID) -> DurableClient:
    """The client a socket holds (a socket keeps only its id and flags)."""
    client = DurableClient.objects.filter(pk=client_id).first()
    if client is None:
        raise UnknownClientError("the client was closed")
    return client


def client_visible_to(*, user: Any, durable_id: str) -> DurableClient:
    """The durable client ``durable_id`` if ``user`` may see it (its owner;
    operators see all); another owner's is unknown, like a missing one."""
    client = DurableClient.objects.filter(durable_id=durable_id).first()
    if client is None or not (user.is_staff or client.owner_id == user.pk):
        raise UnknownClientError(f"no durable client {durable_id!r}")
    return client


def client_list(*, user: Any) -> QuerySet[DurableClient]:
    """Durable clients ``user`` may see (operators see all)."""
    qs = DurableClient.objects.filter(durable_id__isnull=False).order_by("durable_id")
    if not user.is_staff:
        qs = qs.filter(owner=user)
    return qs.select_related("owner").prefetch_related("size_reports")


def queue_sizes_of(client: DurableClient, *, own_node: str) -> dict[str, int]:
    """Queue size on each host: live for this node, last report for others."""
    sizes = {
        r.node: r.size for r in client.size_reports.all() if r.node in client.hosts
    }
    if own_node in client.hosts:
        own = queue_selectors.queue_size(client_id=client.id)
        if own >= 0:
            sizes[own_node] = own
    for host in client.hosts:
        sizes.setdefault(host, 0)
    return sizes


def interest_list(*, client: DurableClient) -> QuerySet[Interest]:
    return client.interests.order_by("id")


def client_queue_page(
    *, client: DurableClient, own_node: str, after: int, limit: int
) -> list[Any]:
    """Peek at a client's pending queue entries, in seq order, after ``after``.

    Only the primary's store is read (it is the copy the client is served
    from); asked on another node, this raises ConflictError naming it.
    """
    if client.primary and client.primary != own_node:
        raise ConflictError(
            f"the queue of {client} is hosted on its primary node "
            f"{client.primary!r}; ask that node (this is {own_node!r})"
        )
    return queue_selectors.queue_entries_after(
        client_id=client.id, after=after, limit=limit
    )


def node_overview(
    *, own_node: str, after: str | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """Nodes by name (after ``after``), with status, queues and queued events.

    Sizes of other nodes come from their last QueueSizeReport (only for
    clients they still host); this node's own total is read live.
    """
    hosts = {
        pk: (primary, set(secondaries or []))
        for pk, primary, secondaries in DurableClient.objects.values_list(
            "id", "primary", "secondaries"
        )
    }
    primaries = Counter(primary for primary, _ in hosts.values())
    seconds = Counter(node for _, nodes in hosts.values() for node in nodes)
    queued: Counter[str] = Counter()
    reports = QueueSizeReport.objects.values_list("client_id", "node", "size")
    for client_id, node, size in reports:
        primary, nodes = hosts.get(client_id, ("", set()))
        if node == primary or node in nodes:
            queued[node] += size
    queued[own_node] = sum(queue_selectors.queue_sizes().values())
    listed = [n for n in cache_selectors.node_list() if after is None or n.name > after]
    return [
        {
            "name": node.name,
            "url": node.url,
            "status": "up" if cache_selectors.node_is_up(node) else "down",
            "last_heartbeat": node.last_heartbeat,
            "primary_queues": primaries[node.name],
            "secondary_queues": seconds[node.name],
            "queued_events": queued[node.name],
        }
        for node in listed[:limit]
    ]
