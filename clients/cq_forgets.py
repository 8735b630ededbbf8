"""A closed continuous query leaves the client's queue on this node
(docs/protocol.md, continuous queries): now, by its ``clients.forget_cq``
task, or, when that task was lost, from its pending ``ClosedCq`` row."""

import uuid

from clients.matching import key_matches
from clients.models import ClosedCq, ContinuousQuery, Interest
from clients.placement import self_node
from queues import services as queue_services

# Pending forgets one call of ``cqs_forget_pending`` runs (a tick runs the
# rest at the next).
FORGET_BATCH = 100


def cq_forget_here(*, client_id: uuid.UUID, name: str) -> int:
    """Take a closed CQ out of the client's queue on this node: its name
    leaves every queued row, and a row then naming no CQ that no interest
    of the client's wants goes (and is no longer counted). Idempotent,
    and harmless late: a CQ registered again under the name keeps the
    rows it judged. Return how many rows went."""
    node = self_node()
    pending = list(
        ClosedCq.objects.filter(client_id=client_id, name=name, node=node).values_list(
            "pk", flat=True
        )
    )
    interests = list(
        Interest.objects.filter(client_id=client_id).values_list(
            "region", "kind", "selector"
        )
    )
    again = (
        ContinuousQuery.objects.filter(client_id=client_id, name=name)
        .values_list("since_seq", flat=True)
        .first()
    )

    def wanted(region: str, key: str | None) -> bool:
        return any(
            r == region and (key is None or key_matches(kind, selector, key))
            for r, kind, selector in interests
        )

    gone, done = queue_services.queue_forget_cq(
        client_id=client_id, name=name, node=node, wanted=wanted, through=again
    )
    if done and pending:
        ClosedCq.objects.filter(pk__in=pending).delete()
    return gone


def cqs_forget_pending(*, node: str, client_id: uuid.UUID | None = None) -> int:
    """Run the forgets still pending on this node (of one client, when
    given): those whose task was lost or has not run yet. Return how many
    rows went from its queues."""
    pending = ClosedCq.objects.filter(node=node)
    if client_id is not None:
        pending = pending.filter(client_id=client_id)
    found = pending.values_list("client_id", "name").distinct()[:FORGET_BATCH]
    return sum(cq_forget_here(client_id=pk, name=name) for pk, name in found)
