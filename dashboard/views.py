"""The operators' dashboard (``/dashboard/``): thin views over selectors and
services, Django templates under ``templates/dashboard/``.

Staff only: an anonymous visitor is sent to the login page, a signed-in
plain user gets 403. Every change is a POST with a CSRF token, made after a
confirmation page where it cannot be undone, and goes through the same
services as the REST API and the admin. Live updates come over the
``/ws/v1/dashboard`` websocket (``dashboard.consumers``);
numbers that change all the time (queue sizes, charts) are polled as JSON.
"""

import json
from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from cache import selectors as cache_selectors
from cache import services as cache_services
from clients import selectors as client_selectors
from clients import services as client_services
from clients.exceptions import UnknownClientError
from common.errors import DomainError
from queues import selectors as queue_selectors

PAGE = 50
ENTRY_PAGE = 50
QUEUE_PAGE = 50


def operator_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Staff only: anonymous → login page, plain user → 403."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not request.user.is_staff:
            raise PermissionDenied("the dashboard is for operators")
        return view(request, *args, **kwargs)

    return wrapped


def _own_node() -> str:
    return settings.DURABLECACHE_NODE_NAME


def _base(request: HttpRequest, **context: Any) -> dict[str, Any]:
    return {
        "node_name": _own_node(),
        "counts": client_selectors.dashboard_counts(),
        **context,
    }


def _confirm(
    request: HttpRequest, *, title: str, message: str, button: str, cancel: str
) -> HttpResponse:
    return render(
        request,
        "dashboard/confirm.html",
        _base(request, title=title, message=message, button=button, cancel=cancel),
    )


# --- overview ---------------------------------------------------------------


