"""Failover and repair: one idempotent step per client (``fix_placement``)
that drops hosts that are down or draining, promotes a complete live
secondary when the primary is gone, and adds secondaries on the least
loaded live nodes until the redundancy is met.

Rows are locked per client, so any number of nodes may run it at once.
"""

import logging
import uuid
from collections import Counter
from typing import Any

from django.db import transaction

from clients import history, selectors
from clients.models import DurableClient
from clients.placement import DRAINING, Membership, fail_over, needs_fixing, top_up
from clients.replication.copies import start_copies

log = logging.getLogger(__name__)


def save_placement(client: DurableClient, before: tuple[Any, ...]) -> bool:
    """Save a locked client's hosts if they differ from ``before`` (primary,
    secondaries, syncing); record a failover when the primary moved.
    Returns whether anything changed."""
    if (client.primary, client.secondaries, client.syncing) == before:
        return False
    client.save(update_fields=["primary", "secondaries", "syncing"])
    if client.primary != before[0]:
        history.record(
            client, "failover", detail=f"primary {before[0]} -> {client.primary}"
        )
    return True


def fix_placement(
    client_id: uuid.UUID,
    members: Membership,
    load: Counter[str],
) -> bool:
    """Fail over and top up one client's hosts; return whether it has a primary up.

    A draining primary (handing its queues over) gets one copy elsewhere
    even at redundancy 0, so it can be promoted. Copies are started after
    commit, from the (new) primary.
    """
    with transaction.atomic():
        client = DurableClient.objects.select_for_update().filter(pk=client_id).first()
        if client is None or not client.is_durable:
            return False
        before = (client.primary, list(client.secondaries), list(client.syncing))
        has_primary = fail_over(client, members)
        added: list[str] = []
        draining = members.state(client.primary) == DRAINING
        if has_primary or draining:
            # A draining primary needs one copy to hand over to, even at
            # redundancy 0 (whichever node runs this step).
            at_least = 1 if draining else 0
            added = top_up(client, members, lambda: load, at_least=at_least)
        if save_placement(client, before):
            log.info(
                "%s: hosts %s %s -> %s %s",
                client,
                before[0],
                before[1],
                client.primary,
                client.secondaries,
            )
        if added:
            source = client.primary
            transaction.on_commit(lambda: start_copies(client_id, added, source))
    return has_primary


def placement_repair() -> int:
    """Fail over and restore redundancy for every client that needs it.

    Run by every node's tick (idempotent under row locks); returns how many
    clients were looked at closely.
    """
    members = Membership.read_here()
    live = members.up()
    if not live:
        return 0
    rows = DurableClient.objects.filter(durable_id__isnull=False).values_list(
        "pk", "primary", "secondaries", "syncing", "redundancy"
    )
    todo = [row[0] for row in rows if needs_fixing(row, members, len(live))]
    if not todo:
        return 0
    load = selectors.hosted_load()
    for pk in todo:
        fix_placement(pk, members, load)
    return len(todo)
