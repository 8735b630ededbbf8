"""Read-only admin for this node's store (database alias ``node``).

``queues.routers.NodeStoreRouter`` sends these reads to the node store of
the process serving the page, so the pages show the queues *this* node
hosts; other nodes' copies are in their own stores (the dashboard and
``GET /api/v1/nodes/`` show every node's totals). Only fan-out, acks and
copies write these rows.
"""

from typing import Any, Generic

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse

from cache.admin import M, ReadOnlyAdmin
from queues.models import FanoutCursor, QueuedEvent, QueueEntry, QueueState


class NodeStoreAdmin(ReadOnlyAdmin[M], Generic[M]):
    """Says in the changelist title whose store is shown."""

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        node = settings.DURABLECACHE_NODE_NAME
        title = (
            f"{str(self.opts.verbose_name_plural).capitalize()} in the store of node "
            f"{node} (this node only; other hosts keep their own copies)"
        )
        return super().changelist_view(
            request, {"title": title, **(extra_context or {})}
        )


@admin.register(QueueState)
class QueueStateAdmin(NodeStoreAdmin[QueueState]):
    list_display = [
        "client_id",
        "durable_id",
        "size",
        "last_seq",
        "acked_through",
        "delivered_through",
        "is_synced",
        "copy_source",
        "created_at",
    ]
    list_filter = ["is_synced", "conflate", "copy_source"]
    search_fields = ["durable_id", "client_id"]
    ordering = ["durable_id"]
    date_hierarchy = "created_at"


@admin.register(QueueEntry)
class QueueEntryAdmin(NodeStoreAdmin[QueueEntry]):
    list_display = ["queue", "seq", "through", "op", "region", "key", "conflates"]
    list_filter = ["op", "region", "conflates"]
    list_select_related = ["queue"]
    search_fields = ["queue__durable_id", "region", "key"]
    ordering = ["queue", "seq"]


@admin.register(QueuedEvent)
class QueuedEventAdmin(NodeStoreAdmin[QueuedEvent]):
    list_display = ["seq", "op", "region", "key", "version", "ts"]
    list_filter = ["op", "region", "ts"]
    search_fields = ["region", "key", "event_id"]
    ordering = ["seq"]
    date_hierarchy = "ts"


@admin.register(FanoutCursor)
class FanoutCursorAdmin(NodeStoreAdmin[FanoutCursor]):
    list_display = ["node", "fanout_through", "updated_at"]
    search_fields = ["node"]
    list_filter = ["updated_at"]
    ordering = ["node"]
