"""Small project-level HTTP views: liveness, readiness and Prometheus metrics."""

from collections.abc import Iterator

from django.conf import settings
from django.db.models import Count, Min
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from cache import counters
from cache import selectors as cache_selectors
from cache.models import Event, Node, Region
from clients.models import ContinuousQuery, DurableClient
from clients.placement import Membership, wanted_secondaries
from durablecache import readiness
from queues import selectors as queue_selectors


def api_not_found(request: HttpRequest) -> JsonResponse:
    return JsonResponse(
        {"error": {"code": "not_found", "message": f"no endpoint {request.path}"}},
        status=404,
    )


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness of this node's HTTP side (used by runnode to say 'ready')."""
    return JsonResponse({"status": "ok", "node": settings.DURABLECACHE_NODE_NAME})


def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: 200 when the cluster database, the node store, Redis and
    this node's worker answer, else 503 naming the failing part(s)
    (durablecache.readiness)."""
    results = readiness.check_all()
    failing = [name for name, (ready, _) in results.items() if not ready]
    return JsonResponse(
        {
            "status": "unready" if failing else "ready",
            "node": settings.DURABLECACHE_NODE_NAME,
            "failing": failing,
            "checks": {name: said for name, (_, said) in results.items()},
        },
        status=503 if failing else 200,
    )


# The node's own row's counters (cache.counters): name, help, Node field.
_NODE_COUNTERS = [
    (
        "durablecache_events_delivered",
        "Event frames this node's sockets sent",
        counters.DELIVERED,
    ),
    (
        "durablecache_acks",
        "Queued events removed by acks of this node's sockets",
        counters.ACKED,
    ),
    (
        "durablecache_failovers",
        "Durable clients whose primary this node moved to another host",
        counters.FAILOVERS,
    ),
    (
        "durablecache_expiries",
        "Durable clients this node expired (away past their timeout)",
        counters.EXPIRIES,
    ),
    (
        "durablecache_cq_events",
        "Events this node's fan-out queued naming one or more CQs",
        counters.CQ_EVENTS,
    ),
    (
        "durablecache_overflows",
        "Queues whose overflow this node recorded as a gap",
        counters.OVERFLOWS,
    ),
    (
        "durablecache_dropped_events",
        "Queued events dropped by the overflows this node recorded",
        counters.DROPPED_EVENTS,
    ),
    (
        "durablecache_resynced_entries",
        "Entries and markers this node's sockets sent in resyncs after a gap",
        counters.RESYNCED_ENTRIES,
    ),
]


class _NodeCollector:
    """Figures read from the databases at scrape time, every statement
    independent of the event log's length (docs/operations.md#metrics).

    Per-node figures carry the label ``node``; cluster-wide ones carry no
    label and are the same on every node."""

    def collect(self) -> Iterator[Metric]:
        node = settings.DURABLECACHE_NODE_NAME
        yield from self._per_node(node)
        yield from self._cluster()

    def _per_node(self, node: str) -> Iterator[Metric]:
        states = queue_selectors.queue_states()
        gauges = [
            (
                "durablecache_connected_clients",
                "Clients connected to this node",
                DurableClient.objects.filter(is_connected=True, node=node).count(),
            ),
            ("durablecache_hosted_queues", "Queues in this node store", len(states)),
            (
                "durablecache_queued_events",
                "Events queued in this node store",
                sum(s.size for s in states),
            ),
            (
                "durablecache_copies_filling",
                "Queue copies in this node store still being filled",
                sum(1 for s in states if not s.is_synced),
            ),
        ]
        for name, doc, value in gauges:
            family = GaugeMetricFamily(name, doc, labels=["node"])
            family.add_metric([node], value)
            yield family
        fields = [field for _, _, field in _NODE_COUNTERS]
        row = Node.objects.filter(name=node).values(*fields).first() or {}
        for name, doc, field in _NODE_COUNTERS:
            counter = CounterMetricFamily(name, doc, labels=["node"])
            counter.add_metric([node], row.get(field, 0))
            yield counter

    def _cluster(self) -> Iterator[Metric]:
        last_seq = cache_selectors.event_log_head()
        oldest = Event.objects.aggregate(oldest=Min("seq"))["oldest"]
        # Seqs are handed out one by one under the event log's lock and the
        # log is pruned from its oldest end, so the rows kept are a range.
        kept = 0 if oldest is None else last_seq - oldest + 1
        gauges = [
            ("durablecache_regions", "Regions in the cluster", Region.objects.count()),
            (
                "durablecache_durable_clients",
                "Durable clients in the cluster",
                DurableClient.objects.filter(durable_id__isnull=False).count(),
            ),
            (
                "durablecache_redundancy_short",
                "Durable clients with fewer secondaries than their redundancy",
                _redundancy_short(),
            ),
            (
                "durablecache_event_log_rows",
                "Events kept in the cluster event log",
                kept,
            ),
        ]
        for name, doc, value in gauges:
            yield GaugeMetricFamily(name, doc, value=value)
        yield CounterMetricFamily(
            "durablecache_events_written",
            "Events written to the cluster event log",
            value=last_seq,
        )
        cqs = GaugeMetricFamily(
            "durablecache_cqs", "Continuous queries in the cluster", labels=["durable"]
        )
        by_durable = dict(
            ContinuousQuery.objects.values_list("is_durable")
            .annotate(n=Count("pk"))
            .order_by()
        )
        for durable in (False, True):
            cqs.add_metric([str(durable).lower()], by_durable.get(durable, 0))
        yield cqs


def _redundancy_short() -> int:
    live = len(Membership.read().up())
    rows = DurableClient.objects.filter(durable_id__isnull=False).exclude(redundancy=0)
    return sum(
        1
        for client in rows.only("durable_id", "redundancy", "secondaries", "syncing")
        if len(client.complete_secondaries) < wanted_secondaries(client, live)
    )


# The node's figures, and prometheus_client's default collectors (process,
# platform, gc) of the Daphne process that answers the scrape.
_registry = CollectorRegistry()
_registry.register(_NodeCollector())
ProcessCollector(registry=_registry)
PlatformCollector(registry=_registry)
GCCollector(registry=_registry)


def metrics(request: HttpRequest) -> HttpResponse:
    return HttpResponse(generate_latest(_registry), content_type=CONTENT_TYPE_LATEST)
