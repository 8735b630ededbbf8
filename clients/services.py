"""Every write to clients and interests: hello, disconnect, close, expiry.

Placement, pending counts and the -2 / -1 / n rule: docs/protocol.md#hello.
Queue rows live in the node store and are reached only through
``queues.services``; a queue on another node is dropped by task.
"""

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections, transaction
from django.utils import timezone

from clients import history
from clients.exceptions import (
    ClientConnectedError,
    ClientOwnedError,
    NodeDrainingError,
    UnknownClientError,
)
from clients.matching import Selector
from clients.models import (
    Conflate,
    DurableClient,
    EndedInterest,
    Interest,
    LostQueue,
)
from clients.replication import (
    DOWN,
    DRAINING,
    UP,
    Membership,
    fail_over,
    hosted_load,
    refuses_connections,
    save_placement,
    start_copies,
    top_up,
)
from durablecache.cache import selectors as cache_selectors
from durablecache.cache import services as cache_services
from durablecache.cache import sql
from durablecache.cache.exceptions import ValidationError
from durablecache.cache.models import Node
from durablecache.cache.validation import validate_name
from queues import notify
from queues import selectors as queue_selectors
from queues import services as queue_services

log = logging.getLogger(__name__)

NO_QUEUE = -2
QUEUE_LOST = -1
CLOSE_BY_OPERATOR = 4410


@dataclass
class HelloResult:
    client: DurableClient | None
    pending_events: int = NO_QUEUE
    redirect_url: str | None = None


def parse_hello_options(data: dict[str, Any]) -> dict[str, Any]:
    """Validate the optional fields of ``hello`` (also used by REST)."""
    durable_id = data.get("durable_id")
    if durable_id is not None:
        validate_name(durable_id, what="durable_id")
    timeout = data.get("timeout")
    if timeout is None:
        timeout = settings.DURABLECACHE_DEFAULT_TIMEOUT_S
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0:
        raise ValidationError("timeout must be a non-negative integer (seconds)")
    if timeout > 10 * 365 * 86400:
        raise ValidationError("timeout is too large")
    redundancy = data.get("redundancy", 0)
    if redundancy is None:
        redundancy = 0
    if isinstance(redundancy, bool) or not isinstance(redundancy, int):
        raise ValidationError("redundancy must be an integer >= -1")
    if redundancy < -1 or redundancy > 64:
        raise ValidationError("redundancy must be between -1 and 64")
    conflate = data.get("conflate", "server")
    if conflate is None:
        conflate = "server"
    if isinstance(conflate, bool):
        conflate = "true" if conflate else "false"
    if conflate not in Conflate.values:
        raise ValidationError('conflate must be "server", "true" or "false"')
    return {
        "durable_id": durable_id,
        "timeout": timeout,
        "redundancy": redundancy,
        "conflate": str(conflate),
    }


def _connection_is_live(client: DurableClient, members: Membership) -> bool:
    """Whether the recorded socket can still exist (its node has not died)."""
    if not client.is_connected:
        return False
    node = members.rows.get(client.node)
    if client.node == self_node():
        # This node before its first heartbeat (tests): trust the flag.
        return (
            node is None
            or client.connected_at is None
            or (node.started_at <= client.connected_at)
        )
    if node is None or members.state(client.node) != UP:
        return False
    return client.connected_at is None or node.started_at <= client.connected_at


def self_node() -> str:
    """The name of the node this process belongs to."""
    return settings.DURABLECACHE_NODE_NAME


def _ws_url(node: Node) -> str:
    base = node.url.rstrip("/")
    base = base.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
    return f"{base}/ws/v1/subscribe"


def _membership(durable_id: str | None) -> Membership:
    """The cluster as seen by this hello, with the client's old nodes probed.

    A client whose node was killed comes back before that node's heartbeat
    goes stale. If nothing listens at the address of the node that held its
    socket, or of its primary (then also its secondaries), that node is
    taken for down at once: failover in about a reconnect, not a node
    timeout.
    """
    members = Membership.read_here()
    if durable_id is None or not settings.DURABLECACHE_PROBE_PEERS:
        return members
    seen = DurableClient.objects.filter(durable_id=durable_id).first()
    if seen is None:
        return members
    first = [seen.node] if seen.is_connected else []
    _probe(members, [*first, seen.primary])
    if seen.primary in members.suspects:
        _probe(members, seen.secondaries)
    return members


