"""Admin for durable clients, interests, continuous queries, lost queues
and size reports.

Clients come from ``hello`` or REST, interests from ``register`` and CQs
from ``register_cq``; the admin only reads them, closes clients and CQs
and removes interests, through ``clients.services`` like the REST API,
``manage.py durable`` and the dashboard.
"""

from typing import Any, Generic, TypeVar

from django.contrib import admin, messages
from django.db.models import Model, QuerySet
from django.http import HttpRequest

from cache.admin import ReadOnlyAdmin, ServiceAdmin
from clients import services
from clients.models import (
    ClientHistory,
    ClientSample,
    ContinuousQuery,
    DurableClient,
    Interest,
    LostQueue,
    NodeSample,
    QueueSizeReport,
)
from common.errors import ValidationError

INTEREST_FIELDS = ("region", "kind", "selector", "is_durable", "policy", "since_seq")
REPORT_FIELDS = ("node", "size", "acked_through", "reported_at")
CQ_FIELDS = ("name", "region", "query", "is_durable", "since_seq", "created_at")
M = TypeVar("M", bound=Model)


class ReadOnlyInline(admin.TabularInline[M, DurableClient], Generic[M]):
    """A client's rows shown on its page: never added, changed or deleted
    there (what may change goes through its own page and the services)."""

    extra = 0

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class InterestInline(ReadOnlyInline[Interest]):
    model = Interest
    fields = readonly_fields = INTEREST_FIELDS
    show_change_link = True  # removing one goes through its own page


class CqInline(ReadOnlyInline[ContinuousQuery]):
    model = ContinuousQuery
    fields = readonly_fields = CQ_FIELDS
    show_change_link = True  # closing one goes through its own page
    verbose_name_plural = "continuous queries (close them from their own page)"


class SizeReportInline(ReadOnlyInline[QueueSizeReport]):
    model = QueueSizeReport
    fields = readonly_fields = REPORT_FIELDS


@admin.register(DurableClient)
class DurableClientAdmin(ServiceAdmin[DurableClient]):
    list_display = [
        "durable_id",
        "owner",
        "state",
        "node",
        "primary",
        "secondary_hosts",
        "syncing_hosts",
        "redundancy",
        "timeout",
        "expires_at",
    ]
    list_filter = ["is_connected", "primary", "node", "redundancy", "conflate"]
    list_select_related = ["owner"]
    search_fields = ["durable_id", "owner__username", "id", "node", "primary"]
    ordering = ["durable_id"]
    date_hierarchy = "created_at"
    inlines = [InterestInline, CqInline, SizeReportInline]
    actions = ["close_clients"]

    @admin.display(description="state", ordering="is_connected")
    def state(self, obj: DurableClient) -> str:
        return "connected" if obj.is_connected else "disconnected"

    @admin.display(description="secondaries")
    def secondary_hosts(self, obj: DurableClient) -> str:
        return ", ".join(obj.secondaries)

    @admin.display(description="syncing")
    def syncing_hosts(self, obj: DurableClient) -> str:
        return ", ".join(obj.syncing)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # clients come from hello or REST

    def has_change_permission(
        self, request: HttpRequest, obj: DurableClient | None = None
    ) -> bool:
        return False  # placement and options belong to hello and replication

    def delete_through_service(self, request: HttpRequest, obj: DurableClient) -> None:
        if obj.durable_id is None:
            raise ValidationError(
                "a non-durable client goes when its socket closes; it cannot be closed"
            )
        services.client_delete(user=request.user, durable_id=obj.durable_id)

    @admin.action(
        permissions=["delete"],
        description="Close selected durable clients (drop their queues everywhere)",
    )
    def close_clients(
        self, request: HttpRequest, queryset: QuerySet[DurableClient]
    ) -> None:
        skipped = queryset.filter(durable_id__isnull=True).count()
        if skipped:
            self.message_user(
                request,
                f"skipped {skipped} non-durable client(s): they go with their socket",
                messages.WARNING,
            )

        def close(client: DurableClient) -> None:
            self.log_deletion_of(request, client)
            self.delete_through_service(request, client)

        self.call_each(
            request, queryset.exclude(durable_id__isnull=True), close, done="Closed"
        )


