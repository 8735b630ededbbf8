"""The Live view of one region (``/dashboard/regions/NAME/live/``).

The page subscribes through the TypeScript client (sdk/js, vendored as
``static/dashboard/vendor/durablecache.min.js``) as a non-durable client
interested in all keys, and updates its table from the events. It holds no
token: the subscribe socket accepts an operator's session cookie on a
same-origin handshake (sockets.middleware; docs/dashboard.md).
"""

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from cache import selectors as cache_selectors
from clients import selectors as client_selectors
from dashboard.views.base import operator_required

# Up to this many entries the page starts from the region's current
# values (the interest's image); above it, from an empty table that fills
# as keys change, so opening the page never ships a whole large region.
IMAGE_LIMIT = 1000


@operator_required
@require_GET
def region_live(request: HttpRequest, name: str) -> HttpResponse:
    region = cache_selectors.region_overview().filter(name=name).first()
    if region is None:
        messages.error(request, f"no region {name!r}")
        return redirect("dashboard:regions")
    with_image = region.live_entries <= IMAGE_LIMIT  # type: ignore[attr-defined]
    return render(
        request,
        "dashboard/region_live.html",
        {
            "node_name": settings.DURABLECACHE_NODE_NAME,
            "counts": client_selectors.dashboard_counts(),
            "region": region,
            "policy": "keys_values" if with_image else "none",
            "image_limit": IMAGE_LIMIT,
        },
    )