def _probe(members: Membership, names: list[str]) -> None:
    for name in dict.fromkeys(names):
        peer = members.rows.get(name)
        if (
            peer is not None
            and name != self_node()
            and members.state(name) == UP
            and refuses_connections(peer.url)
        ):
            log.info("%s refuses connections: taken for down", name)
            members.suspects.add(name)


def client_hello(
    *, user: Any, channel_name: str, options: dict[str, Any]
) -> HelloResult:
    """Attach a socket to a (new or returning) client on this node.

    1. A durable id owned by another user is refused (4403), then one that
       is connected on a live socket (4409).
    2. If its primary is down or handing over, a complete secondary that is
       up becomes primary (failover).
    3. A client whose primary is another live node is redirected there; a
       node that is handing over its queues refuses new work (4503).
    4. Otherwise this node hosts it: the queue is created if missing,
       secondaries are placed and their copies started, and the pending
       count is -2 (no queue), -1 (queue lost), or its size.
    """
    durable_id = options["durable_id"]
    node = self_node()
    now = timezone.now()
    members = _membership(durable_id)
    draining = members.state(node) == DRAINING
    added: list[str] = []
    store_lost = False
    with transaction.atomic():
        client = None
        if durable_id is not None:
            client = (
                DurableClient.objects.select_for_update()
                .filter(durable_id=durable_id)
                .first()
            )
        if client is not None:
            if client.owner_id != user.pk:
                raise ClientOwnedError("durable id is owned by another user")
            if _connection_is_live(client, members):
                raise ClientConnectedError("durable client is already connected")
            store_lost = (
                client.is_durable
                and client.primary == node
                and queue_selectors.queue_size(client_id=client.id) == NO_QUEUE
            )
            if store_lost:
                # This node's store no longer holds the queue (a new store):
                # a complete copy elsewhere takes over, if there is one.
                members.suspects.add(node)
            if client.is_durable and client.primary:
                before = (client.primary, client.secondaries, client.syncing)
                fail_over(client, members)
                members.suspects.discard(node)
                save_placement(client, before)
            if client.primary and client.primary != node:
                primary_state = members.state(client.primary)
                if primary_state == UP:
                    return HelloResult(
                        client=None, redirect_url=_ws_url(members.rows[client.primary])
                    )
                if primary_state == DRAINING:
                    raise NodeDrainingError(
                        f"{client.primary} is handing this queue over; try again"
                    )
        if draining:
            raise NodeDrainingError(f"{node} is shutting down")
        lost = False
        returning = client is not None and client.is_durable
        if durable_id is not None:
            # Told once, on the first hello since the loss (even when a
            # backend pre-registered interest for the id meanwhile).
            gone = LostQueue.objects.filter(durable_id=durable_id)
            lost = gone.filter(owner=user).exists()
            gone.delete()
        if client is None:
            client = DurableClient(durable_id=durable_id, owner=user)
        elif client.primary and (client.primary != node or store_lost):
            # Every host of the queue is down (or this primary's store lost
            # it, with no complete copy elsewhere): say so, start afresh here.
            lost = True
            log.warning("%s: no host of its queue is up; queue lost", client)
            queue_services.queue_drop(client_id=client.id)
            _drop_elsewhere(client.id, [h for h in client.hosts if h != node])
            client.secondaries, client.syncing = [], []
        client.timeout = options["timeout"]
        client.redundancy = options["redundancy"] if durable_id is not None else 0
        client.conflate = options["conflate"]
        client.is_connected = True
        client.node = node
        client.channel_name = channel_name
        client.primary = node
        client.connected_at = now
        client.expires_at = None
        if client.is_durable:
            added = top_up(client, members, hosted_load)
        client.save()
        history.record(client, "connected", detail="queue lost" if lost else "")
        pending = queue_selectors.queue_size(client_id=client.id)
        if pending == NO_QUEUE:
            # Created before the row commits, so whoever can see the client
            # sees its queue: created after, a backend could pre-register
            # interest in between and the fan-out skip a write for want of
            # a queue. ``maintenance.drop_orphans`` waits for the row.
            queue_services.queue_ensure(
                client_id=client.id, durable_id=durable_id, conflate=client.conflate
            )
    if pending != NO_QUEUE:  # its mode, as this hello says
        queue_services.queue_ensure(
            client_id=client.id, durable_id=durable_id, conflate=client.conflate
        )
    # The copies start from this node's queue, which exists only now.
    start_copies(client.id, added, node)
    if lost or (returning and pending == NO_QUEUE):
        # A known durable client whose queue is gone from its host (its
        # store was lost): say so rather than hand it an empty queue.
        pending = QUEUE_LOST
    return HelloResult(client=client, pending_events=pending)


