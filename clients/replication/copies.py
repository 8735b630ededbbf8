"""Copies of a queue on its secondaries: started, filled page by page from
a source, healed from the rows.

A new secondary takes its own fan-out cursor as the point from which its
fan-out fills the copy; the source sends the entries queued through that
point, a page per task (``queues.services.queue_adopt`` /
``queue_copy_in``). Until the last page arrives the secondary is listed in
``syncing`` and cannot be promoted.
"""

import logging
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from clients import dispatch, fanout
from clients.cq_forgets import cqs_forget_pending
from clients.models import DurableClient
from clients.placement import Membership, copy_source, set_secondaries
from common import sql
from queues import selectors as queue_selectors
from queues import services as queue_services
from queues.models import QueueState

log = logging.getLogger(__name__)


def start_copies(client_id: uuid.UUID, targets: Iterable[str], source: str) -> None:
    """Ask each target's worker to start filling its copy from ``source``."""
    for target in targets:
        dispatch.adopt_on(target, client_id, source)


def copy_finished(*, client_id: uuid.UUID, node: str) -> None:
    """Record that ``node`` holds a complete copy of the client's queue."""
    with transaction.atomic():
        client = DurableClient.objects.select_for_update().filter(pk=client_id).first()
        if client is not None and node in client.syncing:
            client.syncing = [s for s in client.syncing if s != node]
            client.save(update_fields=["syncing"])


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
    # A CQ closed while this host missed its forget: drained before it is
    # copied, so the new host gets no row naming it.
    cqs_forget_pending(node=node, client_id=client_id)
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
        # A page built before a CQ closed may name it: the forget that
        # waited for the copy to be complete runs now.
        cqs_forget_pending(node=node, client_id=client_id)
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
    # Plain rows first: the tick runs this every second, and in the steady
    # state no copy is syncing, so no model instance is needed.
    mine = DurableClient.objects.filter(durable_id__isnull=False).exclude(primary=node)
    listed = [
        (pk, node in syncing)
        for pk, secondaries, syncing in mine.values_list("id", "secondaries", "syncing")
        if node in secondaries
    ]
    if not listed:
        return 0
    hosted = set(queue_selectors.queue_client_ids())
    touched = 0
    for pk, syncing in listed:
        if not syncing and pk not in hosted:
            _unlist(pk, node)
            touched += 1
    syncing_ids = [pk for pk, syncing in listed if syncing]
    if not syncing_ids:
        return touched
    members = Membership.read()
    stale = timezone.now() - timedelta(seconds=settings.DURABLECACHE_COPY_RETRY_S)
    for chunk in sql.chunks(syncing_ids):
        states = {s.client_id: s for s in QueueState.objects.filter(pk__in=chunk)}
        for client in mine.filter(pk__in=chunk).only(
            "id", "primary", "secondaries", "syncing"
        ):
            if node in client.secondaries and node in client.syncing:
                state = states.get(client.id)
                touched += _resume_syncing(client, state, members, node, stale)
    return touched


def _resume_syncing(
    client: DurableClient,
    state: QueueState | None,
    members: Membership,
    node: str,
    stale: datetime,
) -> bool:
    """Steps 1-3 of ``copies_resume`` for a copy listed as syncing here
    (``state``: its queue state in this store, or None); whether it was
    touched."""
    if state is not None and state.is_synced:
        copy_finished(client_id=client.id, node=node)
        return True
    if state is not None and (
        state.copy_requested_at is not None and state.copy_requested_at >= stale
    ):
        return False
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
    if source is None:
        return False
    adopt(client_id=client.id, node=node, source=source)
    return True


def _unlist(client_id: uuid.UUID, node: str) -> None:
    with transaction.atomic():
        client = DurableClient.objects.select_for_update().filter(pk=client_id).first()
        if client is not None and node in client.secondaries:
            set_secondaries(client, [s for s in client.secondaries if s != node])
            client.save(update_fields=["secondaries", "syncing"])
