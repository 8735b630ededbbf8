"""Continuous queries: register, close, and end them with a socket
(docs/protocol.md, continuous queries; the language: docs/cq.md)."""

import re
import uuid
from typing import Any

from django.db import transaction

from cache import selectors as cache_selectors
from cache import services as cache_services
from clients import dispatch, selectors
from clients.cq import QueryError, canonical_text, parse_query
from clients.cq_forgets import cq_forget_here
from clients.exceptions import BadQueryError, UnknownClientError
from clients.matching import parse_since
from clients.models import ClosedCq, ContinuousQuery, DurableClient, EndedCq
from clients.placement import self_node
from clients.services.interests import clients_lock
from common.errors import ValidationError
from queues import notify

NAME = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def cq_check(
    *,
    name: Any,
    region: Any,
    query: Any,
    durable: Any,
    client_is_durable: bool,
    since: Any = None,
) -> tuple[str, str, str, bool]:
    """Check a registration's fields in the protocol's order (bad_field,
    no_such_region, bad_query); return (name, region, canonical, durable).
    A ``since`` is checked with the other fields (a seq above the log head
    is ``bad_field`` too); whether the region still covers it, later."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValidationError("name must be 1-128 characters of [A-Za-z0-9._:-]")
    if not isinstance(region, str):
        raise ValidationError("region must be a string")
    if not isinstance(query, str):
        raise ValidationError("query must be a string")
    if durable is None:
        durable = False
    if not isinstance(durable, bool):
        raise ValidationError("durable must be a boolean")
    if durable and not client_is_durable:
        raise ValidationError("a durable CQ needs a durable client")
    since = parse_since(since)
    if since is not None:
        cache_selectors.since_within_log(since)
    cache_selectors.region_get(name=region)
    try:
        parsed = parse_query(query, region=region)
    except QueryError as exc:
        raise BadQueryError(str(exc)) from exc
    return name, region, canonical_text(parsed.condition), durable


def cq_register(
    *,
    client: DurableClient,
    name: Any,
    region: Any,
    query: Any,
    durable: Any,
    since: Any = None,
) -> ContinuousQuery:
    """Register a CQ; idempotent for the same definition (region, query by
    its canonical form, durability), ``bad_field`` for another one.

    The CQ judges the events after the log head read here, with the log
    locked to the commit (as ``interest_register``): an image read after
    this holds every change before it. Locks: the client, the event log.
    A ``since`` the region's tombstones no longer cover is
    ``since_too_old``, after every other check, and registers nothing.
    """
    name, region, canonical, durable = cq_check(
        name=name,
        region=region,
        query=query,
        durable=durable,
        client_is_durable=client.is_durable,
        since=since,
    )
    with transaction.atomic():
        clients_lock([client.pk])
        existing = ContinuousQuery.objects.filter(client=client, name=name).first()
        if existing is not None and (
            existing.region,
            existing.canonical,
            existing.is_durable,
        ) != (region, canonical, durable):
            raise ValidationError(f"CQ {name!r} is registered with another definition")
        if since is not None:
            cache_selectors.since_check(region=region, since=since)
        if existing is not None:
            return existing
        head = cache_services.event_log_head_locked()
        return ContinuousQuery.objects.create(
            client=client,
            name=name,
            region=region,
            query=query,
            canonical=canonical,
            is_durable=durable,
            since_seq=head,
        )


def cq_register_by_client_id(*, client_id: uuid.UUID, **fields: Any) -> ContinuousQuery:
    """``cq_register`` for the client a socket holds, known by its id."""
    return cq_register(client=selectors.client_get(client_id=client_id), **fields)


def cq_close(*, client: DurableClient, name: str, by_operator: bool = False) -> bool:
    """Close a CQ; return whether the client held it. No event fanned out
    afterwards names it (the fan-out no longer sees it).

    ``by_operator`` (REST DELETE by staff, ``manage.py durable close-cq``,
    the admin): a socket of the client's gets an unsolicited
    ``cq_closed`` {name}, after commit, through its node's hub. A name no
    CQ can have (a NUL, which PostgreSQL text refuses, among others) is
    held by no client: False without a statement."""
    if not NAME.fullmatch(name):
        return False
    with transaction.atomic():
        clients_lock([client.pk])
        closed = (
            ContinuousQuery.objects.filter(client=client, name=name).delete()[0] > 0
        )
        row = DurableClient.objects.filter(pk=client.pk).first()
        connected, node = (row.is_connected, row.node) if row else (False, "")
        if closed and row is not None:
            _forget_after_commit(row, name)
        if closed and by_operator and connected and node:
            client_id = client.pk
            transaction.on_commit(lambda: notify.cq_closed(client_id, name, node))
    return closed


def _forget_after_commit(client: DurableClient, name: str) -> None:
    """Record the forget as pending on each host of the client's queue
    (``ClosedCq``), then after commit run it here at once and send it to
    the other hosts by task. A lost task leaves the row: that host runs
    it before it serves or copies the queue, or at its next tick
    (``cqs_forget_pending``). A row of an earlier close of the name is
    replaced, so a forget that read the earlier one deletes no later one."""
    hosts = client.hosts
    ClosedCq.objects.filter(client=client, name=name, node__in=hosts).delete()
    ClosedCq.objects.bulk_create(
        ClosedCq(client=client, name=name, node=host) for host in hosts
    )
    client_id = client.pk

    def forget() -> None:
        for host in hosts:
            if host == self_node():
                cq_forget_here(client_id=client_id, name=name)
            else:
                dispatch.forget_cq_on(host, client_id, name)

    transaction.on_commit(forget)


def cqs_end_non_durable(client_ids: list[uuid.UUID]) -> int:
    """End these clients' non-durable CQs at a socket's end: each is kept
    as an ``EndedCq`` through the log head, so every host names it in the
    same events (those already queued stay as they are). Call with the
    clients' rows locked."""
    rows = list(
        ContinuousQuery.objects.select_for_update().filter(
            client_id__in=client_ids, is_durable=False
        )
    )
    if not rows:
        return 0
    return EndedCq.end(rows, until=cache_services.event_log_head_locked())


def cq_get(*, client: DurableClient, name: str) -> ContinuousQuery:
    found = ContinuousQuery.objects.filter(client=client, name=name).first()
    if found is None:
        raise UnknownClientError(f"no CQ {name!r}")
    return found


def cq_close_by_client_id(*, client_id: uuid.UUID, name: Any) -> bool:
    """``cq_close`` for the client a socket holds (``close_cq``)."""
    if not isinstance(name, str):
        raise ValidationError("name must be a string")
    return cq_close(client=selectors.client_get(client_id=client_id), name=name)
