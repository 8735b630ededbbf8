"""Admin for regions, entries, events and nodes (read-mostly)."""

from django.contrib import admin

from durablecache.cache.models import Entry, Event, Node, Region


@admin.register(Region)
class RegionAdmin(admin.ModelAdmin):
    list_display = ["name", "conflate_events", "created_at"]
    search_fields = ["name"]
    list_filter = ["conflate_events"]

    def has_change_permission(self, request, obj=None):
        return False  # writes go through services (REST / dashboard)


@admin.register(Entry)
class EntryAdmin(admin.ModelAdmin):
    list_display = ["region", "key", "version", "is_destroyed", "updated_at"]
    list_filter = ["region", "is_destroyed"]
    search_fields = ["key"]
    readonly_fields = [
        "region",
        "key",
        "value",
        "version",
        "is_destroyed",
        "updated_at",
    ]

    def has_add_permission(self, request):
        return False


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ["seq", "event_id", "region", "key", "op", "version", "ts"]
    list_filter = ["op", "region"]
    search_fields = ["event_id", "key"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "url", "started_at", "last_heartbeat", "is_draining"]
    readonly_fields = [
        "name",
        "url",
        "started_at",
        "last_heartbeat",
        "is_draining",
        "fanout_through",
    ]
