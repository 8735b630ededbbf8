"""``hello``: attach a socket to a new or returning client on this node.

Placement, pending counts and the -2 / -1 / n rule: docs/protocol.md#hello.
"""

import logging
import socket
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from cache.models import Node
from cache.validation import validate_name
from clients import history, selectors
from clients.cq_forgets import cqs_forget_pending
from clients.exceptions import (
    ClientConnectedError,
    ClientOwnedError,
    NodeDrainingError,
)
from clients.models import Conflate, DurableClient, LostQueue
from clients.placement import (
    DRAINING,
    UP,
    Membership,
    connection_is_live,
    fail_over,
    self_node,
    top_up,
)
from clients.replication import save_placement, start_copies
from clients.services.ownership import queues_drop_after_commit
from common.errors import ValidationError
from queues import selectors as queue_selectors
from queues import services as queue_services

log = logging.getLogger(__name__)

NO_QUEUE = -2
QUEUE_LOST = -1


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
    max_queued = data.get("max_queued")
    if max_queued is None:
        max_queued = settings.DURABLECACHE_DEFAULT_MAX_QUEUED
    limit = settings.DURABLECACHE_MAX_QUEUED
    if (
        isinstance(max_queued, bool)
        or not isinstance(max_queued, int)
        or not 1 <= max_queued <= limit
    ):
        raise ValidationError(f"max_queued must be an integer from 1 to {limit}")
    return {
        "durable_id": durable_id,
        "timeout": timeout,
        "redundancy": redundancy,
        "conflate": str(conflate),
        "max_queued": max_queued,
    }


def client_hello(*, user: Any, socket_id: str, options: dict[str, Any]) -> HelloResult:
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
    try:
        return _hello_once(user=user, socket_id=socket_id, options=options)
    except IntegrityError:
        # Another door created the id between this hello's look-up (no row,
        # so nothing to lock) and its insert: a REST pre-registration or a
        # second first hello. Once more, now with the row (its owner and
        # socket checks apply).
        durable_id = options["durable_id"]
        if (
            durable_id is None
            or not DurableClient.objects.filter(durable_id=durable_id).exists()
        ):
            raise
        return _hello_once(user=user, socket_id=socket_id, options=options)


def _hello_once(*, user: Any, socket_id: str, options: dict[str, Any]) -> HelloResult:
    durable_id = options["durable_id"]
    node = self_node()
    now = timezone.now()
    members = _membership(durable_id)
    draining = members.state(node) == DRAINING
    with transaction.atomic():
        client = _client_locked(durable_id)
        store_lost = False
        if client is not None:
            _check_owner_and_socket(client, user=user, members=members)
            store_lost = _fail_over(client, members, node)
            elsewhere = _served_elsewhere(client, members, node)
            if elsewhere is not None:
                return elsewhere
        if draining:
            raise NodeDrainingError(f"{node} is shutting down")
        known = client is not None
        returning = client is not None and client.is_durable
        lost = _lost_queue_told(durable_id, user)
        if client is None:
            client = DurableClient(durable_id=durable_id, owner=user)
        elif client.primary and (client.primary != node or store_lost):
            lost = True
            _queue_start_afresh(client, node)
        added = _attach_here(client, socket_id, options, members, now)
        history.record(client, "connected", detail="queue lost" if lost else "")
        # A CQ closed while this host missed its forget: drained before
        # the queue is counted and served from here.
        if known:
            cqs_forget_pending(node=node, client_id=client.id)
        pending = _queue_created(client)
    _queue_ready(client, added, node, pending)
    if lost or (returning and pending == NO_QUEUE):
        # A known durable client whose queue is gone from its host (its
        # store was lost): say so rather than hand it an empty queue.
        pending = QUEUE_LOST
    elif client.gap_since is not None:
        # The queue overflowed: whatever a host still holds is covered by
        # the resync after ``ready`` (docs/protocol.md, "Bounded queues").
        pending = 0
    return HelloResult(client=client, pending_events=pending)


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


def refuses_connections(url: str) -> bool:
    """Whether nothing listens at a node's address (its process is gone).

    Only a refused connection counts: a timeout may be a slow or distant
    node, and taking a client from a live node would break 4409.
    """
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=0.5):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


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


def _client_locked(durable_id: str | None) -> DurableClient | None:
    """The client with ``durable_id``, its row locked; None when unknown."""
    if durable_id is None:
        return None
    return (
        DurableClient.objects.select_for_update().filter(durable_id=durable_id).first()
    )


