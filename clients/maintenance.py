"""Periodic work every node runs on its own worker (no node is special).

Each step is idempotent, so running it on every node at once is safe.
"""

import logging
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from cache import selectors as cache_selectors
from cache import services as cache_services
from cache.models import Entry, Event, Node
from clients import fanout, history, placement, replication, samples, services
from clients.models import (
    DurableClient,
    EndedCq,
    EndedInterest,
    Interest,
    QueueSizeReport,
)
from common import sql
from queues import selectors as queue_selectors
from queues import services as queue_services

log = logging.getLogger(__name__)
EVENT_RETENTION = timedelta(minutes=10)
# The event log is pruned from its oldest event, at most PRUNE_CHUNKS chunks
# of PRUNE_CHUNK seqs per tick (100,000 events a second at the default tick).
PRUNE_CHUNK = 10_000
PRUNE_CHUNKS = 10

# How often a tick looks at the dead rows of the tables that churn (step 13).
VACUUM_CHECK_S = 10.0
# The cluster database's tables whose rows churn: events pruned, entries
# and size reports rewritten, clients and interests coming and going.
CLUSTER_CHURN = (
    Event,
    Entry,
    QueueSizeReport,
    DurableClient,
    Interest,
    EndedInterest,
)
_vacuum = {"checked": float("-inf")}


def tick(node: str, judge: bool = True, turn: int | None = None) -> None:
    """1. fan out unread events, 2. publish the fan-out cursor,
    3. disconnect clients of dead nodes, 4. fail over and restore
    redundancy, 5. expire clients, 6. report queue sizes and acks (what
    placement counts: every tick, so a burst of ``hello``s spreads its
    copies); then the chores (``CHORES``): all of them, or with ``turn``
    only the group ``turn`` names.

    ``judge`` is False while this node has not heartbeaten without a break
    for a node timeout (it just started, or the cluster database just came
    back): other nodes' heartbeats may be stale for the same reason, so it
    does not take them for dead (steps 3 and 4) yet.
    """
    fanout.fanout_node(node)
    report_fanout_cursor(node)
    if judge:
        services.clients_of_dead_nodes_disconnect()
        replication.placement_repair()
    services.clients_expire()
    report_queue_sizes(node)
    chores = CHORES if turn is None else (CHORES[turn % len(CHORES)],)
    for chore in chores:
        chore(node)


def _copies_and_forgets(node: str) -> None:
    """Heal copies being filled here and the closed CQs' forgets still
    pending here (a lost task)."""
    replication.copies_resume(node)
    services.cqs_forget_pending(node=node)


def _reported_acks(node: str) -> None:
    """Apply the acks primaries reported to the copies here (a lost relay)."""
    replication.apply_reported_acks(node)


def _orphans(node: str) -> None:
    """Drop orphaned queues and the events no queue here holds any more."""
    drop_orphans()
    queue_services.queued_events_prune(node)


def _pruning(node: str) -> None:
    """Prune the event log and the tombstones kept past
    ``DURABLECACHE_TOMBSTONE_KEEP_S``."""
    prune_event_log()
    cache_services.tombstones_prune(keep_s=settings.DURABLECACHE_TOMBSTONE_KEEP_S)


def _records(node: str) -> None:
    """Sample counters for the dashboard (every few seconds), prune old
    client history, vacuum the tables whose rows churn when their dead
    rows pile up (PostgreSQL; looked at every ``VACUUM_CHECK_S``)."""
    samples.sample(node)
    history.history_prune()
    vacuum_churned()


# The tick's chores: heals of a lost task or relay, and tidying. None is
# urgent, and each costs about the same whether it runs every second or
# every fifth (it reads every queue or report of the node, and what it
# deletes piles up at the same pace): the periodic tick (``tasks.tick_task``)
# runs one group a turn, so each runs every ``len(CHORES)`` ticks and a
# tick's work stays small and even. Under load they were a quarter of a
# worker's CPU when all ran every tick, taken from the fan-out.
CHORES: tuple[Callable[[str], None], ...] = (
    _copies_and_forgets,
    _reported_acks,
    _orphans,
    _pruning,
    _records,
)


def report_fanout_cursor(node: str) -> None:
    """Publish how far this node has read the log (it bounds pruning).

    Once a tick rather than after every fan-out: a write to the cluster
    database per fan-out would compete with the writers for its lock. The
    value published is the one on disk (``queue_services.cursor_flushed``):
    events behind it may be pruned, so it must not be one that a crash of
    the database server can take back.
    """
    through = queue_services.cursor_flushed(node)
    Node.objects.filter(name=node).exclude(fanout_through=through).update(
        fanout_through=through
    )


