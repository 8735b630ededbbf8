"""What every dashboard page shares: the staff check, the base context
(this node, the counts in the header) and the confirmation page."""

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from clients import selectors as client_selectors


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


def own_node() -> str:
    """The name of the node serving this page."""
    return settings.DURABLECACHE_NODE_NAME


def base_context(request: HttpRequest, **context: Any) -> dict[str, Any]:
    """The context every page extends: this node and the header counts."""
    return {
        "node_name": own_node(),
        "counts": client_selectors.dashboard_counts(),
        **context,
    }


def confirm_page(
    request: HttpRequest, *, title: str, message: str, button: str, cancel: str
) -> HttpResponse:
    return render(
        request,
        "dashboard/confirm.html",
        base_context(
            request, title=title, message=message, button=button, cancel=cancel
        ),
    )


# --- overview ---------------------------------------------------------------


def query_int(text: str | None, default: int) -> int:
    try:
        return max(0, int(text or default))
    except ValueError:
        return default
