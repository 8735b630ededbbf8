"""A durable client's life outside ``hello``: created offline by REST,
closed for good by its owner or an operator, and the removal of clients
with their queues on every host."""

import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from cache.validation import validate_name
from clients import dispatch, history, selectors
from clients.exceptions import UnknownClientError
from clients.models import DurableClient
from clients.placement import self_node
from queues import notify
from queues import services as queue_services

CLOSE_BY_OPERATOR = 4410


def client_delete(*, user: Any, durable_id: str) -> None:
    """Close a durable client for good: drop its queue and socket (4410)."""
    with transaction.atomic():
        client = selectors.client_visible_to(user=user, durable_id=durable_id)
        client = DurableClient.objects.select_for_update().get(pk=client.pk)
        client_id, node = client.id, client.node
        history.record(client, "deleted", detail=f"closed by {user}")
        clients_purge([client])
        if node:  # the node that holds (or held) its socket
            transaction.on_commit(
                lambda: notify.close_client(client_id, CLOSE_BY_OPERATOR, node)
            )


def client_ensure_offline(*, user: Any, durable_id: str) -> DurableClient:
    """Return the caller's durable client, creating it offline when unknown.

    A created client is hosted on this node, ``disconnected``, and its
    timeout starts now (REST pre-registration of durable interest).
    """
    existing = client_check_claim(user=user, durable_id=durable_id)
    if existing is not None:
        return existing
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
        return selectors.client_visible_to(user=user, durable_id=durable_id)
    return client


def client_check_claim(*, user: Any, durable_id: str) -> DurableClient | None:
    """Return the client ``durable_id`` names if ``user`` may see it, None
    when the id is valid and names no client yet; raise otherwise
    (UnknownClientError for another owner's client).

    The REST doors that may create a client call it before they read the
    request's body: another owner's client is a 404 whatever the body
    says, as the websocket door answers 4403 before it reads a field.
    """
    validate_name(durable_id, what="durable_id")
    try:
        return selectors.client_visible_to(user=user, durable_id=durable_id)
    except UnknownClientError:
        if DurableClient.objects.filter(durable_id=durable_id).exists():
            raise
    return None


def clients_purge(clients: list[DurableClient]) -> None:
    """Delete clients, their registrations and their queues on every host
    (the queues after commit)."""
    if not clients:
        return
    hosts = {client.id: client.hosts for client in clients}
    DurableClient.objects.filter(pk__in=list(hosts)).delete()
    queues_drop_after_commit(hosts)


def queues_drop_after_commit(hosts: dict[uuid.UUID, list[str]]) -> None:
    """After commit, drop each client's queue on each of its ``hosts``:
    here at once, on another node by task."""

    def drop_queues() -> None:
        here = [pk for pk, on in hosts.items() if self_node() in on]
        if here:
            queue_services.queue_drop_many(client_ids=here)
        for pk, on in hosts.items():
            for host in on:
                if host != self_node():
                    dispatch.drop_queue_on(host, pk)

    transaction.on_commit(drop_queues)