def report_queue_sizes(node: str) -> None:
    """Publish this node's queue sizes and acks to the cluster database.

    Only changed rows are written, so an idle node with thousands of
    queues costs two reads a tick. Statements, not querysets: the CASE
    expressions of ``bulk_update`` cost a busy worker more CPU than the
    reports are worth, and its UPDATE holds the cluster database's write
    lock the writers wait for (docs/decisions/0010-hot-statements-in-sql.md).
    """
    heads = queue_selectors.queue_size_and_acked()
    reports = _reports_of(node)
    gone = [pk for pk in reports if pk not in heads]
    if gone:
        QueueSizeReport.objects.filter(node=node, client_id__in=gone).delete()
    now = timezone.now()
    changed = [
        (size, acked, client_id)
        for client_id, (size, acked) in heads.items()
        if client_id in reports and reports[client_id] != (size, acked)
    ]
    if changed:
        _update_reports(node, now, changed)
    missing = [pk for pk in heads if pk not in reports]
    if not missing:
        return
    # The clients read are locked until the reports are in: a client
    # deleted in between (a close with keepalive false) failed the insert's
    # foreign key and with it the rest of the tick.
    with transaction.atomic():
        known = DurableClient.objects.select_for_update().filter(pk__in=missing)
        QueueSizeReport.objects.bulk_create(
            [
                QueueSizeReport(
                    client_id=pk,
                    node=node,
                    size=heads[pk][0],
                    acked_through=heads[pk][1],
                )
                for pk in known.values_list("pk", flat=True)
            ],
            ignore_conflicts=True,
        )


_REPORT = QueueSizeReport._meta
_REPORT_SET = [_REPORT.get_field(f) for f in ("size", "acked_through", "reported_at")]
_REPORT_KEYS = [_REPORT.get_field("client"), _REPORT.get_field("node")]


def _reports_of(node: str) -> dict[uuid.UUID, tuple[int, int]]:
    """``{client_id: (size, acked_through)}`` as ``node`` last reported."""
    client_field = _REPORT.get_field("client")
    table = sql.table(QueueSizeReport, connection)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT client_id, size, acked_through FROM {table} WHERE node = %s",  # noqa: S608
            [node],
        )
        rows = cursor.fetchall()
    convert = client_field.target_field.to_python
    return {convert(pk): (size, acked) for pk, size, acked in rows}


def _update_reports(
    node: str, now: Any, changed: list[tuple[int, int, uuid.UUID]]
) -> None:
    """Write the changed ``(size, acked_through, client_id)`` of ``node``,
    in one transaction (one statement on PostgreSQL: ``sql.update_rows``)."""
    client_field = _REPORT.get_field("client")
    at = _REPORT.get_field("reported_at").get_db_prep_save(now, connection)
    rows = [
        (size, acked, at, client_field.get_db_prep_save(pk, connection), node)
        for size, acked, pk in changed
    ]
    with transaction.atomic():
        sql.update_rows(connection, QueueSizeReport, _REPORT_SET, _REPORT_KEYS, rows)


def drop_orphans() -> int:
    """Drop the queues here whose client is gone or hosted elsewhere.

    The queues are read first, their clients' rows second, and only the
    queue rows read are dropped: a ``hello`` may commit a new client's row
    and create its queue between the two reads (or drop a stale queue and
    start afresh), and that queue is not an orphan.

    A queue is created just before its client's row commits, in the same
    transaction (``services.client_hello``, ``client_ensure_offline``), so
    a queue whose row is missing may be one whose row is about to commit:
    such rows are read again once every transaction writing client rows
    has ended (``_hosted_here`` with ``after_writers``), and only the
    queues still unclaimed then are orphans.
    """
    hosted = queue_selectors.queue_created_at()
    if not hosted:
        return 0
    node = placement.self_node()
    keep = _hosted_here(list(hosted), node)
    unclaimed = [pk for pk in hosted if pk not in keep]
    if unclaimed:
        keep |= _hosted_here(unclaimed, node, after_writers=True)
    return queue_services.queue_drop_orphans(
        orphans={pk: at for pk, at in hosted.items() if pk not in keep}
    )


