"""Regions and their entries: list and create, browse and put, destroy or
invalidate an entry, clear or destroy a region."""

import json
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from cache import selectors as cache_selectors
from cache import services as cache_services
from common.errors import DomainError
from dashboard.views.base import base_context, confirm_page, operator_required

ENTRY_PAGE = 50


@operator_required
@require_http_methods(["GET", "POST"])
def regions(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        name = request.POST.get("name", "").strip()
        try:
            cache_services.region_create(
                name=name, conflate_events=request.POST.get("conflate_events") == "on"
            )
        except DomainError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, f"Region {name} created.")
        return redirect("dashboard:regions")
    return render(
        request,
        "dashboard/regions.html",
        base_context(request, regions=cache_selectors.region_overview()),
    )


def _region_or_404(name: str) -> Any:
    try:
        return cache_selectors.region_get(name=name)
    except DomainError:  # NoSuchRegionError
        return None


@operator_required
@require_http_methods(["GET", "POST"])
def region_detail(request: HttpRequest, name: str) -> HttpResponse:
    region = _region_or_404(name)
    if region is None:
        messages.error(request, f"no region {name!r}")
        return redirect("dashboard:regions")
    if request.method == "POST":
        return _put(request, name)
    prefix = request.GET.get("prefix", "")[:512]
    after = request.GET.get("after") or None
    entries = cache_selectors.entry_list(
        region=name, prefix=prefix or None, after=after, limit=ENTRY_PAGE + 1
    )
    next_url = None
    if len(entries) > ENTRY_PAGE:
        query = {"prefix": prefix, "after": entries[ENTRY_PAGE - 1].key}
        next_url = "?" + urlencode({k: v for k, v in query.items() if v})
    rows = [
        {"entry": e, "value": json.dumps(e.value, ensure_ascii=False)}
        for e in entries[:ENTRY_PAGE]
    ]
    return render(
        request,
        "dashboard/region.html",
        base_context(
            request, region=region, entries=rows, prefix=prefix, next_url=next_url
        ),
    )


def _put(request: HttpRequest, region: str) -> HttpResponse:
    back = reverse("dashboard:region", args=[region])
    key = request.POST.get("key", "")
    try:
        value = json.loads(request.POST.get("value", ""))
    except ValueError:
        messages.error(request, "The value must be JSON (a string needs quotes).")
        return redirect(back)
    try:
        entry, _ = cache_services.entry_put(region=region, key=key, value=value)
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect(back)
    shown = json.dumps(value)[:80]
    messages.success(request, f"{key} = {shown} (version {entry.version})")
    return redirect(back)


ENTRY_ACTIONS = {
    "destroy": (
        cache_services.entry_destroy,
        "Destroy",
        "The key is removed (its version goes on if it is written again); "
        "subscribers get a destroy event.",
    ),
    "invalidate": (
        cache_services.entry_invalidate,
        "Invalidate",
        "The value becomes null, the key stays; subscribers get an invalidate event.",
    ),
}


@operator_required
@require_http_methods(["GET", "POST"])
def entry_action(request: HttpRequest, name: str, action: str) -> HttpResponse:
    back = reverse("dashboard:region", args=[name])
    if action not in ENTRY_ACTIONS:
        messages.error(request, f"unknown action {action!r}")
        return redirect(back)
    service, label, explanation = ENTRY_ACTIONS[action]
    key = request.GET.get("key") if request.method == "GET" else request.POST.get("key")
    if not key:
        messages.error(request, "no key given")
        return redirect(back)
    if request.method == "GET":
        return confirm_page(
            request,
            title=f"{label} {key!r} in {name}?",
            message=explanation,
            button=f"{label} the entry",
            cancel=back,
        )
    try:
        entry, _ = service(region=name, key=key)
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"{label}: {key} (version {entry.version}).")
    return redirect(back)


@operator_required
@require_http_methods(["GET", "POST"])
def region_clear(request: HttpRequest, name: str) -> HttpResponse:
    back = reverse("dashboard:region", args=[name])
    if request.method == "GET":
        return confirm_page(
            request,
            title=f"Clear region {name}?",
            message=(
                "Every entry is destroyed (versions are kept); subscribers get one "
                "region_clear event. This cannot be undone."
            ),
            button="Clear the region",
            cancel=back,
        )
    try:
        cache_services.region_clear(name=name)
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Region {name} cleared.")
    return redirect(back)


@operator_required
@require_http_methods(["GET", "POST"])
def region_destroy(request: HttpRequest, name: str) -> HttpResponse:
    if request.method == "GET":
        return confirm_page(
            request,
            title=f"Destroy region {name}?",
            message=(
                "The region and all its entries are deleted; subscribers get one "
                "region_destroy event; writes to it answer 404 until it is created "
                "again. This cannot be undone."
            ),
            button="Destroy the region",
            cancel=reverse("dashboard:region", args=[name]),
        )
    try:
        cache_services.region_destroy(name=name)
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect("dashboard:region", name)
    messages.success(request, f"Region {name} destroyed.")
    return redirect("dashboard:regions")
