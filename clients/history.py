"""A durable client's history (connects, disconnects, failovers, its end),
recorded by the services and shown, live, on the operators' dashboard."""

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from cache import counters
from clients.models import ClientHistory, DurableClient
from queues import notify

HISTORY_RETENTION = timedelta(days=7)

# Kinds also counted on the node's row (cache.counters), by the node that
# recorded them, once committed.
_COUNTED = {"failover": counters.FAILOVERS, "expired": counters.EXPIRIES}


def record(
    client: DurableClient, kind: str, *, node: str = "", detail: str = ""
) -> None:
    """Append one history row for a durable client (inside the caller's
    transaction) and, after commit, tell open dashboards its new state."""
    record_many([client], kind, node=node, detail=detail)


def record_many(
    clients: list[DurableClient], kind: str, *, node: str = "", detail: str = ""
) -> None:
    """``record`` for many clients: one insert for all of them."""
    durable = [client for client in clients if client.durable_id is not None]
    if not durable:
        return
    ClientHistory.objects.bulk_create(
        ClientHistory(
            durable_id=client.durable_id or "",
            kind=kind,
            node=node or client.node or client.primary,
            detail=detail[:255],
        )
        for client in durable
    )
    updates = [state_of(client, kind) for client in durable]

    counted = _COUNTED.get(kind)

    def tell_dashboards() -> None:
        if counted is not None:
            counters.counter.add(settings.DURABLECACHE_NODE_NAME, len(durable), counted)
        for update in updates:
            notify.dashboard(update)

    transaction.on_commit(tell_dashboards)


def state_of(client: DurableClient, kind: str) -> dict[str, Any]:
    """The dashboard's view of a client after ``kind`` happened to it."""
    if kind in ("closed", "deleted", "expired"):
        state = "expired" if kind == "expired" else "gone"
    else:
        state = "connected" if client.is_connected else "disconnected"
    return {
        "kind": "client",
        "event": kind,
        "durable_id": client.durable_id,
        "state": state,
        "node": client.node,
        "primary": client.primary,
        "secondaries": list(client.secondaries),
        "expires_at": (
            client.expires_at.isoformat()
            if client.expires_at and not client.is_connected
            else None
        ),
    }


def history_prune() -> int:
    """Delete history older than the retention; return how many rows."""
    horizon = timezone.now() - HISTORY_RETENTION
    return ClientHistory.objects.filter(at__lt=horizon).delete()[0]
