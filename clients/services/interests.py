"""Interests: register and unregister selectors, and end them so that every
host of a queue queues the same events for them."""

import uuid
from typing import Any

from django.db import transaction

from cache import selectors as cache_selectors
from cache import services as cache_services
from clients import selectors
from clients.exceptions import UnknownClientError
from clients.matching import Selector
from clients.models import DurableClient, EndedInterest, Interest
from common.errors import ValidationError


def interest_register(
    *,
    client: DurableClient,
    region: str,
    selector: Selector,
    is_durable: bool,
    policy: str,
    since: int | None = None,
) -> list[Interest]:
    """Register (idempotently) one selector; return its interest rows.

    ``since`` (a catch-up, read with ``clients.matching.parse_since``): a
    seq above the log head is ``bad_field``, checked before the region;
    one the region's tombstones no longer cover is ``since_too_old``,
    checked last, under the log's lock, and nothing is registered.

    New rows see events with seq above the log head read here, and the
    image is read after that, so nothing written in between is missed
    (the client's cache ignores an event no newer than its image).

    The head is read with the event log locked to the commit, as
    ``interests_end`` reads its end: a write that commits between a head
    read without the lock and the rows' commit has a seq above ``since``,
    so a host whose fan-out read it before the rows existed skipped it
    while a host that read it after queued it. Locks, in this order: the
    client (as ``interests_end``, which takes its interests before the
    log: holding the client first keeps the two from waiting on each
    other), the event log, the interests.
    """
    if since is not None:
        cache_selectors.since_within_log(since)
    cache_selectors.region_get(name=region)
    if is_durable and not client.is_durable:
        raise ValidationError("durable interest needs a durable client")
    with transaction.atomic():
        clients_lock([client.pk])
        head = cache_services.event_log_head_locked()
        if since is not None:
            cache_selectors.since_check(region=region, since=since)
        return [
            _interest_upsert(
                client,
                region=region,
                kind=selector.kind,
                value=value,
                defaults={
                    "is_durable": is_durable,
                    "policy": policy,
                    "since_seq": head,
                },
            )
            for value in selector.values
        ]


def _interest_upsert(
    client: DurableClient,
    *,
    region: str,
    kind: str,
    value: str,
    defaults: dict[str, Any],
) -> Interest:
    """The interest row of one selector value, created with ``defaults`` or
    given their ``is_durable`` and ``policy`` (its ``since_seq`` stays)."""
    interest, created = Interest.objects.get_or_create(
        client=client, region=region, kind=kind, selector=value, defaults=defaults
    )
    is_durable, policy = defaults["is_durable"], defaults["policy"]
    if not created and (interest.is_durable != is_durable or interest.policy != policy):
        interest.is_durable = is_durable
        interest.policy = policy
        interest.save(update_fields=["is_durable", "policy"])
    return interest


def interest_register_by_client_id(
    *, client_id: uuid.UUID, **fields: Any
) -> list[Interest]:
    """``interest_register`` for the client a socket holds, known by its id
    (a socket keeps only the id); UnknownClientError once it is gone."""
    client = selectors.client_get(client_id=client_id)
    return interest_register(client=client, **fields)


def interest_unregister(
    *, client: DurableClient, region: str, selector: Selector
) -> int:
    """Remove the rows of one selector; return how many went."""
    return interests_end(
        [client.pk],
        region=region,
        kind=selector.kind,
        selector__in=selector.values,
    )


def interest_delete(*, client: DurableClient, pk: int) -> None:
    if interests_end([client.pk], pk=pk) == 0:
        raise UnknownClientError(f"no interest {pk}")


def clients_lock(client_ids: list[uuid.UUID]) -> None:
    """Lock these clients' rows, by pk (inside a transaction)."""
    list(
        DurableClient.objects.select_for_update()
        .filter(pk__in=client_ids)
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def interests_end(client_ids: list[uuid.UUID], **which: Any) -> int:
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
        clients_lock(client_ids)
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


def interest_unregister_by_client_id(
    *, client_id: uuid.UUID, region: str, selector: Selector
) -> int:
    """``interest_unregister`` for the client a socket holds, known by its
    id, once the region is known to exist (``no_such_region`` otherwise,
    as ``interest_register`` checks it)."""
    client = selectors.client_get(client_id=client_id)
    cache_selectors.region_get(name=region)
    return interest_unregister(client=client, region=region, selector=selector)
