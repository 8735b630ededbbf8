"""Reads shaped for the operators' dashboard: counts, the client list,
history and the charts' series."""

from datetime import timedelta
from typing import Any

from django.db.models import Count, QuerySet
from django.utils import timezone

from cache.models import Node
from clients.models import (
    ClientHistory,
    ClientSample,
    DurableClient,
    LostQueue,
    NodeSample,
)
from clients.samples import SAMPLE_S
from clients.selectors.clients import client_list

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


def overflow_counts() -> dict[str, Any]:
    """Clients whose gap stands now (their queue overflowed; each resyncs
    by key after its next ``ready``), and the overflows each node recorded
    (its ``durablecache_overflows_total``, flushed to its row every few
    seconds, cache/counters.py)."""
    by_node = dict(Node.objects.values_list("name", "overflows_total"))
    return {
        "clients_with_gap": DurableClient.objects.filter(
            gap_since__isnull=False
        ).count(),
        "by_node": by_node,
        "total": sum(by_node.values()),
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