@admin.register(Interest)
class InterestAdmin(ServiceAdmin[Interest]):
    list_display = [
        "client",
        "region",
        "kind",
        "selector",
        "is_durable",
        "policy",
        "since_seq",
        "created_at",
    ]
    list_filter = ["kind", "is_durable", "policy", "region"]
    list_select_related = ["client"]
    search_fields = ["selector", "region", "client__durable_id"]
    ordering = ["client__durable_id", "region", "kind", "selector"]
    date_hierarchy = "created_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # interests come from register (websocket or REST)

    def has_change_permission(
        self, request: HttpRequest, obj: Interest | None = None
    ) -> bool:
        return False

    def delete_through_service(self, request: HttpRequest, obj: Interest) -> None:
        services.interest_delete(client=obj.client, pk=obj.pk)


@admin.register(ContinuousQuery)
class ContinuousQueryAdmin(ServiceAdmin[ContinuousQuery]):
    """Read-only but for closing, as an operator: ``cq_close`` with
    ``by_operator`` (a connected client gets ``cq_closed``; queued events
    lose the CQ's name, and one then wanted by nothing is dropped)."""

    list_display = [
        "client",
        "name",
        "region",
        "query",
        "durable",
        "created_at",
    ]
    list_filter = ["is_durable", "region", "created_at"]
    list_select_related = ["client"]
    search_fields = ["name", "region", "query", "client__durable_id"]
    ordering = ["client__durable_id", "name"]
    date_hierarchy = "created_at"
    actions = ["close_cqs"]

    @admin.display(description="durable", boolean=True, ordering="is_durable")
    def durable(self, obj: ContinuousQuery) -> bool:
        return obj.is_durable

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # CQs come from register_cq

    def has_change_permission(
        self, request: HttpRequest, obj: ContinuousQuery | None = None
    ) -> bool:
        return False  # a query is never edited in place: close it, register anew

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # "Close selected CQs" says it
        return actions

    def delete_through_service(
        self, request: HttpRequest, obj: ContinuousQuery
    ) -> None:
        services.cq_close(client=obj.client, name=obj.name, by_operator=True)

    @admin.action(permissions=["delete"], description="Close selected CQs")
    def close_cqs(
        self, request: HttpRequest, queryset: QuerySet[ContinuousQuery]
    ) -> None:
        def close(cq: ContinuousQuery) -> None:
            self.log_deletion_of(request, cq)
            self.delete_through_service(request, cq)

        self.call_each(request, queryset.select_related("client"), close, done="Closed")


@admin.register(LostQueue)
class LostQueueAdmin(admin.ModelAdmin[LostQueue]):
    """Read-only; deleting a row means its owner's next hello says -2, not -1."""

    list_display = ["durable_id", "owner", "reason", "lost_at"]
    list_filter = ["reason", "lost_at"]
    list_select_related = ["owner"]
    search_fields = ["durable_id", "owner__username"]
    ordering = ["-lost_at"]
    date_hierarchy = "lost_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(
        self, request: HttpRequest, obj: LostQueue | None = None
    ) -> bool:
        return False


@admin.register(QueueSizeReport)
class QueueSizeReportAdmin(ReadOnlyAdmin[QueueSizeReport]):
    list_display = ["client", "node", "size", "acked_through", "reported_at"]
    list_filter = ["node", "reported_at"]
    list_select_related = ["client"]
    search_fields = ["client__durable_id", "node"]
    ordering = ["client__durable_id", "node"]
    date_hierarchy = "reported_at"


@admin.register(ClientHistory)
class ClientHistoryAdmin(ReadOnlyAdmin[ClientHistory]):
    list_display = ["at", "durable_id", "kind", "node", "detail"]
    list_filter = ["kind", "node", "at"]
    search_fields = ["durable_id", "detail"]
    ordering = ["-at", "-id"]
    date_hierarchy = "at"


@admin.register(NodeSample)
class NodeSampleAdmin(ReadOnlyAdmin[NodeSample]):
    list_display = [
        "at",
        "node",
        "queued_events",
        "hosted_queues",
        "log_head",
        "delivered_total",
    ]
    list_filter = ["node"]
    ordering = ["-at"]
    date_hierarchy = "at"


@admin.register(ClientSample)
class ClientSampleAdmin(ReadOnlyAdmin[ClientSample]):
    list_display = ["at", "durable_id", "node", "size"]
    list_filter = ["node"]
    search_fields = ["durable_id"]
    ordering = ["-at"]
    date_hierarchy = "at"
