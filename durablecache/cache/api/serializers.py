"""Input and output shapes of the regions and entries API (DESIGN §4).

Validation of names, keys and JSON values is the services' job; these
serializers only check that the fields are present and of the right kind.
"""

from typing import Any

from rest_framework import serializers

from durablecache.api import paged_serializer
from durablecache.cache.models import Entry, Region


class RegionSerializer(serializers.ModelSerializer[Region]):
    class Meta:
        model = Region
        fields = ["name", "conflate_events", "created_at"]


class RegionCreateSerializer(serializers.Serializer[Any]):
    # No trimming: the service decides whether a name is valid, as given.
    name = serializers.CharField(trim_whitespace=False, allow_blank=True)
    conflate_events = serializers.BooleanField(default=False)


class EntrySerializer(serializers.ModelSerializer[Entry]):
    class Meta:
        model = Entry
        fields = ["key", "value", "version", "updated_at"]


class EntryPutSerializer(serializers.Serializer[Any]):
    value = serializers.JSONField(allow_null=True)


class PutAllSerializer(serializers.Serializer[Any]):
    entries = serializers.DictField(child=serializers.JSONField(allow_null=True))


class RegionEventSerializer(serializers.Serializer[Any]):
    """The answer to a region-wide write (destroy, clear)."""

    name = serializers.CharField(source="region")
    op = serializers.CharField()
    event_id = serializers.CharField()


class EntryEventSerializer(serializers.Serializer[Any]):
    """The answer to a write of one key: its new version and event id."""

    key = serializers.CharField()
    version = serializers.IntegerField()
    event_id = serializers.CharField()


class EntryPutResultSerializer(serializers.Serializer[Any]):
    """The answer to a PUT: the key as written, its version and event id."""

    key = serializers.CharField()
    value = serializers.JSONField(allow_null=True)
    version = serializers.IntegerField()
    event_id = serializers.CharField()


class PutAllResultSerializer(serializers.Serializer[Any]):
    count = serializers.IntegerField()
    events = EntryEventSerializer(many=True)


RegionPageSerializer = paged_serializer("RegionPage", RegionSerializer())
EntryPageSerializer = paged_serializer("EntryPage", EntrySerializer())
