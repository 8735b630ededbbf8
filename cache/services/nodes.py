"""The cluster's record of its nodes: started, alive, stopping."""

from contextlib import nullcontext

from django.db import connections, router
from django.utils import timezone

from cache.models import Node
from common.sql import lock_wait_bounded


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


def node_heartbeat(*, name: str, lock_wait_s: float | None = None) -> None:
    """Record that ``name`` is alive now.

    ``lock_wait_s`` bounds the wait for a lock held by another transaction
    (the node's own worker writes its ``Node`` row, and on SQLite any write
    locks the file): past it the database's ``OperationalError`` is raised,
    so a worker stopped inside a write cannot stop its supervisor's loop.
    """
    connection = connections[router.db_for_write(Node)]
    bounded = (
        nullcontext()
        if lock_wait_s is None
        else lock_wait_bounded(connection, lock_wait_s)
    )
    with bounded:
        Node.objects.filter(name=name).update(last_heartbeat=timezone.now())


def node_drain(*, name: str) -> None:
    """Mark a node as stopping: it is no longer offered to clients."""
    Node.objects.filter(name=name).update(is_draining=True)
