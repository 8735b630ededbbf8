"""The overview page and the JSON it polls (counts, node charts)."""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from cache import selectors as cache_selectors
from clients import selectors as client_selectors
from dashboard.views.base import base_context, operator_required, own_node


@operator_required
@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    overflows = client_selectors.overflow_counts()
    nodes = [
        {
            **n,
            "dashboard_url": n["url"].rstrip("/") + "/dashboard/",
            "overflows": overflows["by_node"].get(n["name"], 0),
        }
        for n in client_selectors.node_overview(own_node=own_node())
    ]
    return render(
        request,
        "dashboard/overview.html",
        base_context(
            request,
            nodes=nodes,
            overflows=overflows,
            regions=cache_selectors.region_list()[:20],
            recent=client_selectors.recent_history(limit=20),
        ),
    )


@operator_required
@require_GET
def counts(request: HttpRequest) -> JsonResponse:
    return JsonResponse(client_selectors.dashboard_counts())


@operator_required
@require_GET
def node_series(request: HttpRequest) -> JsonResponse:
    return JsonResponse(
        {
            "nodes": client_selectors.node_series(minutes=30),
            "cluster": client_selectors.cluster_series(minutes=30),
        }
    )
