"""Read-only operator pages; they call selectors only (no writes)."""

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from clients import selectors as client_selectors
from durablecache.cache import selectors as cache_selectors


@staff_member_required
def overview(request: HttpRequest) -> HttpResponse:
    nodes = [
        {"node": n, "is_up": cache_selectors.node_is_up(n)}
        for n in cache_selectors.node_list()
    ]
    clients = [
        {
            "client": c,
            "queue_sizes": client_selectors.queue_sizes_of(
                c, own_node=settings.DURABLECACHE_NODE_NAME
            ),
        }
        for c in client_selectors.client_list(user=request.user)[:200]
    ]
    return render(
        request,
        "dashboard/overview.html",
        {
            "nodes": nodes,
            "clients": clients,
            "regions": cache_selectors.region_list(),
            "node_name": settings.DURABLECACHE_NODE_NAME,
        },
    )
