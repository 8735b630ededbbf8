"""Fan-out: move committed events from the cluster log into this node's queues.

The log is read with a cursor kept in the node store and moved in the same
transaction as the appends, so each event lands in each hosted queue once,
whatever the number of doorbells, retries or crashes (ARCHITECTURE.md,
"Life of a write").
"""

import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connections, transaction

from cache import counters
from cache import selectors as cache_selectors
from clients import dispatch, selectors
from clients.cq_matching import RegionCqs
from clients.matching import key_matches
from clients.models import ContinuousQuery, DurableClient, EndedCq, InterestKind
from common import trace
from queues import notify
from queues import selectors as queue_selectors
from queues import services as queue_services
from queues.routers import NODE_STORE
from queues.services import CqList

log = logging.getLogger(__name__)

# Called after each batch of a fan-out pass; the worker registers its
# liveness beat here (durablecache.celery), so a long backlog counts as
# progress, not as a wedged worker.
_progress: list[Callable[[], object]] = [lambda: None]


def on_batch_progress(callback: Callable[[], object]) -> None:
    """Call ``callback`` after each batch of every fan-out pass."""
    _progress[0] = callback


REGION_OPS = {"region_clear", "region_destroy"}


class _RegionInterests:
    """One region's interests among the hosted clients, indexed so that an
    event is checked against the interests that can want it: key lists by
    key (an event of key K looks at K's rows only, not every client's),
    regexes and all-keys by themselves, everyone for region ops. Each
    wants the events after its ``since_seq`` and, once ended, through its
    ``until_seq`` (None: no end)."""

    def __init__(self) -> None:
        self.by_key: dict[str, list[tuple[uuid.UUID, int, int | None]]] = defaultdict(
            list
        )
        self.patterns: list[tuple[uuid.UUID, str, str, int, int | None]] = []
        self.everyone: list[tuple[uuid.UUID, int, int | None]] = []
        # The clients an all-keys interest wants every event of the batch
        # for (``for_batch``), and the patterns to judge per event.
        self.all_keys: frozenset[uuid.UUID] = frozenset()
        self.judged = self.patterns

    def add(self, row: selectors.InterestRow) -> None:
        span = (row.client_id, row.since_seq, row.until_seq)
        self.everyone.append(span)
        if row.kind == InterestKind.KEY:
            self.by_key[row.selector].append(span)
        else:
            self.patterns.append(
                (row.client_id, row.kind, row.selector, row.since_seq, row.until_seq)
            )

    def for_batch(self, first: int, last: int) -> None:
        """Set apart the all-keys interests that want every event with a
        seq from ``first`` through ``last`` (registered before the first,
        not ended before the last): they want each event of the batch
        whatever its key, with no judgement per event."""
        everything = {
            pk
            for pk, kind, _, since, until in self.patterns
            if kind == InterestKind.ALL_KEYS
            and since < first
            and (until is None or until >= last)
        }
        self.all_keys = frozenset(everything)
        self.judged = [p for p in self.patterns if p[0] not in everything]

    def wanting(self, event: Any) -> set[uuid.UUID]:
        """The clients with an interest that wants ``event`` (written after
        the interest was registered: ``since_seq``; and before it ended:
        ``until_seq``)."""
        seq = event.seq
        if event.op in REGION_OPS:
            return {
                pk for pk, since, until in self.everyone if _within(seq, since, until)
            }
        wanted = {
            pk
            for pk, since, until in self.by_key.get(event.key, ())
            if _within(seq, since, until)
        }
        wanted |= self.all_keys
        for pk, kind, selector, since, until in self.judged:
            if (
                pk not in wanted
                and _within(seq, since, until)
                and key_matches(kind, selector, event.key)
            ):
                wanted.add(pk)
        return wanted


def _within(seq: int, since: int, until: int | None) -> bool:
    return seq > since and (until is None or seq <= until)


class Matched(NamedTuple):
    # Per hosted client, the events its interests or CQs want, in order.
    appends: dict[uuid.UUID, list[Any]]
    # Which of those clients have their socket on the node.
    held_here: set[uuid.UUID]
    # Each client's ``conflate`` mode as its row said.
    modes: dict[uuid.UUID, str]
    # Per client, per event seq, the ``cq`` list of the event.
    cqs: dict[uuid.UUID, dict[int, CqList]] = {}
    # Each client's ``max_queued``, and the clients whose gap stands (they
    # are in neither ``appends`` nor ``cqs``).
    limits: dict[uuid.UUID, int] = {}
    gapped: frozenset[uuid.UUID] = frozenset()


