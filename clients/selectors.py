"""Reads of clients and interests, shaped for the websocket, REST and CLI."""

import uuid
from collections import Counter
from datetime import timedelta
from typing import Any, NamedTuple

from django.db import connection
from django.db.models import Count, QuerySet
from django.utils import timezone

from cache import selectors as cache_selectors
from clients import placement
from clients.cq import compile_query
from clients.exceptions import UnknownClientError
from clients.matching import Selector, key_matches
from clients.models import (
    ClientHistory,
    ClientSample,
    ContinuousQuery,
    DurableClient,
    EndedCq,
    EndedInterest,
    Interest,
    InterestKind,
    LostQueue,
    NodeSample,
    QueueSizeReport,
)
from clients.samples import SAMPLE_S
from common import sql
from common.errors import ConflictError
from queues import selectors as queue_selectors

# Interests per fan-out pass: one statement, not a queryset, whose
# construction alone costs a pass a good share of its time
# (docs/decisions/0010-hot-statements-in-sql.md).
_INTEREST_COLUMNS = ("client_id", "region", "kind", "selector", "since_seq")
# Up to this many hosted clients are named in the statement; with more,
# every interest of the regions is read and the caller filters.
INTEREST_CLIENTS_PER_READ = 500


class InterestRow(NamedTuple):
    client_id: uuid.UUID
    region: str
    kind: str
    selector: str
    since_seq: int
    # Whether the client's socket is on the node that asked: only there is
    # a socket to wake.
    held_here: bool
    # The client's ``conflate`` mode: every host of its queue conflates by
    # it (``queues.services.queue_append_many``).
    conflate: str
    # An ended interest (``EndedInterest``) wants no event after this seq;
    # None for a live one.
    until_seq: int | None = None
    # A continuous query's text (a row of kind CQ_KIND; None otherwise).
    query: str | None = None


def interest_rows(
    *, regions: set[str], client_ids: set[uuid.UUID], node: str
) -> list[InterestRow]:
    """The interests in ``regions``, live and ended (``EndedInterest``):
    those of ``client_ids`` when they are few, else all of the regions'
    (the caller keeps its own clients')."""
    if not regions or not client_ids:
        return []
    client_field = Interest._meta.get_field("client")
    quote = connection.ops.quote_name
    columns = ", ".join(f"i.{quote(c)}" for c in _INTEREST_COLUMNS)
    where = f"i.{quote('region')} IN ({', '.join(['%s'] * len(regions))})"
    params: list[Any] = [node, *sorted(regions)]
    if len(client_ids) <= INTEREST_CLIENTS_PER_READ:
        params += [client_field.get_db_prep_value(pk, connection) for pk in client_ids]
        where += f" AND i.client_id IN ({', '.join(['%s'] * len(client_ids))})"
    # The regions' continuous queries come in the same statement, as rows
    # of kind CQ_KIND whose selector is the CQ's name (no statement more
    # per pass for them).
    cq_columns = ", ".join(
        [
            f"i.{quote('client_id')}",
            f"i.{quote('region')}",
            f"'{CQ_KIND}'",
            f"i.{quote('name')}",
            f"i.{quote('since_seq')}",
        ]
    )
    members = [
        f"SELECT {cols}, c.is_connected AND c.{quote('node')} = %s,"  # noqa: S608
        f" c.{quote('conflate')}, {until}, {query}"
        f" FROM {sql.table(model, connection)} i"
        f" JOIN {sql.table(DurableClient, connection)} c ON c.id = i.client_id"
        f" WHERE {where}"
        for model, cols, until, query in (
            (Interest, columns, "NULL", "NULL"),
            (EndedInterest, columns, "i.until_seq", "NULL"),
            (ContinuousQuery, cq_columns, "NULL", f"i.{quote('query')}"),
            (EndedCq, cq_columns, "i.until_seq", f"i.{quote('query')}"),
        )
    ]
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join(members), params * 4)
        rows = cursor.fetchall()
    to_uuid = client_field.target_field.to_python
    return [
        InterestRow(
            to_uuid(pk), region, kind, selector, since, bool(here), mode, until, query
        )
        for pk, region, kind, selector, since, here, mode, until, query in rows
    ]


# The ``kind`` of a continuous query's row in ``interest_rows``.
CQ_KIND = "cq"