def _hosted_here(
    client_ids: list[uuid.UUID], node: str, *, after_writers: bool = False
) -> set[uuid.UUID]:
    """Which of these clients have a row naming ``node`` as a host.

    ``after_writers``: read once the transactions writing client rows at
    the time have ended (their rows committed or not), which the read
    waits for: PostgreSQL's SHARE lock on the table waits for every
    transaction that inserted or updated a row of it; on SQLite the
    transaction's ``BEGIN IMMEDIATE`` waits for the writer. Only for
    queues without a claiming row, which are rare.
    """

    def read() -> set[uuid.UUID]:
        return {
            pk
            for pk, primary, secondaries in DurableClient.objects.filter(
                pk__in=client_ids
            ).values_list("pk", "primary", "secondaries")
            if node in (primary, *secondaries)
        }

    if not after_writers:
        return read()
    with transaction.atomic():
        if connection.vendor == "postgresql":
            table = sql.table(DurableClient, connection)
            with connection.cursor() as cursor:
                cursor.execute(f"LOCK TABLE {table} IN SHARE MODE")
        return read()


def vacuum_churned() -> list[str]:
    """Vacuum this node's store and the cluster database's tables whose
    dead rows piled up (``sql.vacuum_bloated``: PostgreSQL only, where
    nothing else vacuums them when the server's ``autovacuum`` is off or
    lags behind the queue's churn); at most every ``VACUUM_CHECK_S`` per
    worker. Every node looks at the cluster database's tables: a table
    another node is vacuuming is skipped. The tables vacuumed."""
    now = time.monotonic()
    if now - _vacuum["checked"] < VACUUM_CHECK_S:
        return []
    _vacuum["checked"] = now
    done: list[str] = []
    for vacuum in (
        queue_services.node_store_vacuum,
        lambda: sql.vacuum_bloated(connection, CLUSTER_CHURN),
    ):
        try:
            done += vacuum()
        except DatabaseError as exc:  # not the tables' owner, say: logged
            log.warning("could not vacuum: %s", exc)
    if done:
        log.info("vacuumed %s", ", ".join(done))
    return done


def prune_event_log() -> int:
    """Delete events every node that may still need them has fanned out,
    and the ended interests that wanted only such events.

    A node that is up, or that still hosts a queue (it may restart and
    fill it from its cursor), holds the log back; a dead node that hosts
    nothing any more (its queues failed over, or it was retired) does not.
    Events are also kept ``EVENT_RETENTION`` for copies being filled.
    """
    members = placement.Membership.read()
    hosts: set[str] = set()
    for primary, secondaries in DurableClient.objects.values_list(
        "primary", "secondaries"
    ):
        hosts.add(primary)
        hosts.update(secondaries or [])
    needed = [
        row.fanout_through
        for name, row in members.rows.items()
        if name in hosts or members.state(name) != placement.DOWN
    ]
    if not needed or not min(needed):
        return 0
    pruned = _prune_events(
        through=min(needed), horizon=timezone.now() - EVENT_RETENTION
    )
    _prune_ended_interests()
    return pruned


def _prune_events(*, through: int, horizon: datetime) -> int:
    """Delete the events through ``through`` older than ``horizon``, from
    the oldest on, by the seq index, a chunk at a time; return how many.

    The time condition has no index: one DELETE over ``seq <= through``
    would read every event kept for the retention on every tick of every
    node. Seqs and timestamps rise together, so an oldest event still
    within the retention means there is nothing to prune (at worst a
    node's clock skew later).
    """
    pruned = 0
    for _ in range(PRUNE_CHUNKS):
        oldest = Event.objects.order_by("seq").values_list("seq", "ts").first()
        if oldest is None or oldest[0] > through or oldest[1] >= horizon:
            break
        upto = min(through, oldest[0] + PRUNE_CHUNK - 1)
        done = Event.objects.filter(
            seq__gte=oldest[0], seq__lte=upto, ts__lt=horizon
        ).delete()[0]
        pruned += done
        if upto == through or not done:
            break
    return pruned


def _prune_ended_interests() -> int:
    """Delete the ended interests whose events have all left the log: no
    node can fan them out any more (one that restarts behind the log
    starts its queues afresh). Rows a client's delete holds are left to it
    (skipped, not waited for: the two would lock them in either order)."""
    head = cache_selectors.event_log_head()  # before the oldest: see below
    oldest = cache_selectors.event_log_oldest()
    # With the log empty, only what ended by the head read first: an
    # interest ending since may cover an event written since.
    through = head if oldest is None else oldest - 1
    pruned = 0
    for model in (EndedInterest, EndedCq):  # ended CQs go the same way
        ended = model.objects.filter(until_seq__lte=through)
        with transaction.atomic():
            pks = list(
                ended.select_for_update(skip_locked=True)
                .order_by("pk")
                .values_list("pk", flat=True)
            )
            if pks:
                pruned += model.objects.filter(pk__in=pks).delete()[0]
    return pruned
