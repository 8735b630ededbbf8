"""Small project-level HTTP views: health check and Prometheus metrics."""

from collections.abc import Iterator

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from cache.models import Event, Region
from clients.models import DurableClient
from clients.placement import Membership, wanted_secondaries
from queues import selectors as queue_selectors


def api_not_found(request: HttpRequest) -> JsonResponse:
    return JsonResponse(
        {"error": {"code": "not_found", "message": f"no endpoint {request.path}"}},
        status=404,
    )


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness of this node's HTTP side (used by runnode to say 'ready')."""
    return JsonResponse({"status": "ok", "node": settings.DURABLECACHE_NODE_NAME})


class _NodeCollector:
    """Gauges read from the databases at scrape time (cheap counts)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        node = settings.DURABLECACHE_NODE_NAME
        states = queue_selectors.queue_states()
        sizes = {s.client_id: s.size for s in states}
        gauges = [
            ("durablecache_regions", "Regions in the cluster", Region.objects.count()),
            (
                "durablecache_durable_clients",
                "Durable clients in the cluster",
                DurableClient.objects.filter(durable_id__isnull=False).count(),
            ),
            (
                "durablecache_connected_clients",
                "Clients connected to this node",
                DurableClient.objects.filter(is_connected=True, node=node).count(),
            ),
            ("durablecache_hosted_queues", "Queues in this node store", len(sizes)),
            (
                "durablecache_queued_events",
                "Events queued in this node store",
                sum(sizes.values()),
            ),
            (
                "durablecache_copies_filling",
                "Queue copies in this node store still being filled",
                sum(1 for s in states if not s.is_synced),
            ),
            (
                "durablecache_redundancy_short",
                "Durable clients with fewer secondaries than their redundancy",
                _redundancy_short(),
            ),
            (
                "durablecache_event_log_rows",
                "Events kept in the cluster event log",
                Event.objects.count(),
            ),
        ]
        for name, doc, value in gauges:
            family = GaugeMetricFamily(name, doc, labels=["node"])
            family.add_metric([node], value)
            yield family


def _redundancy_short() -> int:
    live = len(Membership.read().up())
    rows = DurableClient.objects.filter(durable_id__isnull=False).exclude(redundancy=0)
    return sum(
        1
        for client in rows.only("durable_id", "redundancy", "secondaries", "syncing")
        if len(client.complete_secondaries) < wanted_secondaries(client, live)
    )


def metrics(request: HttpRequest) -> HttpResponse:
    registry = CollectorRegistry()
    registry.register(_NodeCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
