"""Reads of the fan-out and the websocket door: interest rows, client
modes, the welcome, delivery checks, which sockets a node holds, images."""

import uuid
from collections import Counter
from typing import Any, NamedTuple

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Count, QuerySet

from cache import selectors as cache_selectors
from clients import placement
from clients.cq import compile_query
from clients.matching import Selector, key_matches
from clients.models import (
    ContinuousQuery,
    DurableClient,
    EndedCq,
    EndedInterest,
    Interest,
    InterestKind,
    QueueSizeReport,
)
from common import sql
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
    # The client's ``max_queued``, and whether its gap stands (then
    # nothing is queued for it: docs/protocol.md, "Bounded queues").
    max_queued: int | None = None
    gapped: bool = False


def interest_rows(
    *, regions: set[str], client_ids: set[uuid.UUID], node: str
) -> list[InterestRow]:
    """The interests in ``regions``, live and ended (``EndedInterest``):
    those of ``client_ids`` when they are few, else all of the regions'
    (the caller keeps its own clients')."""
    if not regions or not client_ids:
        return []
    # The wrapper itself, not ``connection``'s per-thread proxy: each of
    # the hundreds of ids below would look it up again.
    db = connections[DEFAULT_DB_ALIAS]
    quote = db.ops.quote_name
    columns = ", ".join(f"i.{quote(c)}" for c in _INTEREST_COLUMNS)
    where, in_regions = sql.in_list(f"i.{quote('region')}", sorted(regions), db)
    params: list[Any] = [node, *in_regions]
    if len(client_ids) <= INTEREST_CLIENTS_PER_READ:
        ids = [sql.uuid_param(pk, db) for pk in client_ids]
        in_clients, in_ids = sql.in_list("i.client_id", ids, db)
        where += f" AND {in_clients}"
        params += in_ids
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
        f" c.{quote('conflate')}, {until}, {query}, c.{quote('max_queued')},"
        f" c.{quote('gap_since')} IS NOT NULL, c.{quote('queue_floor')}"
        f" FROM {sql.table(model, db)} i"
        f" JOIN {sql.table(DurableClient, db)} c ON c.id = i.client_id"
        f" WHERE {where}"
        for model, cols, until, query in (
            (Interest, columns, "NULL", "NULL"),
            (EndedInterest, columns, "i.until_seq", "NULL"),
            (ContinuousQuery, cq_columns, "NULL", f"i.{quote('query')}"),
            (EndedCq, cq_columns, "i.until_seq", f"i.{quote('query')}"),
        )
    ]
    with db.cursor() as cursor:
        cursor.execute(" UNION ALL ".join(members), params * 4)
        rows = cursor.fetchall()
    to_uuid = sql.uuid_read
    # An interest wants nothing at or below its client's ``queue_floor``
    # (what the last resync covered).
    return [
        InterestRow(
            to_uuid(pk),
            region,
            kind,
            selector,
            max(since, floor),
            bool(here),
            mode,
            until,
            query,
            limit,
            bool(gapped),
        )
        for (
            pk,
            region,
            kind,
            selector,
            since,
            here,
            mode,
            until,
            query,
            limit,
            gapped,
            floor,
        ) in rows
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
    """A client's continuous queries, by name (REST, the CLI, the admin,
    the dashboard)."""
    return ContinuousQuery.objects.filter(client=client).order_by("name")


def client_modes(*, client_ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
    """The ``conflate`` mode of each of these clients (absent: gone)."""
    return sql.values_by_pk(DurableClient.objects, client_ids, "conflate")


def welcome_fields(*, client: DurableClient) -> dict[str, Any]:
    """The placement half of ``welcome`` and the client's gap, when one
    stands (the pending count is the caller's)."""
    fields: dict[str, Any] = {
        "durable_id": client.durable_id,
        "node": client.node,
        "primary": client.primary,
        "secondaries": list(client.secondaries),
        "redundancy_satisfied": redundancy_satisfied(client),
    }
    if client.gap is not None:
        fields["gap"] = client.gap
    return fields


def redundancy_satisfied(client: DurableClient) -> bool:
    return placement.redundancy_satisfied(client, len(cache_selectors.nodes_up()))


def delivery_checks(
    *, client_ids: list[uuid.UUID]
) -> dict[uuid.UUID, tuple[str | None, int, str]]:
    """Each delivering socket's client: its primary (None once gone), its
    queue's last seq here, and the socket holding it ("" when it is marked
    away), in one query per database (sockets.wakeups)."""
    rows = sql.rows_by_pk(
        DurableClient.objects,
        client_ids,
        "primary",
        "is_connected",
        "socket_id",
        "gap_since",
    )
    heads = queue_selectors.queue_heads(client_ids=client_ids)
    checks = {}
    for cid in client_ids:
        primary, connected, socket, gap = rows.get(cid, (None, False, "", None))
        # A queue that overflowed while its socket delivers gets nothing
        # more: the socket is told it is not held (closed 4503), and the
        # client's next hello and ready resync it.
        held = connected and gap is None
        checks[cid] = (primary, heads.get(cid, 0), socket if held else "")
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
