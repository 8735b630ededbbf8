"""Redundant subscription queues: where a durable client's queue lives.

A durable client's queue is hosted on a ``primary`` (the node that serves
its socket) and ``secondaries`` (``DurableClient`` in the cluster database).
Every host fills its copy by itself from the cluster event log (its own
fan-out), so a copy only has to be *started*: a new secondary takes its
fan-out cursor as the point from which its own fan-out fills it, and the
source (the primary) sends the entries queued through that point, a page
per task (``queues.services.queue_adopt`` / ``queue_copy_in``). Until the
last page arrives the secondary is listed in ``syncing`` and cannot be
promoted. Acknowledgements reach the secondaries by a batched relay from
the primary's sockets, healed by the primary's size reports.

Failover and repair are one idempotent step (``fix_placement``) run by
every node's tick, by ``hello`` and by a node handing over on SIGTERM:
drop hosts that are down or draining, promote a complete live secondary
when the primary is gone, add secondaries on the least loaded live nodes
until the redundancy is met. Rows are locked per client, so any number of
nodes may run it at once. docs/operations.md#redundancy-and-failover.
"""

import contextlib
import logging
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import close_old_connections, transaction
from django.db.models import Count
from django.utils import timezone

from cache.models import Node
from clients import dispatch, fanout, history
from clients.models import DurableClient, QueueSizeReport
from queues import selectors as queue_selectors
from queues import services as queue_services

log = logging.getLogger(__name__)

UP, DRAINING, DOWN = "up", "draining", "down"


@dataclass
class Membership:
    """The cluster's nodes as seen now: up, draining (handing over) or down.

    A draining node whose heartbeat stopped is down like any other.
    """

    rows: dict[str, Node]
    suspects: set[str] = field(default_factory=set)
    # The node running this code (``read_here``): up (or draining) whatever
    # its heartbeat says -- before its first one (a test, a command), or
    # when its own heartbeat ran late (a busy cluster database, a paused
    # VM): it is evidently alive, and taking itself for dead released its
    # own live sockets' clients, which then expired while connected.
    assume_up: set[str] = field(default_factory=set)

    @classmethod
    def read(cls) -> "Membership":
        return cls(rows={n.name: n for n in Node.objects.all()})

    @classmethod
    def read_here(cls) -> "Membership":
        """``read``, as the node running this code sees it: itself up."""
        members = cls.read()
        members.assume_up.add(settings.DURABLECACHE_NODE_NAME)
        return members

    def state(self, name: str) -> str:
        node = self.rows.get(name)
        if name in self.suspects:
            return DOWN
        if name in self.assume_up:
            return DRAINING if node is not None and node.is_draining else UP
        if node is None:
            return DOWN
        horizon = timezone.now() - timedelta(
            seconds=settings.DURABLECACHE_NODE_TIMEOUT_S
        )
        if node.last_heartbeat < horizon:
            return DOWN
        return DRAINING if node.is_draining else UP

    def up(self) -> list[str]:
        names = set(self.rows) | self.assume_up
        return sorted(n for n in names if self.state(n) == UP)


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


def wanted_secondaries(client: DurableClient, live: int) -> int:
    """How many secondaries the client should have with ``live`` nodes up."""
    if not client.is_durable:
        return 0
    if client.redundancy < 0:
        return max(0, live - 1)
    return client.redundancy


def redundancy_satisfied(client: DurableClient, live: int) -> bool:
    return len(client.secondaries) >= wanted_secondaries(client, live)


def hosted_load() -> Counter[str]:
    """How many queues each node hosts, from the nodes' size reports."""
    return Counter(
        dict(
            QueueSizeReport.objects.values("node")
            .annotate(n=Count("id"))
            .values_list("node", "n")
        )
    )


def _set_secondaries(client: DurableClient, secondaries: list[str]) -> None:
    client.secondaries = secondaries
    client.syncing = [s for s in client.syncing if s in secondaries]


def fail_over(client: DurableClient, members: Membership) -> bool:
    """Drop hosts that are not up; promote a secondary if the primary went.

    Returns whether the client ends with an up (or this-node) primary.

    * A primary up keeps its up secondaries.
    * A primary down or draining gives way to the first complete up copy.
    * A draining primary without one keeps only its up secondaries: it
      must hand the queue to an up node, and a host that is not up,
      counted among the secondaries, kept the copy from being made (two
      nodes stopped together kept their shared queue until they exited).
    * A primary down without one gives way to a complete copy on a
      draining node (stopping, handing its queues over), whose handover
      then moves the queue to an up node: left listed, that copy left with
      its node. Else nothing changes: its hosts may come back (a restart
      keeps the store), and a ``hello`` meanwhile is told the queue is lost.
    """
    keep = [s for s in client.secondaries if members.state(s) == UP]
    primary = members.state(client.primary)
    if primary == UP:
        _set_secondaries(client, keep)
        return True
    complete = [s for s in keep if s not in client.syncing]
    if complete:
        client.primary = complete[0]
        _set_secondaries(client, [s for s in keep if s != complete[0]])
        return True
    if primary == DRAINING:
        _set_secondaries(client, keep)
        return False
    handing = [
        s
        for s in client.secondaries
        if members.state(s) == DRAINING and s not in client.syncing
    ]
    if handing:
        client.primary = handing[0]
        _set_secondaries(client, keep)
    return False


