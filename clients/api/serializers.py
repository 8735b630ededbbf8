"""Input and output shapes of the durable clients and nodes API
(docs/protocol.md, "REST API")."""

from typing import Any

from django.conf import settings
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from cache import selectors as cache_selectors
from cache.models import Op
from cache.validation import MAX_KEY_LEN
from clients import selectors
from clients.exceptions import BadRegexError
from clients.matching import (
    MAX_KEYS,
    MAX_PATTERN,
    parse_bool,
    parse_policy,
    parse_selector,
)
from clients.models import DurableClient, Interest, InterestKind, Policy
from common.api import NameField, paged_serializer

NO_QUEUE = -2


class GapSerializer(serializers.Serializer[dict[str, object]]):
    """A client's gap: its queue overflowed, and it resyncs by key after
    its next ready (docs/protocol.md, "Bounded queues, gaps and resync")."""

    since = serializers.IntegerField(
        help_text="the seq just before the oldest event dropped: every change "
        "after it may be missing"
    )
    dropped = serializers.IntegerField(help_text="queued events the overflow removed")
    reason = serializers.ChoiceField(choices=["overflow"])


class DurableClientSerializer(serializers.ModelSerializer[DurableClient]):
    """A durable client with its placement and queue sizes.

    ``pending_events`` is the size of the primary's queue (-2 without one).
    """

    durable_id = serializers.CharField(read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    state = serializers.SerializerMethodField()
    secondaries = serializers.ListField(
        child=serializers.CharField(), read_only=True, help_text="secondary nodes"
    )
    syncing = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="the secondaries whose copy is still being filled (only a "
        "complete copy can take over)",
    )
    queue_sizes = serializers.SerializerMethodField()
    gap = serializers.SerializerMethodField(
        help_text="null, or {since, dropped, reason}: the queue overflowed and "
        "the client resyncs by key after its next ready"
    )
    pending_events = serializers.SerializerMethodField()
    expires_at = serializers.DateTimeField(
        allow_null=True, read_only=True, help_text="null while connected"
    )

    class Meta:
        model = DurableClient
        fields = [
            "durable_id",
            "owner",
            "state",
            "node",
            "primary",
            "secondaries",
            "syncing",
            "queue_sizes",
            "pending_events",
            "timeout",
            "redundancy",
            "max_queued",
            "gap",
            "expires_at",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.ChoiceField(choices=["connected", "disconnected"]))
    def get_state(self, obj: DurableClient) -> str:
        return "connected" if obj.is_connected else "disconnected"

    @extend_schema_field(serializers.DictField(child=serializers.IntegerField()))
    def get_queue_sizes(self, obj: DurableClient) -> dict[str, int]:
        return self._sizes(obj)

    @extend_schema_field(GapSerializer(allow_null=True))
    def get_gap(self, obj: DurableClient) -> dict[str, object] | None:
        return obj.gap

    def get_pending_events(self, obj: DurableClient) -> int:
        if obj.gap_since is not None:
            return 0
        return self._sizes(obj).get(obj.primary, NO_QUEUE)

    def _sizes(self, obj: DurableClient) -> dict[str, int]:
        cache = self.context.setdefault("queue_sizes", {})
        if obj.pk not in cache:
            own = settings.DURABLECACHE_NODE_NAME
            cache[obj.pk] = selectors.queue_sizes_of(obj, own_node=own)
        return dict(cache[obj.pk])

    def to_representation(self, instance: DurableClient) -> dict[str, Any]:
        data = super().to_representation(instance)
        if instance.is_connected:
            data["expires_at"] = None
        return data


class InterestSerializer(serializers.ModelSerializer[Interest]):
    """One interest row, its selector rendered as in the websocket frame:
    exactly one of ``keys`` (one key per row), ``regex``, ``all_keys``."""

    # Not read-only: the schema would mark them required; one is present.
    keys = serializers.ListField(child=serializers.CharField(), required=False)
    regex = serializers.CharField(required=False)
    all_keys = serializers.BooleanField(required=False)
    durable = serializers.BooleanField(source="is_durable", read_only=True)

    class Meta:
        model = Interest
        fields = [
            "id",
            "region",
            "kind",
            "keys",
            "regex",
            "all_keys",
            "durable",
            "policy",
        ]
        read_only_fields = fields

    def to_representation(self, instance: Interest) -> dict[str, Any]:
        selectors: dict[str, dict[str, Any]] = {
            InterestKind.KEY: {"keys": [instance.selector]},
            InterestKind.REGEX: {"regex": instance.selector},
            InterestKind.ALL_KEYS: {"all_keys": True},
        }
        selector = selectors[InterestKind(instance.kind)]
        return {
            "id": instance.pk,
            "region": instance.region,
            "kind": instance.kind,
            **selector,
            "durable": instance.is_durable,
            "policy": instance.policy,
        }


@extend_schema_field(
    {
        "type": "array",
        "items": {"type": "string", "minLength": 1, "maxLength": MAX_KEY_LEN},
        "minItems": 1,
        "maxItems": MAX_KEYS,
    }
)
class _KeysField(serializers.ListField):
    pass


@extend_schema_field({"type": "string", "minLength": 1, "maxLength": MAX_PATTERN})
class _RegexField(serializers.JSONField):
    pass


@extend_schema_field({"type": "boolean", "enum": [True]})
class _AllKeysField(serializers.JSONField):
    pass


@extend_schema_field({"type": "boolean", "default": False})
class _DurableField(serializers.JSONField):
    pass


