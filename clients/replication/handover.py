"""The handover of a stopping node (SIGTERM): its queues move elsewhere."""

import time
from collections.abc import Callable

from clients import selectors
from clients.models import DurableClient
from clients.placement import Membership
from clients.replication.failover import fix_placement


def node_handover(
    *, node: str, deadline: float, heartbeat: Callable[[], None] | None = None
) -> int:
    """Move every queue a draining node hosts to other nodes.

    Secondaries here are dropped; each primary is handed to a complete
    secondary, or (redundancy 0, or copies still filling) first copied to
    another node and then handed over. Returns the number of clients still
    hosted here at ``deadline`` (kept: their queue comes back with the node).
    """
    while True:
        if heartbeat is not None:
            heartbeat()
        members = Membership.read()
        hosted = [
            c.pk
            for c in DurableClient.objects.filter(durable_id__isnull=False).only(
                "id", "primary", "secondaries"
            )
            if node in c.hosts
        ]
        if not hosted or time.monotonic() >= deadline:
            return len(hosted)
        if not members.up():
            return len(hosted)  # nowhere to go: keep them
        load = selectors.hosted_load()
        for pk in hosted:
            fix_placement(pk, members, load)
        time.sleep(0.2)