def top_up(
    client: DurableClient,
    members: Membership,
    load: Callable[[], Counter[str]],
    at_least: int = 0,
) -> list[str]:
    """Add secondaries on the least loaded up nodes; return the new ones.

    ``load()`` counts the queues each node hosts; it is asked only when a
    secondary is to be added (it is a query, and most ``hello``s of a
    connect storm add none). Also removes secondaries beyond the
    redundancy (it can be lowered by a later ``hello``), copies still being
    filled first.
    """
    live = members.up()
    want = max(at_least, wanted_secondaries(client, len(live)))
    added: list[str] = []
    missing = want - len(client.secondaries)
    if missing > 0:
        counts = load()
        free = sorted(
            (n for n in live if n not in client.hosts), key=lambda n: (counts[n], n)
        )
        for name in free[:missing]:
            client.secondaries = [*client.secondaries, name]
            client.syncing = [*client.syncing, name]
            counts[name] += 1
            added.append(name)
    while len(client.secondaries) > want:
        extra = next(
            (s for s in reversed(client.secondaries) if s in client.syncing),
            client.secondaries[-1],
        )
        _set_secondaries(client, [s for s in client.secondaries if s != extra])
    return added


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


def start_copies(client_id: uuid.UUID, targets: Iterable[str], source: str) -> None:
    """Ask each target's worker to start filling its copy from ``source``."""
    for target in targets:
        dispatch.adopt_on(target, client_id, source)


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


def _needs_fixing(row: tuple[Any, ...], members: Membership, live: int) -> bool:
    _, primary, secondaries, _, redundancy = row
    if members.state(primary) != UP:
        # Nothing to do for a dead primary without any copy elsewhere (its
        # queue comes back with the node, or the next hello says -1).
        return bool(secondaries) or members.state(primary) == DRAINING
    if any(members.state(s) != UP for s in secondaries):
        return True
    want = max(0, live - 1) if redundancy < 0 else redundancy
    free = live - 1 - len(secondaries)
    return len(secondaries) > want or (len(secondaries) < want and free > 0)


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
    todo = [row[0] for row in rows if _needs_fixing(row, members, len(live))]
    if not todo:
        return 0
    load = hosted_load()
    for pk in todo:
        fix_placement(pk, members, load)
    return len(todo)


def copy_finished(*, client_id: uuid.UUID, node: str) -> None:
    """Record that ``node`` holds a complete copy of the client's queue."""
    with transaction.atomic():
        client = DurableClient.objects.select_for_update().filter(pk=client_id).first()
        if client is not None and node in client.syncing:
            client.syncing = [s for s in client.syncing if s != node]
            client.save(update_fields=["syncing"])


def copy_source(client: DurableClient, members: Membership, node: str) -> str | None:
    """The host a copy on ``node`` should be filled from: the primary if it
    is up (or handing over), else a complete secondary that is up."""
    if client.primary != node and members.state(client.primary) in (UP, DRAINING):
        return client.primary
    for host in client.complete_secondaries:
        if host != node and members.state(host) == UP:
            return host
    return None


def adopt(*, client_id: uuid.UUID, node: str, source: str) -> None:
    """On a new host: create the copy and ask the source for its first page."""
    client = DurableClient.objects.filter(pk=client_id).first()
    if client is None or node not in client.secondaries:
        return
    state = queue_services.queue_adopt(
        client_id=client_id,
        durable_id=client.durable_id,
        conflate=client.conflate,
        node=node,
        source=source,
    )
    if state.is_synced:
        copy_finished(client_id=client_id, node=node)
        return
    _request_page(client_id, source, node, state.copy_after, state.copy_upto)


def _request_page(
    client_id: uuid.UUID, source: str, target: str, after: int, upto: int
) -> None:
    dispatch.copy_out_on(source, client_id, target, after, upto)


def copy_out(
    *, client_id: uuid.UUID, node: str, target: str, after: int, upto: int
) -> dict[str, Any] | None:
    """On the source: one page of the queue through ``upto`` for ``target``.

    The source first fans out through ``upto`` itself, so the page holds
    every event the target's own fan-out skipped.
    """
    if queue_selectors.fanout_cursor(node=node) < upto:
        fanout.fanout_node(node)
    page = queue_selectors.queue_copy_page(
        client_id=client_id,
        after=after,
        upto=upto,
        limit=settings.DURABLECACHE_COPY_PAGE,
    )
    if page is None:
        log.warning("no complete copy of %s here for %s", client_id, target)
        return None
    page["upto"] = upto
    return page


def copy_page_send(
    *, client_id: uuid.UUID, node: str, target: str, after: int, upto: int
) -> None:
    """On the source: send ``target`` one page of the queue (``copy_out``)."""
    page = copy_out(
        client_id=client_id, node=node, target=target, after=after, upto=upto
    )
    if page is not None:
        dispatch.copy_in_on(target, client_id, node, page)


