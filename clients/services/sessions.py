"""The ends of sockets: a disconnect keeps a durable client for its
timeout, a close with keepalive false (or a non-durable client) deletes
it, and the sockets of a dead or restarted node end as dropped."""

import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.utils import timezone

from clients import history
from clients.models import DurableClient
from clients.placement import DOWN, Membership
from clients.services.cqs import cqs_end_non_durable
from clients.services.interests import interests_end
from clients.services.ownership import clients_purge
from common import sql
from queues import services as queue_services


def client_disconnected(*, client_id: uuid.UUID, socket_id: str, why: str = "") -> None:
    """Handle a socket that went away (close keepalive=true, or dropped).

    Durable: keep queue and durable interests, start the timeout. Non-durable:
    delete everything. A late call for a socket that is no longer the
    client's current one changes nothing. ``why`` goes to the history.
    """
    clients_ended(ended=[(client_id, socket_id, True)], why=why)


def client_close(*, client_id: uuid.UUID, socket_id: str, keepalive: bool) -> None:
    """Handle the ``close`` frame: keep for ``timeout`` or delete at once."""
    clients_ended(ended=[(client_id, socket_id, keepalive)])


def clients_ended(
    *, ended: Sequence[tuple[uuid.UUID, str, bool]], why: str = "", at: Any = None
) -> int:
    """The ends of many sockets at once, each (client id, socket id, keep):
    ``client_disconnected`` where ``keep``, else ``client_close`` with
    keepalive false. One transaction on each database, whatever their
    number, so a storm of dropped sockets costs a few rounds, not two
    transactions a socket. Timeouts run from ``at`` (default now). Return
    how many clients were released."""
    keep: dict[tuple[uuid.UUID, str], bool] = {}
    for client_id, socket_id, stays in ended:  # a close wins over a drop
        held = (client_id, socket_id)
        keep[held] = keep.get(held, True) and stays
    if not keep:
        return 0
    with transaction.atomic():
        clients = [
            client
            for client in DurableClient.objects.select_for_update()
            .filter(pk__in={client_id for client_id, _ in keep})
            .order_by("pk")
            if (client.pk, client.socket_id) in keep
        ]
        kept: list[DurableClient] = []
        gone: list[DurableClient] = []
        for client in clients:
            stays = client.is_durable and keep[client.pk, client.socket_id]
            (kept if stays else gone).append(client)
        closed = [client for client in gone if client.is_durable]
        history.record_many(closed, "closed", detail="close with keepalive false")
        clients_purge(gone)
        if kept:
            # Forgotten while the clients' rows are locked, still connected:
            # a hello (which waits for those rows) starts a session whose
            # delivered marks no late reset of this one can wipe (an update
            # sent on it, not acked, would be conflatable again).
            queue_services.queue_reset_delivery(client_ids=[c.pk for c in kept])
        _mark_disconnected(kept, at=at, why=why)
    return len(clients)


_RELEASED = [
    DurableClient._meta.get_field(name)
    for name in ("is_connected", "socket_id", "disconnected_at", "expires_at", "id")
]


def _mark_disconnected(
    clients: list[DurableClient], at: Any = None, why: str = ""
) -> None:
    """Mark durable clients (their rows locked by the caller) disconnected:
    drop their non-durable interests and start their timeouts, with one
    statement each for all of them."""
    if not clients:
        return
    now = at or timezone.now()
    for client in clients:
        client.is_connected = False
        client.socket_id = ""
        client.disconnected_at = now
        client.expires_at = now + timedelta(seconds=client.timeout)
    db = connections[DEFAULT_DB_ALIAS]
    rows = sql.prepared_rows(clients, _RELEASED, db)
    sql.update_rows(db, DurableClient, _RELEASED[:-1], _RELEASED[-1:], rows)
    history.record_many(clients, "disconnected", detail=why)
    # Last: it locks the event log, which writers wait for, to the commit.
    interests_end([client.pk for client in clients], is_durable=False)
    cqs_end_non_durable([client.pk for client in clients])


def clients_node_restarted(*, node: str) -> int:
    """Mark every client connected to ``node`` as dropped (the node restarted)."""
    held = DurableClient.objects.filter(is_connected=True, node=node)
    sockets = held.values_list("pk", "socket_id")
    return clients_ended(ended=[(pk, socket, True) for pk, socket in sockets])


def clients_of_dead_nodes_disconnect() -> int:
    """Treat clients recorded as connected to a dead node as dropped.

    Their timeout runs from the node's last heartbeat, so a node that never
    comes back cannot keep its clients (and their queues) forever. The node
    running this is never among them, however late its own heartbeat.
    """
    members = Membership.read_here()
    dead = {
        name: row.last_heartbeat
        for name, row in members.rows.items()
        if members.state(name) == DOWN
    }
    held: dict[str, list[tuple[uuid.UUID, str, bool]]] = {name: [] for name in dead}
    sockets = DurableClient.objects.filter(is_connected=True, node__in=dead)
    for pk, node, socket_id in sockets.values_list("pk", "node", "socket_id"):
        held[node].append((pk, socket_id, True))
    return sum(
        clients_ended(ended=ended, why=f"{node} down", at=dead[node])
        for node, ended in held.items()
        if ended
    )