@extend_schema_field(
    {"type": "string", "enum": list(Policy.values), "default": Policy.KEYS_VALUES}
)
class _PolicyField(serializers.JSONField):
    pass


class InterestCreateSerializer(serializers.Serializer[Any]):
    """The frame's selector fields: region, one of keys/regex/all_keys, ..."""

    region = NameField(trim_whitespace=False)
    # Loosely typed on purpose: the values are checked by the same parsers
    # as the register_interest frame (no coercion of "true" or 5 here); the
    # schema shows what those parsers accept.
    keys = _KeysField(child=serializers.JSONField(), required=False, allow_null=True)
    regex = _RegexField(required=False, allow_null=True)
    all_keys = _AllKeysField(required=False, allow_null=True)
    durable = _DurableField(required=False, allow_null=True)
    policy = _PolicyField(required=False, allow_null=True)

    def validate_regex(self, value: Any) -> Any:
        # compile_regex is lru_cached: an unhashable pattern would raise
        # TypeError there (a 500) instead of bad_regex.
        if value is not None and not isinstance(value, str):
            raise BadRegexError("regex must be a string")
        # No key holds U+0000, and PostgreSQL cannot store it (a 503).
        if isinstance(value, str) and "\x00" in value:
            raise BadRegexError("regex must not contain U+0000")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # The websocket door's own parsers, so both doors accept the same;
        # the region is checked here so a refused request creates no client.
        selector = parse_selector(attrs)
        cache_selectors.region_get(name=attrs["region"])
        return {
            "region": attrs["region"],
            "selector": selector,
            "is_durable": parse_bool(attrs.get("durable"), field="durable"),
            "policy": parse_policy(attrs.get("policy")),
        }


def _one_selector(**selectors: dict[str, Any]) -> list[dict[str, Any]]:
    """JSON Schema ``oneOf`` branches: exactly one selector present, not null."""
    return [
        {"required": [name], "properties": {name: schema}}
        for name, schema in selectors.items()
    ]


class InterestSchema(OpenApiSerializerExtension):
    """An interest row holds exactly one of ``keys`` (a single key),
    ``regex``, ``all_keys``."""

    target_class = InterestSerializer

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema = super().map_serializer(auto_schema, direction)
        schema["properties"]["keys"].update(minItems=1, maxItems=1)
        schema["oneOf"] = _one_selector(
            keys={"type": "array"},
            regex={"type": "string"},
            all_keys={"type": "boolean", "enum": [True]},
        )
        return dict(schema)


class InterestCreateSchema(OpenApiSerializerExtension):
    """Exactly one of ``keys``, ``regex``, ``all_keys`` is given (null counts
    as absent), as in the ``register_interest`` frame."""

    target_class = InterestCreateSerializer

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema = super().map_serializer(auto_schema, direction)
        schema["oneOf"] = _one_selector(
            keys={"type": "array"},
            regex={"type": "string"},
            all_keys={"type": "boolean"},
        )
        return dict(schema)


class EventSerializer(serializers.Serializer[Any]):
    """A queued event as the websocket sends it (without the session fields)."""

    id = serializers.CharField(
        read_only=True, help_text="the event's cluster-wide id (32 hex characters)"
    )
    seq = serializers.IntegerField(read_only=True)
    region = serializers.CharField(read_only=True)
    key = serializers.CharField(
        allow_null=True, read_only=True, help_text="null for region operations"
    )
    op = serializers.ChoiceField(choices=Op.choices, read_only=True)
    value = serializers.JSONField(allow_null=True, read_only=True)
    version = serializers.IntegerField(allow_null=True, read_only=True)
    ts = serializers.DateTimeField(read_only=True, help_text="UTC, ending in Z")


class NodeSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(read_only=True)
    url = serializers.CharField(read_only=True)
    status = serializers.ChoiceField(choices=["up", "down"], read_only=True)
    last_heartbeat = serializers.DateTimeField(read_only=True)
    primary_queues = serializers.IntegerField(read_only=True)
    secondary_queues = serializers.IntegerField(read_only=True)
    queued_events = serializers.IntegerField(read_only=True)


class CqSerializer(serializers.Serializer[Any]):
    """A client's continuous query (docs/protocol.md, continuous queries)."""

    name = serializers.CharField(read_only=True)
    region = serializers.CharField(read_only=True)
    query = serializers.CharField(read_only=True)
    durable = serializers.BooleanField(source="is_durable", read_only=True)
    created_at = serializers.DateTimeField(read_only=True)


class CqCreateSerializer(serializers.Serializer[Any]):
    """The body of a CQ's registration: the ``register_cq`` frame's fields.

    Describes the body for the schema; the fields are judged by the
    service, as the frame's are (bad_field, no_such_region, bad_query in
    that order), so a number given as ``query`` is a bad field, not text.
    """

    name = serializers.CharField(help_text="1-128 characters `[A-Za-z0-9._:-]`")
    region = serializers.CharField()
    query = serializers.CharField(help_text="docs/cq.md")
    durable = serializers.BooleanField(required=False, default=False)


DurableClientPageSerializer = paged_serializer(
    "DurableClientPage", DurableClientSerializer()
)
InterestPageSerializer = paged_serializer("InterestPage", InterestSerializer())
EventPageSerializer = paged_serializer("EventPage", EventSerializer())
NodePageSerializer = paged_serializer("NodePage", NodeSerializer())
CqPageSerializer = paged_serializer("CqPage", CqSerializer())
