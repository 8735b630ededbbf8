"""Admin for regions, entries, the event log and nodes.

The admin is a door like REST and the dashboard: it reads rows, and every
write goes through a service of ``cache.services`` so that it
appends to the event log (ARCHITECTURE.md, "Doors"). Rows that only the
system writes (events, the log counter, node fields) are read-only here.

``ServiceAdmin`` is shared with ``clients.admin`` and ``queues.admin``.
"""

from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected as confirm_delete_selected
from django.contrib.admin.utils import model_ngettext
from django.contrib.auth import get_permission_codename
from django.db import transaction
from django.db.models import Count, Model, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from cache import selectors, services
from cache.models import Entry, Event, EventLog, Node, Region
from cache.validation import validate_name
from common.errors import ConflictError, DomainError

M = TypeVar("M", bound=Model)


class ServiceAdmin(admin.ModelAdmin[M], Generic[M]):
    """A ModelAdmin whose writes are calls to domain services.

    Subclasses implement ``delete_through_service``; the delete page and the
    "Delete selected" action call it one row at a time. A ``DomainError``
    (the row changed meanwhile, a node still up, ...) becomes an error
    message naming the row instead of a 500.

    Actions that call a write service declare ``permissions=["service"]``:
    the user's model-level change permission, since the admin's own change
    form is switched off (it would save rows past the event log).
    """

    def delete_through_service(self, request: HttpRequest, obj: Any) -> None:
        raise NotImplementedError

    def has_service_permission(self, request: HttpRequest) -> bool:
        codename = get_permission_codename("change", self.opts)
        return request.user.has_perm(f"{self.opts.app_label}.{codename}")

    def call_each(
        self,
        request: HttpRequest,
        objs: Iterable[Any],
        call: Callable[[Any], object],
        *,
        done: str,
    ) -> int:
        """Call ``call`` on each row, each in its own transaction.

        A failed row is reported and skipped; the others go ahead. Ends with
        one success message "<done> <count> <rows>." and returns the count.
        """
        count = 0
        for obj in objs:
            try:
                with transaction.atomic():
                    call(obj)
            except DomainError as exc:
                self.message_user(
                    request, f"{self.label(obj)}: {exc.message}", messages.ERROR
                )
            else:
                count += 1
        if count:
            noun = model_ngettext(self.opts, count)
            self.message_user(request, f"{done} {count} {noun}.", messages.SUCCESS)
        return count

    def label(self, obj: Any) -> str:
        """How a row is named in messages."""
        return str(obj)

    def log_deletion_of(self, request: HttpRequest, obj: Any) -> None:
        """Log one row's deletion (before it; rolled back if the service fails)."""
        self.log_deletions(request, self.model._default_manager.filter(pk=obj.pk))

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        self.delete_through_service(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for obj in queryset:
            self.delete_through_service(request, obj)

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[Any, Any], set[Any], list[Any]]:
        # The confirmation page lists what goes with the row, but the service
        # removes it, so no delete permission on those rows' models is needed
        # (e.g. a client's size reports, read-only here).
        deletable, counts, _perms_needed, protected = super().get_deleted_objects(
            objs, request
        )
        return deletable, counts, set(), protected

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions: dict[str, Any] = dict(super().get_actions(request))
        if "delete_selected" in actions:  # present only with delete permission
            _, name, description = actions["delete_selected"]
            func = type(self).delete_selected_through_service
            actions[name] = (func, name, description)
        return actions

    def delete_selected_through_service(
        self, request: HttpRequest, queryset: QuerySet[Any]
    ) -> HttpResponse | None:
        """Django's "Delete selected" page, then one service call per row."""
        if not request.POST.get("post"):
            return confirm_delete_selected(self, request, queryset)

        def delete(obj: Any) -> None:
            self.log_deletion_of(request, obj)
            self.delete_through_service(request, obj)

        self.call_each(request, list(queryset), delete, done="Deleted")
        return None

    def delete_view(
        self,
        request: HttpRequest,
        object_id: str,
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        try:
            return super().delete_view(request, object_id, extra_context)
        except DomainError as exc:  # the view's transaction has rolled back
            return self._refused(request, exc)

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except DomainError as exc:
            return self._refused(request, exc)

    def _refused(self, request: HttpRequest, exc: DomainError) -> HttpResponse:
        self.message_user(request, exc.message, messages.ERROR)
        opts = self.opts
        return HttpResponseRedirect(
            reverse(
                f"admin:{opts.app_label}_{opts.model_name}_changelist",
                current_app=self.admin_site.name,
            )
        )


class RegionAddForm(forms.ModelForm[Region]):
    class Meta:
        model = Region
        fields = ["name", "conflate_events"]

    def clean_name(self) -> str:
        name = self.cleaned_data["name"]
        try:
            return validate_name(name, what="region name")
        except DomainError as exc:
            raise forms.ValidationError(exc.message) from exc


@admin.register(Region)
class RegionAdmin(ServiceAdmin[Region]):
    list_display = ["name", "conflate_events", "live_entries", "created_at"]
    list_filter = ["conflate_events", "created_at"]
    search_fields = ["name"]
    ordering = ["name"]
    date_hierarchy = "created_at"
    form = RegionAddForm
    actions = ["clear_regions"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Region]:
        return (
            super()
            .get_queryset(request)
            .annotate(
                _live_entries=Count("entries", filter=Q(entries__is_destroyed=False))
            )
        )

    @admin.display(description="live entries", ordering="_live_entries")
    def live_entries(self, obj: Region) -> int:
        return int(getattr(obj, "_live_entries", 0))

    def has_change_permission(
        self, request: HttpRequest, obj: Region | None = None
    ) -> bool:
        return False  # no service changes a region; add and delete only

    def save_model(
        self, request: HttpRequest, obj: Region, form: Any, change: bool
    ) -> None:
        if change:  # unreachable: no change permission
            raise ConflictError("a region cannot be changed, only created or deleted")
        region = services.region_create(
            name=obj.name, conflate_events=obj.conflate_events
        )
        obj.pk, obj.created_at = region.pk, region.created_at

    def delete_through_service(self, request: HttpRequest, obj: Region) -> None:
        services.region_destroy(name=obj.name)

    @admin.action(
        permissions=["service"],
        description="Clear selected regions (destroy every entry; one event each)",
    )
    def clear_regions(self, request: HttpRequest, queryset: QuerySet[Region]) -> None:
        def clear(region: Region) -> None:
            event = services.region_clear(name=region.name)
            self.log_change(request, region, f"Cleared (event seq {event.seq}).")

        self.call_each(request, queryset, clear, done="Cleared")


@admin.register(Entry)
class EntryAdmin(ServiceAdmin[Entry]):
    """Entries are read here; values are written through REST."""

    list_display = ["region", "key", "version", "seq", "is_destroyed", "updated_at"]
    list_filter = ["is_destroyed", "region", "updated_at"]
    list_select_related = ["region"]
    search_fields = ["key", "region__name"]
    ordering = ["region__name", "key"]
    date_hierarchy = "updated_at"
    show_full_result_count = False
    actions = ["invalidate_entries", "destroy_entries"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(
        self, request: HttpRequest, obj: Entry | None = None
    ) -> bool:
        return False

    def label(self, obj: Entry) -> str:
        return f"{obj.region.name}:{obj.key}"

    def delete_through_service(self, request: HttpRequest, obj: Entry) -> None:
        # A destroyed key keeps its row (versions go on): "delete" destroys.
        services.entry_destroy(region=obj.region.name, key=obj.key)

    def _entry_action(
        self,
        request: HttpRequest,
        queryset: QuerySet[Entry],
        service: Callable[..., tuple[Entry, Event]],
        done: str,
    ) -> None:
        def call(entry: Entry) -> None:
            _, event = service(region=entry.region.name, key=entry.key)
            self.log_change(
                request,
                entry,
                f"{event.op} (version {event.version}, seq {event.seq}).",
            )

        self.call_each(request, queryset.select_related("region"), call, done=done)

    @admin.action(
        permissions=["service"],
        description="Invalidate selected entries (value becomes null)",
    )
    def invalidate_entries(
        self, request: HttpRequest, queryset: QuerySet[Entry]
    ) -> None:
        self._entry_action(request, queryset, services.entry_invalidate, "Invalidated")

    @admin.action(permissions=["service"], description="Destroy selected entries")
    def destroy_entries(self, request: HttpRequest, queryset: QuerySet[Entry]) -> None:
        self._entry_action(request, queryset, services.entry_destroy, "Destroyed")


class ReadOnlyAdmin(admin.ModelAdmin[M], Generic[M]):
    """Rows only the system writes: viewable, never added, changed or deleted."""

    show_full_result_count = False  # large tables: skip the second COUNT(*)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin[Event]):
    list_display = ["seq", "op", "region", "key", "version", "ts", "event_id"]
    list_filter = ["op", "region", "conflate", "ts"]
    search_fields = ["event_id", "key", "region"]
    ordering = ["-seq"]
    date_hierarchy = "ts"


@admin.register(EventLog)
class EventLogAdmin(ReadOnlyAdmin[EventLog]):
    """The one counter row (no filters or search: there is nothing to narrow)."""

    list_display = ["id", "last_seq"]


def node_status(node: Node) -> str:
    """up, draining or down, as ``clients.placement.Membership`` says.

    Down when the heartbeat is stale (draining or not); ``node_is_up`` of
    a copy that is not draining tells whether the heartbeat is fresh.
    """
    if not selectors.node_is_up(Node(last_heartbeat=node.last_heartbeat)):
        return "down"
    return "draining" if node.is_draining else "up"


class NodeStatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, str]]:
        return [("up", "up"), ("draining", "draining"), ("down", "down")]

    def queryset(self, request: Any, queryset: QuerySet[Node]) -> QuerySet[Node]:
        if self.value() is None:
            return queryset
        # A handful of rows: filter by the same rule as the column.
        names = [n.name for n in queryset if node_status(n) == self.value()]
        return queryset.filter(name__in=names)


@admin.register(Node)
class NodeAdmin(ServiceAdmin[Node]):
    """Nodes register and heartbeat themselves; an operator only retires one.

    A row may be deleted only once its node is down: the documented way to
    retire a node for good (docs/operations.md, "a node retired for good").
    """

    list_display = [
        "name",
        "url",
        "status",
        "last_heartbeat",
        "started_at",
        "is_draining",
        "fanout_through",
    ]
    list_filter = [NodeStatusFilter, "is_draining"]
    search_fields = ["name", "url"]
    ordering = ["name"]

    @admin.display(description="status")
    def status(self, obj: Node) -> str:
        return node_status(obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(
        self, request: HttpRequest, obj: Node | None = None
    ) -> bool:
        return False

    def delete_through_service(self, request: HttpRequest, obj: Node) -> None:
        state = node_status(obj)
        if state != "down":
            raise ConflictError(
                f"node {obj.name} is {state}: only a down node can be deleted "
                "(stop it first; see docs/operations.md)"
            )
        # No cache service retires a node yet: the row itself is the record.
        obj.delete()