def cq_image_page(
    *, region: str, query: str, after: str | None, size: int
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of a CQ's image: the members among ``size`` entries of the
    region after key ``after`` ({key, value, version}, by key), and the
    key to read on from (None: the region is read through)."""
    compiled = compile_query(query, region=region)
    entries = cache_selectors.entry_list(region=region, after=after, limit=size)
    following = entries[-1].key if len(entries) == size else None
    members = [
        {"key": e.key, "value": e.value, "version": e.version}
        for e in entries
        if compiled.is_member(e.key, e.value)
    ]
    return members, following


def cq_list(*, client: DurableClient) -> QuerySet[ContinuousQuery]:
    """A client's continuous queries, by name (REST, the CLI, the admin)."""
    return ContinuousQuery.objects.filter(client=client).order_by("name")


def client_modes(*, client_ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
    """The ``conflate`` mode of each of these clients (absent: gone)."""
    return sql.values_by_pk(DurableClient.objects, client_ids, "conflate")


def welcome_fields(*, client: DurableClient) -> dict[str, Any]:
    """The placement half of ``welcome`` (the pending count is the caller's)."""
    return {
        "durable_id": client.durable_id,
        "node": client.node,
        "primary": client.primary,
        "secondaries": list(client.secondaries),
        "redundancy_satisfied": redundancy_satisfied(client),
    }


def redundancy_satisfied(client: DurableClient) -> bool:
    return placement.redundancy_satisfied(client, len(cache_selectors.nodes_up()))


def delivery_checks(
    *, client_ids: list[uuid.UUID]
) -> dict[uuid.UUID, tuple[str | None, int, str]]:
    """Each delivering socket's client: its primary (None once gone), its
    queue's last seq here, and the socket holding it ("" when it is marked
    away), in one query per database (sockets.wakeups)."""
    rows = sql.rows_by_pk(
        DurableClient.objects, client_ids, "primary", "is_connected", "socket_id"
    )
    heads = queue_selectors.queue_heads(client_ids=client_ids)
    checks = {}
    for cid in client_ids:
        primary, connected, socket = rows.get(cid, (None, False, ""))
        checks[cid] = (primary, heads.get(cid, 0), socket if connected else "")
    return checks


def sockets_holding(*, tag: str) -> list[tuple[uuid.UUID, str]]:
    """The clients marked connected to a socket of the process whose socket
    ids carry ``tag`` (sockets.wakeups.WakeHub.tag): (client id, socket id)."""
    return list(
        DurableClient.objects.filter(
            is_connected=True, socket_id__contains=f"!{tag}."
        ).values_list("id", "socket_id")
    )


def hosted_load() -> Counter[str]:
    """How many queues each node hosts, from the nodes' size reports."""
    return Counter(
        dict(
            QueueSizeReport.objects.values("node")
            .annotate(n=Count("id"))
            .values_list("node", "n")
        )
    )


def client_regions(*, client_id: uuid.UUID) -> list[str]:
    """Regions in which the client holds interests or CQs, sorted."""
    interests = Interest.objects.filter(client_id=client_id)
    cqs = ContinuousQuery.objects.filter(client_id=client_id)
    return sorted(
        set(interests.values_list("region", flat=True))
        | set(cqs.values_list("region", flat=True))
    )


def image_page(
    *, region: str, selector: Selector, policy: str, after: str | None, size: int
) -> tuple[list[Any], str | None]:
    """Return one page of the initial image and the cursor of the next page.

    Items are {key, value, version} dicts, or bare keys for policy ``keys``.
    """
    if policy == "none":
        return [], None
    if selector.kind == InterestKind.KEY:
        keys = list(selector.values)
        start = 0 if after is None else int(after)
        page = keys[start : start + size]
        entries = cache_selectors.entries_for_keys(region=region, keys=page)
        following = str(start + size) if start + size < len(keys) else None
    else:
        entries = cache_selectors.entry_list(region=region, after=after, limit=size)
        following = entries[-1].key if len(entries) == size else None
        if selector.kind == InterestKind.REGEX:
            entries = [
                e
                for e in entries
                if key_matches(selector.kind, selector.values[0], e.key)
            ]
    if policy == "keys":
        return [e.key for e in entries], following
    items = [{"key": e.key, "value": e.value, "version": e.version} for e in entries]
    return items, following


def client_get(*, client_id: uuid.UUID) -> DurableClient:
    """The client a socket holds (a socket keeps only its id and flags)."""
    client = DurableClient.objects.filter(pk=client_id).first()
    if client is None:
        raise UnknownClientError("the client was closed")
    return client


def client_visible_to(*, user: Any, durable_id: str) -> DurableClient:
    """The durable client ``durable_id`` if ``user`` may see it (its owner;
    operators see all); another owner's is unknown, like a missing one."""
    client = DurableClient.objects.filter(durable_id=durable_id).first()
    if client is None or not (user.is_staff or client.owner_id == user.pk):
        raise UnknownClientError(f"no durable client {durable_id!r}")
    return client


def client_list(*, user: Any) -> QuerySet[DurableClient]:
    """Durable clients ``user`` may see (operators see all)."""
    qs = DurableClient.objects.filter(durable_id__isnull=False).order_by("durable_id")
    if not user.is_staff:
        qs = qs.filter(owner=user)
    return qs.select_related("owner").prefetch_related("size_reports")


def queue_sizes_of(client: DurableClient, *, own_node: str) -> dict[str, int]:
    """Queue size on each host: live for this node, last report for others."""
    sizes = {
        r.node: r.size for r in client.size_reports.all() if r.node in client.hosts
    }
    if own_node in client.hosts:
        own = queue_selectors.queue_size(client_id=client.id)
        if own >= 0:
            sizes[own_node] = own
    for host in client.hosts:
        sizes.setdefault(host, 0)
    return sizes


def interest_list(*, client: DurableClient) -> QuerySet[Interest]:
    return client.interests.order_by("id")


def client_queue_page(
    *, client: DurableClient, own_node: str, after: int, limit: int
) -> list[Any]:
    """Peek at a client's pending queue entries, in seq order, after ``after``.

    Only the primary's store is read (it is the copy the client is served
    from); asked on another node, this raises ConflictError naming it.
    """
    if client.primary and client.primary != own_node:
        raise ConflictError(
            f"the queue of {client} is hosted on its primary node "
            f"{client.primary!r}; ask that node (this is {own_node!r})"
        )
    return queue_selectors.queue_entries_after(
        client_id=client.id, after=after, limit=limit
    )


def node_overview(
    *, own_node: str, after: str | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """Nodes by name (after ``after``), with status, queues and queued events.

    Sizes of other nodes come from their last QueueSizeReport (only for
    clients they still host); this node's own total is read live.
    """
    hosts = {
        pk: (primary, set(secondaries or []))
        for pk, primary, secondaries in DurableClient.objects.values_list(
            "id", "primary", "secondaries"
        )
    }
    primaries = Counter(primary for primary, _ in hosts.values())
    seconds = Counter(node for _, nodes in hosts.values() for node in nodes)
    queued: Counter[str] = Counter()
    reports = QueueSizeReport.objects.values_list("client_id", "node", "size")
    for client_id, node, size in reports:
        primary, nodes = hosts.get(client_id, ("", set()))
        if node == primary or node in nodes:
            queued[node] += size
    queued[own_node] = sum(queue_selectors.queue_sizes().values())
    listed = [n for n in cache_selectors.node_list() if after is None or n.name > after]
    return [
        {
            "name": node.name,
            "url": node.url,
            "status": "up" if cache_selectors.node_is_up(node) else "down",
            "last_heartbeat": node.last_heartbeat,
            "primary_queues": primaries[node.name],
            "secondary_queues": seconds[node.name],
            "queued_events": queued[node.name],
        }
        for node in listed[:limit]
    ]


# --- the operators' dashboard ------------------------------------------------

CLIENT_STATES = ("connected", "disconnected", "expired")


def dashboard_counts() -> dict[str, int]:
    """Durable clients by state; ``expired`` = expired in the last hour."""
    durable = DurableClient.objects.filter(durable_id__isnull=False)
    connected = durable.filter(is_connected=True).count()
    hour_ago = timezone.now() - timedelta(hours=1)
    return {
        "connected": connected,
        "disconnected": durable.count() - connected,
        "expired": LostQueue.objects.filter(
            reason="expired", lost_at__gte=hour_ago
        ).count(),
    }


def dashboard_clients(
    *, user: Any, state: str, search: str, after: str | None, limit: int
) -> tuple[list[Any], str | None]:
    """One page of durable clients (or expired ids) by ``durable_id``.

    ``state`` is "" (all live clients), "connected", "disconnected" or
    "expired" (ids whose queue expired, from LostQueue). ``search`` is a
    case-insensitive substring of the id. Returns the rows and the id to
    pass as ``after`` for the next page (None on the last page).
    """
    qs: QuerySet[Any, Any]
    if state == "expired":
        qs = LostQueue.objects.filter(reason="expired").order_by("durable_id")
        if not user.is_staff:
            qs = qs.filter(owner=user)
    else:
        qs = client_list(user=user).annotate(interest_count=Count("interests"))
        if state == "connected":
            qs = qs.filter(is_connected=True)
        elif state == "disconnected":
            qs = qs.filter(is_connected=False)
    if search:
        qs = qs.filter(durable_id__icontains=search)
    if after:
        qs = qs.filter(durable_id__gt=after)
    rows = list(qs[: limit + 1])
    following = (
        getattr(rows[limit - 1], "durable_id", None) if len(rows) > limit else None
    )
    return rows[:limit], following


def client_history(*, durable_id: str, limit: int = 100) -> list[ClientHistory]:
    return list(ClientHistory.objects.filter(durable_id=durable_id)[:limit])


# No sample for this long: the node (or the whole cluster) was down.
SERIES_GAP = timedelta(seconds=3 * SAMPLE_S)


def node_series(*, minutes: int = 30) -> dict[str, list[dict[str, Any]]]:
    """Per node: queued events, and events in / out per second, over time.

    Where a node took no sample for ``SERIES_GAP`` (it was down) a point of
    nulls marks the gap, and the first sample after it has no rates: a
    chart draws no line across a period nothing was measured in.
    """
    since = timezone.now() - timedelta(minutes=minutes)
    series: dict[str, list[dict[str, Any]]] = {}
    previous: dict[str, NodeSample] = {}
    for sample in NodeSample.objects.filter(at__gte=since).order_by("at"):
        before = previous.get(sample.node)
        point: dict[str, Any] = {
            "at": sample.at.isoformat(),
            "queued": sample.queued_events,
            "in": None,
            "out": None,
        }
        if before is not None and sample.at - before.at > SERIES_GAP:
            gap = {"at": _gap_at(before.at), "queued": None, "in": None, "out": None}
            series[sample.node].append(gap)
        elif before is not None:
            seconds = max(0.001, (sample.at - before.at).total_seconds())
            point["in"] = round(max(0, sample.log_head - before.log_head) / seconds, 2)
            delivered = sample.delivered_total - before.delivered_total
            point["out"] = round(max(0, delivered) / seconds, 2)
        series.setdefault(sample.node, []).append(point)
        previous[sample.node] = sample
    return series


def cluster_series(*, minutes: int = 30) -> list[dict[str, Any]]:
    """Events written per second in the whole cluster, over time.

    The event-log head is the cluster's, so every node's samples measure
    it: one point about every ``SAMPLE_S`` while any node samples, however
    many are down, and a null point where none did for ``SERIES_GAP``.
    """
    since = timezone.now() - timedelta(minutes=minutes)
    points: list[dict[str, Any]] = []
    last: tuple[Any, int] | None = None
    rows = NodeSample.objects.filter(at__gte=since).order_by("at")
    for at, head in rows.values_list("at", "log_head"):
        rate = None
        if last is not None:
            seconds = (at - last[0]).total_seconds()
            if seconds < SAMPLE_S * 0.9:
                continue  # another node's sample of about the same moment
            if at - last[0] > SERIES_GAP:
                points.append({"at": _gap_at(last[0]), "in": None})
            else:
                rate = round(max(0, head - last[1]) / seconds, 2)
        points.append({"at": at.isoformat(), "in": rate})
        last = (at, head)
    return points


def _gap_at(last_sample_at: Any) -> str:
    """Where a gap's null point goes: when the next sample was due."""
    return str((last_sample_at + timedelta(seconds=SAMPLE_S)).isoformat())


def client_series(*, durable_id: str, minutes: int = 30) -> list[dict[str, Any]]:
    """A client's queue depth on its primary over time."""
    since = timezone.now() - timedelta(minutes=minutes)
    return [
        {"at": at.isoformat(), "size": size, "node": node}
        for at, size, node in ClientSample.objects.filter(
            durable_id=durable_id, at__gte=since
        )
        .order_by("at")
        .values_list("at", "size", "node")
    ]


def recent_history(*, limit: int = 20) -> list[ClientHistory]:
    """The latest history rows of all durable clients, newest first."""
    return list(ClientHistory.objects.all()[:limit])
