"""Reads of clients and interests, shaped for the websocket, REST and CLI."""

import uuid
from typing import Any

from django.db.models import QuerySet

from clients.matching import Selector, key_matches
from clients.models import DurableClient, Interest, InterestKind
from durablecache.cache import selectors as cache_selectors
from queues import selectors as queue_selectors


def welcome_fields(*, client: DurableClient) -> dict[str, Any]:
    """The placement half of ``welcome`` (the pending count is the caller's)."""
    return {
        "durable_id": client.durable_id,
        "node": client.node,
        "primary": client.primary,
        "secondaries": list(client.secondaries),
        "redundancy_satisfied": redundancy_satisfied(client),
    }


def redundancy_satisfied(client: DurableClient) -> bool:
    wanted = client.redundancy
    if wanted < 0:
        wanted = max(0, len(cache_selectors.nodes_up()) - 1)
    return len(client.secondaries) >= wanted


def client_regions(*, client_id: uuid.UUID) -> list[str]:
    """Regions in which the client holds interests, sorted."""
    return sorted(
        set(
            Interest.objects.filter(client_id=client_id).values_list(
                "region", flat=True
            )
        )
    )


def image_page(
    *, region: str, selector: Selector, policy: str, after: str | None, size: int
) -> tuple[list[Any], str | None]:
    """Return one page of the initial image and the cursor of the next page.

    Items are {key, value, version} dicts, or bare keys for policy ``keys``.
    """
    if policy == "none":
        return [], None
    if selector.kind == InterestKind.KEY:
        keys = list(selector.values)
        start = 0 if after is None else int(after)
        page = keys[start : start + size]
        entries = cache_selectors.entries_for_keys(region=region, keys=page)
        following = str(start + size) if start + size < len(keys) else None
    else:
        entries = cache_selectors.entry_list(region=region, after=after, limit=size)
        following = entries[-1].key if len(entries) == size else None
        if selector.kind == InterestKind.REGEX:
            entries = [
                e
                for e in entries
                if key_matches(selector.kind, selector.values[0], e.key)
            ]
    if policy == "keys":
        return [e.key for e in entries], following
    items = [{"key": e.key, "value": e.value, "version": e.version} for e in entries]
    return items, following


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