def match_events(events: list[Any], hosted: set[uuid.UUID], node: str) -> Matched:
    """Match ``events`` against the interests and continuous queries of
    the ``hosted`` clients: one append per client and event, whatever
    number of its interests and CQs want it, with its ``cq`` list."""
    by_region: dict[str, _RegionInterests] = defaultdict(_RegionInterests)
    held_here: set[uuid.UUID] = set()
    modes: dict[uuid.UUID, str] = {}
    limits: dict[uuid.UUID, int] = {}
    gapped: set[uuid.UUID] = set()
    regions = {e.region for e in events}
    cq_rows: dict[str, list[selectors.InterestRow]] = defaultdict(list)
    for row in selectors.interest_rows(regions=regions, client_ids=hosted, node=node):
        if row.client_id in hosted:
            if row.gapped:
                gapped.add(row.client_id)
                continue
            if row.max_queued is not None:
                limits[row.client_id] = row.max_queued
            if row.kind == selectors.CQ_KIND:
                cq_rows[row.region].append(row)
            else:
                by_region[row.region].add(row)
            modes[row.client_id] = row.conflate
            if row.held_here:
                held_here.add(row.client_id)
    if events:
        seqs = [event.seq for event in events]
        for region_interests in by_region.values():
            region_interests.for_batch(min(seqs), max(seqs))
    judges = {region: RegionCqs(region, rows) for region, rows in cq_rows.items()}
    appends: dict[uuid.UUID, list[Any]] = defaultdict(list)
    cqs: dict[uuid.UUID, dict[int, CqList]] = defaultdict(dict)
    for event in events:
        interests = by_region.get(event.region)
        wanted = set() if interests is None else interests.wanting(event)
        judge = judges.get(event.region)
        if judge is not None:
            for client_id, listed in judge.judge(event).items():
                cqs[client_id][event.seq] = listed
                wanted.add(client_id)
        for client_id in wanted:
            appends[client_id].append(event)
    return Matched(appends, held_here, modes, cqs, limits, frozenset(gapped))


def fanout_node(node: str | None = None) -> int:
    """Append every unread event to the queues hosted here; return the count."""
    node = node or settings.DURABLECACHE_NODE_NAME
    total = 0
    while True:
        with transaction.atomic(using=NODE_STORE):
            queue_services.commit_unflushed(connections[NODE_STORE])
            through = queue_services.cursor_read_locked(node)
            events = cache_selectors.logged_events_after(
                seq=through, limit=settings.DURABLECACHE_FANOUT_BATCH
            )
            if not events:
                break
            trace.mark("claimed", node, events[0].seq, events[-1].seq)
            hosted = set(queue_selectors.queue_client_ids())
            matched = match_events(events, hosted, node)
            appends, held_here, modes, cqs = matched[:4]
            overflows: list[queue_services.Overflow] = []
            # Pushes only for sockets held here, and only from a live-sized
            # pass (a backlog's sockets read it): no work for the rest.
            plain: dict[uuid.UUID, tuple[int, list[int]]] = {}
            plain_for = held_here if len(events) <= PUSH_MAX_EVENTS else ()
            heads = queue_services.queue_append_many(
                appends,
                modes=modes,
                modes_now=_modes_now,
                cqs=cqs,
                limits=matched.limits,
                gapped=matched.gapped,
                overflows=overflows,
                plain=plain,
                plain_for=plain_for,
                read=events,
            )
            if overflows:
                # Recorded in the cluster before this store commits: a
                # crash in between leaves the gap, which the next pass
                # reads and empties the queue by.
                gaps_record(overflows, node)
            queue_services.cursor_move(node, events[-1].seq)
        total += len(events)
        trace.mark("appended", node, events[0].seq, events[-1].seq)
        counters.counter.add(
            node, sum(len(per) for per in cqs.values()), counters.CQ_EVENTS
        )
        for event in events:
            if event.op == "region_destroy":
                # Its CQs close, on every host from this seq on.
                cqs_end_with_region(region=event.region, seq=event.seq)
        _progress[0]()  # a long backlog is progress, not a wedged worker
        # Only sockets held here are woken: a copy kept here for a client
        # whose socket is on its primary, or one of an offline client, has
        # none to wake (a socket that connects meanwhile reads its queue
        # after ``ready``, and the hub's sweep heals the rest).
        trace.mark("rang_sockets", node, events[0].seq, events[-1].seq)
        _ring_sockets(events, heads, held_here, plain, node)
        if len(events) < settings.DURABLECACHE_FANOUT_BATCH:
            # Read through the head: an event committed since then rang its
            # own doorbell after its commit, so no second (empty) pass.
            break
    return total