def _check_owner_and_socket(
    client: DurableClient, *, user: Any, members: Membership
) -> None:
    """Step 1: refuse another user's durable id (4403), then one a live
    socket holds (4409)."""
    if client.owner_id != user.pk:
        raise ClientOwnedError("durable id is owned by another user")
    if connection_is_live(client, members):
        raise ClientConnectedError("durable client is already connected")


def _fail_over(client: DurableClient, members: Membership, node: str) -> bool:
    """Step 2: fail the client's queue over if its primary is down or
    handing over, and save the hosts. Returns whether ``node`` is its
    primary and its store has lost the queue (a new store)."""
    store_lost = (
        client.is_durable
        and client.primary == node
        and queue_selectors.queue_size(client_id=client.id) == NO_QUEUE
    )
    if store_lost:
        # A complete copy elsewhere takes over, if there is one.
        members.suspects.add(node)
    if client.is_durable and client.primary:
        before = (client.primary, client.secondaries, client.syncing)
        fail_over(client, members)
        members.suspects.discard(node)
        save_placement(client, before)
    return store_lost


def _served_elsewhere(
    client: DurableClient, members: Membership, node: str
) -> HelloResult | None:
    """Step 3: the redirect to a primary up on another node; 4503 while
    that primary hands the queue over; None when this node may serve."""
    if not client.primary or client.primary == node:
        return None
    primary_state = members.state(client.primary)
    if primary_state == UP:
        url = _ws_url(members.rows[client.primary])
        return HelloResult(client=None, redirect_url=url)
    if primary_state == DRAINING:
        raise NodeDrainingError(
            f"{client.primary} is handing this queue over; try again"
        )
    return None


def _ws_url(node: Node) -> str:
    base = node.url.rstrip("/")
    base = base.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
    return f"{base}/ws/v1/subscribe"


def _lost_queue_told(durable_id: str | None, user: Any) -> bool:
    """Whether the queue of ``durable_id`` was lost since its owner's last
    hello. Told once, on the first hello since the loss (even when a
    backend pre-registered interest for the id meanwhile)."""
    if durable_id is None:
        return False
    gone = LostQueue.objects.filter(durable_id=durable_id)
    lost = gone.filter(owner=user).exists()
    gone.delete()
    return lost


def _queue_start_afresh(client: DurableClient, node: str) -> None:
    """Every host of the queue is down (or this primary's store lost it,
    with no complete copy elsewhere): drop it everywhere; the client starts
    afresh here."""
    log.warning("%s: no host of its queue is up; queue lost", client)
    queue_services.queue_drop(client_id=client.id)
    queues_drop_after_commit({client.id: [h for h in client.hosts if h != node]})
    client.secondaries, client.syncing = [], []


def _attach_here(
    client: DurableClient,
    socket_id: str,
    options: dict[str, Any],
    members: Membership,
    now: datetime,
) -> list[str]:
    """Step 4: save the client as connected through ``socket_id`` with
    the hello's options, hosted here, and its secondaries placed; return
    the secondaries added."""
    client.timeout = options["timeout"]
    client.redundancy = options["redundancy"] if client.is_durable else 0
    client.conflate = options["conflate"]
    client.max_queued = options.get(
        "max_queued", settings.DURABLECACHE_DEFAULT_MAX_QUEUED
    )
    client.is_connected = True
    client.node = client.primary = self_node()
    client.socket_id = socket_id
    client.connected_at = now
    client.expires_at = None
    added = top_up(client, members, selectors.hosted_load) if client.is_durable else []
    client.save()
    return added


def _queue_created(client: DurableClient) -> int:
    """Create the client's queue here if missing, inside the hello's
    transaction; return its size before (``NO_QUEUE``: there was none).

    Created before the client's row commits, so whoever can see the client
    sees its queue: created after, a backend could pre-register interest
    in between and the fan-out skip a write for want of a queue
    (``maintenance.drop_orphans`` waits for the row).
    """
    pending = queue_selectors.queue_size(client_id=client.id)
    if pending == NO_QUEUE:
        queue_services.queue_ensure(
            client_id=client.id, durable_id=client.durable_id, conflate=client.conflate
        )
    return pending


def _queue_ready(
    client: DurableClient, added: list[str], node: str, pending: int
) -> None:
    """Give an existing queue the mode this hello says, then start the new
    copies from this node's queue."""
    if pending != NO_QUEUE:
        queue_services.queue_ensure(
            client_id=client.id, durable_id=client.durable_id, conflate=client.conflate
        )
    start_copies(client.id, added, node)
