"""Input and output shapes of the regions and entries API
(docs/protocol.md, "REST API").

Validation of names, keys and JSON values is the services' job; these
serializers only check that the fields are present and of the right kind.
Output fields are read-only, so the schema marks every one of them required.
"""

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from cache.models import Entry, Op, Region
from cache.validation import MAX_KEY_LEN
from common.api import NameField, StrictBooleanField, paged_serializer

MAX_PUTALL_KEYS = 10000


class RegionSerializer(serializers.ModelSerializer[Region]):
    class Meta:
        model = Region
        fields = ["name", "conflate_events", "created_at"]
        read_only_fields = fields


class RegionCreateSerializer(serializers.Serializer[Any]):
    # No trimming: the service decides whether a name is valid, as given.
    name = NameField(trim_whitespace=False)
    conflate_events = StrictBooleanField(default=False)


class EntrySerializer(serializers.ModelSerializer[Entry]):
    value = serializers.JSONField(
        allow_null=True, read_only=True, help_text="any JSON; null once invalidated"
    )

    class Meta:
        model = Entry
        fields = ["key", "value", "version", "updated_at"]
        read_only_fields = fields


class EntryPutSerializer(serializers.Serializer[Any]):
    value = serializers.JSONField(allow_null=True, help_text="any JSON value")


@extend_schema_field(
    {
        "type": "object",
        "minProperties": 1,
        "maxProperties": MAX_PUTALL_KEYS,
        "additionalProperties": {"nullable": True},
        "description": f"key (1-{MAX_KEY_LEN} characters) to its new JSON value",
    }
)
class EntriesField(serializers.DictField):
    """``{key: value}``; its keys and values are checked by the service.

    Only the object itself is checked here: DRF's per-value check encodes
    each value to JSON, which the service does anyway to store it (and
    refuses what it cannot store), so a second encode here is pure cost.
    """

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            self.fail("not_a_dict", input_type=type(data).__name__)
        return data


class PutAllSerializer(serializers.Serializer[Any]):
    entries = EntriesField(child=serializers.JSONField(allow_null=True))


class RegionEventSerializer(serializers.Serializer[Any]):
    """The answer to a region-wide write (destroy, clear)."""

    name = serializers.CharField(source="region", read_only=True)
    op = serializers.ChoiceField(
        choices=[Op.REGION_DESTROY.value, Op.REGION_CLEAR.value], read_only=True
    )
    event_id = serializers.CharField(read_only=True)


class EntryEventSerializer(serializers.Serializer[Any]):
    """The answer to a write of one key: its new version and event id."""

    key = serializers.CharField(read_only=True)
    version = serializers.IntegerField(read_only=True)
    event_id = serializers.CharField(read_only=True)


class EntryPutResultSerializer(serializers.Serializer[Any]):
    """The answer to a PUT: the key as written, its version and event id."""

    key = serializers.CharField(read_only=True)
    value = serializers.JSONField(allow_null=True, read_only=True)
    version = serializers.IntegerField(read_only=True)
    event_id = serializers.CharField(read_only=True)


class PutAllResultSerializer(serializers.Serializer[Any]):
    count = serializers.IntegerField(read_only=True)
    events = EntryEventSerializer(many=True, read_only=True)


RegionPageSerializer = paged_serializer("RegionPage", RegionSerializer())
EntryPageSerializer = paged_serializer("EntryPage", EntrySerializer())
