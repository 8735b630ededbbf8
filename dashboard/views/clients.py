"""Durable clients: the list, one client's page and its polled state,
closing a client, removing one of its interests, closing one of its CQs."""

import json
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from cache import selectors as cache_selectors
from clients import selectors as client_selectors
from clients import services as client_services
from clients.exceptions import UnknownClientError
from common.errors import DomainError
from dashboard.views.base import (
    base_context,
    confirm_page,
    operator_required,
    own_node,
    query_int,
)
from queues import selectors as queue_selectors

PAGE = 50
QUEUE_PAGE = 50


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
                "queue_sizes": client_selectors.queue_sizes_of(c, own_node=own_node()),
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
        base_context(
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
            base_context(request, durable_id=durable_id, history=history),
            status=404,
        )
    after = query_int(request.GET.get("after"), 0)
    peek: list[dict[str, Any]] = []
    peek_next, primary_url = None, None
    if client.primary in ("", own_node()):
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
        base_context(
            request,
            client=client,
            queue_sizes=client_selectors.queue_sizes_of(client, own_node=own_node()),
            interests=client_selectors.interest_list(client=client),
            cqs=client_selectors.cq_list(client=client),
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
    sizes = client_selectors.queue_sizes_of(client, own_node=own_node())
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
        return confirm_page(
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
        return confirm_page(
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


@operator_required
@require_http_methods(["GET", "POST"])
def cq_close(request: HttpRequest, durable_id: str, name: str) -> HttpResponse:
    """Close a client's CQ as an operator (as REST DELETE and ``durable
    close-cq`` do): a 404 for a name the client does not hold."""
    client = _client(request, durable_id)
    if (
        client is None
        or not client_selectors.cq_list(client=client).filter(name=name).exists()
    ):
        raise Http404(f"{durable_id} holds no continuous query {name!r}")
    back = reverse("dashboard:client", args=[durable_id])
    if request.method == "GET":
        return confirm_page(
            request,
            title=f"Close the continuous query {name}?",
            message=(
                f"{durable_id} gets no more events for {name}; a connected "
                "client is told (cq_closed). Queued events lose its name, and "
                "those no other CQ or interest of the client wants are dropped."
            ),
            button="Close the continuous query",
            cancel=back,
        )
    client_services.cq_close(client=client, name=name, by_operator=True)
    messages.success(request, f"Continuous query {name} closed.")
    return redirect(back)


# --- regions and entries -----------------------------------------------------