def _drop_elsewhere(client_id: uuid.UUID, hosts: list[str]) -> None:
    def drop() -> None:
        from clients.tasks import drop_queue_on

        for host in hosts:
            drop_queue_on(host, client_id)

    transaction.on_commit(drop)


def client_disconnected(
    *, client_id: uuid.UUID, channel_name: str, why: str = ""
) -> None:
    """Handle a socket that went away (close keepalive=true, or dropped).

    Durable: keep queue and durable interests, start the timeout. Non-durable:
    delete everything. A late call for a socket that is no longer the
    client's current one changes nothing. ``why`` goes to the history.
    """
    clients_ended(ended=[(client_id, channel_name, True)], why=why)


def client_close(*, client_id: uuid.UUID, channel_name: str, keepalive: bool) -> None:
    """Handle the ``close`` frame: keep for ``timeout`` or delete at once."""
    clients_ended(ended=[(client_id, channel_name, keepalive)])


def clients_ended(
    *, ended: Sequence[tuple[uuid.UUID, str, bool]], why: str = "", at: Any = None
) -> int:
    """The ends of many sockets at once, each (client id, socket id, keep):
    ``client_disconnected`` where ``keep``, else ``client_close`` with
    keepalive false. One transaction on each database, whatever their
    number (a storm of 1000 dropped sockets took two transactions per
    socket, 11 s of the database thread; docs/performance.md). Timeouts
    run from ``at`` (default now). Return how many clients were released."""
    keep: dict[tuple[uuid.UUID, str], bool] = {}
    for client_id, channel_name, stays in ended:  # a close wins over a drop
        socket = (client_id, channel_name)
        keep[socket] = keep.get(socket, True) and stays
    if not keep:
        return 0
    with transaction.atomic():
        clients = [
            client
            for client in DurableClient.objects.select_for_update()
            .filter(pk__in={client_id for client_id, _ in keep})
            .order_by("pk")
            if (client.pk, client.channel_name) in keep
        ]
        kept: list[DurableClient] = []
        gone: list[DurableClient] = []
        for client in clients:
            stays = client.is_durable and keep[client.pk, client.channel_name]
            (kept if stays else gone).append(client)
        closed = [client for client in gone if client.is_durable]
        history.record_many(closed, "closed", detail="close with keepalive false")
        _delete_clients(gone)
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
    for name in ("is_connected", "channel_name", "disconnected_at", "expires_at", "id")
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
        client.channel_name = ""
        client.disconnected_at = now
        client.expires_at = now + timedelta(seconds=client.timeout)
    db = connections[DEFAULT_DB_ALIAS]
    rows = sql.prepared_rows(clients, _RELEASED, db)
    sql.update_rows(db, DurableClient, _RELEASED[:-1], _RELEASED[-1:], rows)
    history.record_many(clients, "disconnected", detail=why)
    # Last: it locks the event log, which writers wait for, to the commit.
    _end_interests([client.pk for client in clients], is_durable=False)


def _delete_client(client: DurableClient) -> None:
    """Delete a client, its registrations and its queue on every host."""
    _delete_clients([client])


def _delete_clients(clients: list[DurableClient]) -> None:
    """Delete clients, their registrations and their queues on every host."""
    if not clients:
        return
    hosts = {client.id: client.hosts for client in clients}
    DurableClient.objects.filter(pk__in=list(hosts)).delete()

    def drop_queues() -> None:
        from clients.tasks import drop_queue_on

        here = [pk for pk, on in hosts.items() if self_node() in on]
        if here:
            queue_services.queue_drop_many(client_ids=here)
        for pk, on in hosts.items():
            for host in on:
                if host != self_node():
                    drop_queue_on(host, pk)

    transaction.on_commit(drop_queues)


def client_get_for(*, user: Any, durable_id: str) -> DurableClient:
    """Return a durable client visible to ``user`` (operators see all)."""
    client = DurableClient.objects.filter(durable_id=durable_id).first()
    if client is None or not (user.is_staff or client.owner_id == user.pk):
        raise UnknownClientError(f"no durable client {durable_id!r}")
    return client