def _ring_sockets(
    events: list[Any],
    heads: dict[uuid.UUID, int],
    held_here: set[uuid.UUID],
    pushes: dict[uuid.UUID, tuple[int, list[int]]],
    node: str,
) -> None:
    """Wake the sockets held here of the queues that grew; push the
    events of those whose appended rows were plain, so that a socket
    caught up sends them without a read (``notify.ring_many``)."""
    woken = {pk: seq for pk, seq in heads.items() if pk in held_here}
    # ``pushes`` (``queue_append_many``'s ``plain``) names held clients only.
    fields: dict[int, list[Any]] = {}
    if pushes:
        wanted = {seq for _, seqs in pushes.values() for seq in seqs}
        fields = {
            e.seq: queue_selectors.push_fields(e) for e in events if e.seq in wanted
        }
        if sum(len(f[4] or "") for f in fields.values()) > PUSH_MAX_BYTES:
            # Large values: the sockets read them.
            pushes, fields = {}, {}
    notify.ring_many(woken, node, pushes=pushes, events=fields)


# A pass pushes its events with the wake-up only up to these: a live
# pass holds a few events, and a message stays small whatever the values.
PUSH_MAX_EVENTS = 64
PUSH_MAX_BYTES = 64 * 1024


def gaps_record(overflows: list[queue_services.Overflow], node: str) -> int:
    """Record each overflow as its client's gap, once in the cluster: only
    where no gap stands and the overflow is past what the last resync
    covered (a host that lags may overflow on events another host's
    overflow, and a resync since, have dealt with). Returns how many were
    recorded; each is logged and counted here, by the host that did."""
    recorded = 0
    for overflow in overflows:
        with transaction.atomic():
            done = DurableClient.objects.filter(
                pk=overflow.client_id,
                gap_since__isnull=True,
                queue_floor__lt=overflow.seq,
            ).update(
                gap_since=overflow.since,
                gap_dropped=overflow.dropped,
                gap_reason=GAP_OVERFLOW,
            )
        if not done:
            continue
        recorded += 1
        client = DurableClient.objects.filter(pk=overflow.client_id).first()
        log.warning(
            "%s: queue overflowed at seq %d; %d queued event(s) dropped, "
            "it resyncs by key after %d",
            client if client is not None else overflow.client_id,
            overflow.seq,
            overflow.dropped,
            overflow.since,
        )
        counters.counter.add(node, 1, counters.OVERFLOWS)
        counters.counter.add(node, overflow.dropped, counters.DROPPED_EVENTS)
    return recorded


GAP_OVERFLOW = "overflow"


def _modes_now(client_ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
    return selectors.client_modes(client_ids=client_ids)


_live_nodes: tuple[float, list[str]] = (0.0, [])
LIVE_NODES_TTL_S = 1.0


def _nodes_to_ring() -> list[str]:
    """Live node names, read at most once a second per process."""
    global _live_nodes
    read_at, names = _live_nodes
    if time.monotonic() - read_at > LIVE_NODES_TTL_S:
        names = [n.name for n in cache_selectors.nodes_up()]
        _live_nodes = (time.monotonic(), names)
    return names or [settings.DURABLECACHE_NODE_NAME]


def ring_fanout(last_seq: int) -> None:
    """After a write commits: ask every live node to fan the new events out."""
    dispatch.fanout_on(*_nodes_to_ring())


def cqs_end_with_region(*, region: str, seq: int) -> int:
    """A ``region_destroy`` (log seq ``seq``) closes the region's CQs that
    were registered before it, durable ones too. Each is kept as an
    ``EndedCq`` through ``seq``, so every host, whenever its fan-out
    reaches the destroy, names it there; idempotent (any node's fan-out
    may call it)."""
    with transaction.atomic():
        rows = list(
            ContinuousQuery.objects.select_for_update().filter(
                region=region, since_seq__lt=seq
            )
        )
        if not rows:
            return 0
        return EndedCq.end(rows, until=seq)