def copy_in(
    *, client_id: uuid.UUID, node: str, source: str, page: dict[str, Any]
) -> None:
    """On the new host: store a page, then ask for the next or report done."""
    done = queue_services.queue_copy_in(client_id=client_id, page=page)
    if done is None:
        return
    if done:
        copy_finished(client_id=client_id, node=node)
    else:
        _request_page(client_id, source, node, int(page["next_after"]), page["upto"])


def copies_resume(node: str) -> int:
    """Heal copies on this node from the rows; return how many were touched.

    1. A copy that got no page for ``DURABLECACHE_COPY_RETRY_S`` asks again
       (from the current source: the old one may have died).
    2. A copy the cluster lists here but this store lacks is started.
    3. A complete copy the cluster still lists as syncing is reported.
    4. A complete secondary whose rows this store lost is unlisted (the
       repair then places a fresh copy).
    """
    members = Membership.read()
    states = {s.client_id: s for s in queue_selectors.queue_states()}
    touched = 0
    mine = DurableClient.objects.filter(durable_id__isnull=False).exclude(primary=node)
    stale = timezone.now() - timedelta(seconds=settings.DURABLECACHE_COPY_RETRY_S)
    for client in mine.only("id", "primary", "secondaries", "syncing"):
        if node not in client.secondaries:
            continue
        state = states.get(client.id)
        if node in client.syncing:
            if state is not None and state.is_synced:
                copy_finished(client_id=client.id, node=node)
                touched += 1
                continue
            if state is not None and (
                state.copy_requested_at is not None and state.copy_requested_at >= stale
            ):
                continue
            source = copy_source(client, members, node)
            if state is not None:
                # Diagnostics: a copy should finish in a few page round trips.
                log.warning(
                    "copy of %s here stalled since %s (source %s, after %s of %s);"
                    " asking %s again",
                    client.id,
                    state.copy_requested_at,
                    state.copy_source,
                    state.copy_after,
                    state.copy_upto,
                    source,
                )
            if source is not None:
                adopt(client_id=client.id, node=node, source=source)
                touched += 1
        elif state is None:
            _unlist(client.id, node)
            touched += 1
    return touched


def _unlist(client_id: uuid.UUID, node: str) -> None:
    with transaction.atomic():
        client = DurableClient.objects.select_for_update().filter(pk=client_id).first()
        if client is not None and node in client.secondaries:
            _set_secondaries(client, [s for s in client.secondaries if s != node])
            client.save(update_fields=["secondaries", "syncing"])


def apply_reported_acks(node: str) -> int:
    """Apply the acks a primary reported to the copies this node holds.

    Heals a lost relay message: the primary's tick reports its
    ``acked_through`` with its queue sizes.
    """
    mine = queue_selectors.queue_acked_through()
    if not mine:
        return 0
    reports = QueueSizeReport.objects.filter(client_id__in=list(mine)).values_list(
        "client_id", "node", "acked_through", "client__primary"
    )
    acks = {
        pk: acked
        for pk, host, acked, primary in reports
        if host == primary != node and acked > mine.get(pk, 0)
    }
    return queue_services.queue_ack_many(acks) if acks else 0


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
        load = hosted_load()
        for pk in hosted:
            fix_placement(pk, members, load)
        time.sleep(0.2)


class AckRelay:
    """Carry a primary's acknowledgements to the client's other hosts.

    Sockets only mark (client, up_to) and return; one daemon thread per
    process sends, every ``DURABLECACHE_ACK_RELAY_S``, one task per host
    with the highest ack of each client. A relay lost with the process is
    healed by the primary's size report (``apply_reported_acks``).
    """

    def __init__(self) -> None:
        self.pending: dict[uuid.UUID, int] = {}
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def add(self, client_id: uuid.UUID, up_to: int) -> None:
        with self.lock:
            if up_to > self.pending.get(client_id, 0):
                self.pending[client_id] = up_to
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(
                    target=self._run, name="ack-relay", daemon=True
                )
                self.thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(settings.DURABLECACHE_ACK_RELAY_S)
            with self.lock:
                acks, self.pending = self.pending, {}
            if not acks:
                continue
            try:
                self.flush(acks)
            except Exception as exc:  # the size reports heal it
                log.warning("ack relay failed: %s", exc)
            finally:
                with contextlib.suppress(Exception):
                    close_old_connections()

    @staticmethod
    def flush(acks: dict[uuid.UUID, int]) -> None:
        own = settings.DURABLECACHE_NODE_NAME
        per_host: dict[str, dict[str, int]] = {}
        rows = DurableClient.objects.filter(pk__in=list(acks)).values_list(
            "pk", "primary", "secondaries"
        )
        for pk, primary, secondaries in rows:
            for host in [primary, *secondaries]:
                if host and host != own:
                    per_host.setdefault(host, {})[pk.hex] = acks[pk]
        for host, batch in per_host.items():
            dispatch.ack_on(host, batch)


ack_relay = AckRelay()