@operator_required
@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    nodes = [
        {**n, "dashboard_url": n["url"].rstrip("/") + "/dashboard/"}
        for n in client_selectors.node_overview(own_node=_own_node())
    ]
    return render(
        request,
        "dashboard/overview.html",
        _base(
            request,
            nodes=nodes,
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


# --- durable clients ----------------------------------------------------------


@operator_required
@require_GET
def clients(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state", "")
    if state not in ("", *client_selectors.CLIENT_STATES):
        state = ""
    search = request.GET.get("q", "").strip()[:128]
    after = request.GET.get("after") or None
    rows, following = client_selectors.dashboard_clients(
        user=request.user, state=state, search=search, after=after, limit=PAGE
    )
    items = (
        rows
        if state == "expired"
        else [
            {
                "client": c,
                "queue_sizes": client_selectors.queue_sizes_of(c, own_node=_own_node()),
            }
            for c in rows
        ]
    )
    next_url = None
    if following:
        query = {"state": state, "q": search, "after": following}
        next_url = "?" + urlencode({k: v for k, v in query.items() if v})
    return render(
        request,
        "dashboard/clients.html",
        _base(
            request,
            state=state,
            search=search,
            items=items,
            next_url=next_url,
            states=client_selectors.CLIENT_STATES,
        ),
    )


def _client(request: HttpRequest, durable_id: str) -> Any:
    try:
        return client_selectors.client_visible_to(
            user=request.user, durable_id=durable_id
        )
    except UnknownClientError:
        return None


@operator_required
@require_GET
def client_detail(request: HttpRequest, durable_id: str) -> HttpResponse:
    client = _client(request, durable_id)
    history = client_selectors.client_history(durable_id=durable_id)
    if client is None:
        return render(
            request,
            "dashboard/client_gone.html",
            _base(request, durable_id=durable_id, history=history),
            status=404,
        )
    after = _int(request.GET.get("after"), 0)
    peek: list[dict[str, Any]] = []
    peek_next, primary_url = None, None
    if client.primary in ("", _own_node()):
        rows = queue_selectors.queue_entries_after(
            client_id=client.id, after=after, limit=QUEUE_PAGE + 1
        )
        peek = [
            {**event, "value": json.dumps(event["value"], ensure_ascii=False)}
            for event in map(queue_selectors.entry_to_event, rows[:QUEUE_PAGE])
        ]
        if len(rows) > QUEUE_PAGE:
            peek_next = f"?after={rows[QUEUE_PAGE - 1].seq}"
    else:
        node = next(
            (n for n in cache_selectors.node_list() if n.name == client.primary), None
        )
        primary_url = (
            f"{node.url.rstrip('/')}{request.path}" if node is not None else ""
        )
    return render(
        request,
        "dashboard/client.html",
        _base(
            request,
            client=client,
            queue_sizes=client_selectors.queue_sizes_of(client, own_node=_own_node()),
            interests=client_selectors.interest_list(client=client),
            history=history,
            peek=peek,
            peek_next=peek_next,
            primary_url=primary_url,
        ),
    )


@operator_required
@require_GET
def client_state(request: HttpRequest, durable_id: str) -> JsonResponse:
    """Numbers of one client that change all the time (polled by its page)."""
    client = _client(request, durable_id)
    if client is None:
        return JsonResponse({"durable_id": durable_id, "state": "gone"}, status=404)
    sizes = client_selectors.queue_sizes_of(client, own_node=_own_node())
    return JsonResponse(
        {
            "durable_id": durable_id,
            "state": "connected" if client.is_connected else "disconnected",
            "node": client.node,
            "primary": client.primary,
            "secondaries": client.secondaries,
            "syncing": client.syncing,
            "queue_sizes": sizes,
            "pending_events": sizes.get(client.primary, -2),
            "expires_at": None
            if client.is_connected or client.expires_at is None
            else client.expires_at.isoformat(),
            "series": client_selectors.client_series(durable_id=durable_id),
        }
    )


@operator_required
@require_http_methods(["GET", "POST"])
def client_close(request: HttpRequest, durable_id: str) -> HttpResponse:
    back = reverse("dashboard:client", args=[durable_id])
    if request.method == "GET":
        return _confirm(
            request,
            title=f"Close {durable_id}?",
            message=(
                "Its queue is dropped on every host, its interests go, and its "
                "socket (if connected) is closed with 4410. Its next hello starts "
                "a new, empty queue. This cannot be undone."
            ),
            button="Close the durable client",
            cancel=back,
        )
    try:
        client_services.client_delete(user=request.user, durable_id=durable_id)
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect(back)
    messages.success(request, f"{durable_id} closed; its queue is dropped everywhere.")
    return redirect("dashboard:clients")


@operator_required
@require_http_methods(["GET", "POST"])
def interest_remove(request: HttpRequest, durable_id: str, pk: int) -> HttpResponse:
    back = reverse("dashboard:client", args=[durable_id])
    client = _client(request, durable_id)
    if client is None:
        messages.error(request, f"no durable client {durable_id!r}")
        return redirect("dashboard:clients")
    interest = client_selectors.interest_list(client=client).filter(pk=pk).first()
    if interest is None:
        messages.error(request, f"no interest {pk} of {durable_id}")
        return redirect(back)
    if request.method == "GET":
        return _confirm(
            request,
            title="Remove this interest?",
            message=(
                f"{durable_id} stops receiving events of region {interest.region} "
                f"for {interest.kind} {interest.selector or ''}. Events already "
                "queued stay queued."
            ),
            button="Remove the interest",
            cancel=back,
        )
    client_services.interest_delete(client=client, pk=pk)
    messages.success(request, "Interest removed.")
    return redirect(back)


# --- regions and entries -----------------------------------------------------


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
        _base(request, regions=cache_selectors.region_overview()),
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
        _base(request, region=region, entries=rows, prefix=prefix, next_url=next_url),
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
        return _confirm(
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
        return _confirm(
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
        return _confirm(
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


def _int(text: str | None, default: int) -> int:
    try:
        return max(0, int(text or default))
    except ValueError:
        return default