def client_delete(*, user: Any, durable_id: str) -> None:
    """Close a durable client for good: drop its queue and socket (4410)."""
    with transaction.atomic():
        client = client_get_for(user=user, durable_id=durable_id)
        client = DurableClient.objects.select_for_update().get(pk=client.pk)
        client_id, node = client.id, client.node
        history.record(client, "deleted", detail=f"closed by {user}")
        _delete_client(client)
        if node:  # the node that holds (or held) its socket
            transaction.on_commit(
                lambda: notify.close_client(client_id, CLOSE_BY_OPERATOR, node)
            )


def client_check_claim(*, user: Any, durable_id: str) -> None:
    """Raise unless ``durable_id`` is a valid id that names no client yet,
    or a client ``user`` may see.

    The REST doors that may create a client call it before they read the
    request's body: another owner's client is a 404 whatever the body
    says, as the websocket door answers 4403 before it reads a field.
    """
    validate_name(durable_id, what="durable_id")
    client = DurableClient.objects.filter(durable_id=durable_id).first()
    if client is not None and not (user.is_staff or client.owner_id == user.pk):
        raise UnknownClientError(f"no durable client {durable_id!r}")


def client_ensure_offline(*, user: Any, durable_id: str) -> DurableClient:
    """Return the caller's durable client, creating it offline when unknown.

    A created client is hosted on this node, ``disconnected``, and its
    timeout starts now (REST pre-registration of durable interest).
    """
    validate_name(durable_id, what="durable_id")
    try:
        return client_get_for(user=user, durable_id=durable_id)
    except UnknownClientError:
        if DurableClient.objects.filter(durable_id=durable_id).exists():
            raise
    now = timezone.now()
    timeout = settings.DURABLECACHE_DEFAULT_TIMEOUT_S
    try:
        with transaction.atomic():
            client = DurableClient.objects.create(
                durable_id=durable_id,
                owner=user,
                timeout=timeout,
                primary=self_node(),
                disconnected_at=now,
                expires_at=now + timedelta(seconds=timeout),
            )
            # Before the row commits, as ``client_hello`` creates it: a
            # first hello that came between the two took the id's queue
            # for lost.
            queue_services.queue_ensure(
                client_id=client.id, durable_id=durable_id, conflate=client.conflate
            )
    except IntegrityError:
        return client_get_for(user=user, durable_id=durable_id)
    return client


def interest_register(
    *,
    client: DurableClient,
    region: str,
    selector: Selector,
    is_durable: bool,
    policy: str,
) -> list[Interest]:
    """Register (idempotently) one selector; return its interest rows.

    New rows see events with seq above the log head read here, and the
    image is read after that, so nothing written in between is missed
    (the client's cache ignores an event no newer than its image).

    The head is read with the event log locked to the commit, as
    ``_end_interests`` reads its end: a write that commits between a head
    read without the lock and the rows' commit has a seq above ``since``,
    so a host whose fan-out read it before the rows existed skipped it
    while a host that read it after queued it. Locks, in this order: the
    client (as ``_end_interests``, which takes its interests before the
    log: holding the client first keeps the two from waiting on each
    other), the event log, the interests.
    """
    cache_selectors.region_get(name=region)
    if is_durable and not client.is_durable:
        raise ValidationError("durable interest needs a durable client")
    rows = []
    with transaction.atomic():
        _lock_clients([client.pk])
        since = cache_services.event_log_head_locked()
        for value in selector.values:
            interest, created = Interest.objects.get_or_create(
                client=client,
                region=region,
                kind=selector.kind,
                selector=value,
                defaults={
                    "is_durable": is_durable,
                    "policy": policy,
                    "since_seq": since,
                },
            )
            if not created and (
                interest.is_durable != is_durable or interest.policy != policy
            ):
                interest.is_durable = is_durable
                interest.policy = policy
                interest.save(update_fields=["is_durable", "policy"])
            rows.append(interest)
    return rows


def client_for_socket(*, client_id: uuid.UUID) -> DurableClient:
    """The client a socket holds (a socket keeps only its id and flags)."""
    client = DurableClient.objects.filter(pk=client_id).first()
    if client is None:
        raise UnknownClientError("the client was closed")
    return client


