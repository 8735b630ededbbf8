"""The cluster's record of its nodes: started, alive, stopping."""

from django.utils import timezone

from cache.models import Node


def node_register(*, name: str, url: str) -> Node:
    """Record that ``name`` (re)started at ``url``; it is up from now."""
    now = timezone.now()
    node, _ = Node.objects.update_or_create(
        name=name,
        defaults={
            "url": url,
            "started_at": now,
            "last_heartbeat": now,
            "is_draining": False,
        },
    )
    return node


def node_heartbeat(*, name: str) -> None:
    Node.objects.filter(name=name).update(last_heartbeat=timezone.now())


def node_drain(*, name: str) -> None:
    """Mark a node as stopping: it is no longer offered to clients."""
    Node.objects.filter(name=name).update(is_draining=True)
