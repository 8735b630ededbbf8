"""Admin for durable clients and interests; actions call the services."""

from django.contrib import admin, messages

from clients import services
from clients.models import DurableClient, Interest, LostQueue


class InterestInline(admin.TabularInline):
    model = Interest
    extra = 0
    fields = ["region", "kind", "selector", "is_durable", "policy", "since_seq"]
    readonly_fields = [
        "region",
        "kind",
        "selector",
        "is_durable",
        "policy",
        "since_seq",
    ]


@admin.register(DurableClient)
class DurableClientAdmin(admin.ModelAdmin):
    list_display = [
        "durable_id",
        "owner",
        "is_connected",
        "node",
        "primary",
        "expires_at",
    ]
    list_filter = ["is_connected", "primary"]
    search_fields = ["durable_id", "owner__username"]
    readonly_fields = [
        "id",
        "durable_id",
        "owner",
        "is_connected",
        "node",
        "channel_name",
        "primary",
        "secondaries",
        "created_at",
        "connected_at",
        "disconnected_at",
        "expires_at",
    ]
    inlines = [InterestInline]
    actions = ["close_clients"]

    @admin.action(permissions=["delete"], description="Close: drop queue everywhere")
    def close_clients(self, request, queryset):
        count = 0
        for client in queryset.exclude(durable_id__isnull=True):
            services.client_delete(user=request.user, durable_id=client.durable_id)
            count += 1
        self.message_user(
            request, f"closed {count} durable client(s)", messages.SUCCESS
        )


@admin.register(LostQueue)
class LostQueueAdmin(admin.ModelAdmin):
    list_display = ["durable_id", "reason", "lost_at"]
    search_fields = ["durable_id"]