def interest_register_for(*, client_id: uuid.UUID, **fields: Any) -> list[Interest]:
    """``interest_register`` for the client a socket holds."""
    return interest_register(client=client_for_socket(client_id=client_id), **fields)


def interest_unregister(
    *, client: DurableClient, region: str, selector: Selector
) -> int:
    """Remove the rows of one selector; return how many went."""
    return _end_interests(
        [client.pk],
        region=region,
        kind=selector.kind,
        selector__in=selector.values,
    )


def interest_delete(*, client: DurableClient, pk: int) -> None:
    if _end_interests([client.pk], pk=pk) == 0:
        raise UnknownClientError(f"no interest {pk}")


def _lock_clients(client_ids: list[uuid.UUID]) -> None:
    """Lock these clients' rows, by pk (inside a transaction)."""
    list(
        DurableClient.objects.select_for_update()
        .filter(pk__in=client_ids)
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def _end_interests(client_ids: list[uuid.UUID], **which: Any) -> int:
    """Delete the interests of these clients that match ``which``; return
    how many went. Each one that may have wanted an event already written
    is kept as an ``EndedInterest`` through the log head, so every host of
    the queue, however far behind its fan-out is, queues the same events
    for it: those written before the removal (the events written after are
    not its, on any host).

    Locks, in this order: the clients (by pk, as a socket's end, an expiry
    and a delete lock them; a no-op where the caller holds them), their
    interests, then the event log, held to the commit: a write that
    reserved a seq commits first and is the interest's, a later one waits
    and is not (a head read without the lock could miss an event already
    committed when the removal commits, which the hosts whose fan-out had
    seen the live interest queued)."""
    if not client_ids:
        return 0
    with transaction.atomic():
        _lock_clients(client_ids)
        rows = list(
            Interest.objects.select_for_update()
            .filter(client_id__in=client_ids, **which)
            .values_list("pk", "client_id", "region", "kind", "selector", "since_seq")
        )
        if not rows:
            return 0
        until = cache_services.event_log_head_locked()
        EndedInterest.objects.bulk_create(
            EndedInterest(
                client_id=client_id,
                region=region,
                kind=kind,
                selector=selector,
                since_seq=since,
                until_seq=until,
            )
            for _, client_id, region, kind, selector, since in rows
            if since < until
        )
        return Interest.objects.filter(pk__in=[row[0] for row in rows]).delete()[0]


def clients_expire() -> int:
    """Expire disconnected durable clients past their timeout; return the count.

    Idempotent: several nodes may run it at once; each client is expired by
    whoever locks it first, and its id remembered for ``pending_events: -1``.
    """
    now = timezone.now()
    due = list(
        DurableClient.objects.filter(
            is_connected=False, expires_at__lte=now, durable_id__isnull=False
        ).values_list("pk", flat=True)[:500]
    )
    count = 0
    for pk in due:
        with transaction.atomic():
            client = (
                DurableClient.objects.select_for_update()
                .filter(pk=pk, is_connected=False, expires_at__lte=now)
                .first()
            )
            if client is None:
                continue
            LostQueue.objects.update_or_create(
                durable_id=client.durable_id,
                defaults={"reason": "expired", "owner_id": client.owner_id},
            )
            history.record(client, "expired", detail=f"away over {client.timeout} s")
            _delete_client(client)
            count += 1
    return count


def clients_node_restarted(*, node: str) -> int:
    """Mark every client connected to ``node`` as dropped (the node restarted)."""
    held = DurableClient.objects.filter(is_connected=True, node=node)
    sockets = held.values_list("pk", "channel_name")
    return clients_ended(ended=[(pk, socket, True) for pk, socket in sockets])


def interest_unregister_checked(
    *, client: DurableClient, region: str, selector: Selector
) -> int:
    """Unregister after checking the region exists (``no_such_region``)."""
    cache_selectors.region_get(name=region)
    return interest_unregister(client=client, region=region, selector=selector)


def interest_unregister_for(
    *, client_id: uuid.UUID, region: str, selector: Selector
) -> int:
    """``interest_unregister_checked`` for the client a socket holds."""
    client = client_for_socket(client_id=client_id)
    return interest_unregister_checked(client=client, region=region, selector=selector)


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
    for pk, node, socket in sockets.values_list("pk", "node", "channel_name"):
        held[node].append((pk, socket, True))
    return sum(
        clients_ended(ended=ended, why=f"{node} down", at=dead[node])
        for node, ended in held.items()
        if ended
    )
