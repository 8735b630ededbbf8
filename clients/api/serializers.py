"""Input and output shapes of the durable clients and nodes API (DESIGN §4)."""

from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from clients import selectors
from clients.exceptions import BadRegexError
from clients.matching import parse_bool, parse_policy, parse_selector
from clients.models import DurableClient, Interest, InterestKind
from durablecache.api import paged_serializer
from durablecache.cache import selectors as cache_selectors

NO_QUEUE = -2


class DurableClientSerializer(serializers.ModelSerializer[DurableClient]):
    """A durable client with its placement and queue sizes.

    ``pending_events`` is the size of the primary's queue (-2 without one).
    """

    owner = serializers.CharField(source="owner.username")
    state = serializers.SerializerMethodField()
    queue_sizes = serializers.SerializerMethodField()
    pending_events = serializers.SerializerMethodField()

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
            "expires_at",
        ]

    def get_state(self, obj: DurableClient) -> str:
        return "connected" if obj.is_connected else "disconnected"

    @extend_schema_field(serializers.DictField(child=serializers.IntegerField()))
    def get_queue_sizes(self, obj: DurableClient) -> dict[str, int]:
        return self._sizes(obj)

    def get_pending_events(self, obj: DurableClient) -> int:
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
    """One interest row, its selector rendered as in the websocket frame."""

    keys = serializers.ListField(child=serializers.CharField(), required=False)
    regex = serializers.CharField(required=False)
    all_keys = serializers.BooleanField(required=False)
    durable = serializers.BooleanField(source="is_durable")

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


class InterestCreateSerializer(serializers.Serializer[Any]):
    """The frame's selector fields: region, one of keys/regex/all_keys, ..."""

    region = serializers.CharField(trim_whitespace=False)
    # Loosely typed on purpose: the values are checked by the same parsers
    # as the register_interest frame (no coercion of "true" or 5 here).
    keys = serializers.ListField(
        child=serializers.JSONField(), required=False, allow_null=True
    )
    regex = serializers.JSONField(required=False, allow_null=True)
    all_keys = serializers.JSONField(required=False, allow_null=True)
    durable = serializers.JSONField(required=False, allow_null=True)
    policy = serializers.JSONField(required=False, allow_null=True)

    def validate_regex(self, value: Any) -> Any:
        # compile_regex is lru_cached: an unhashable pattern would raise
        # TypeError there (a 500) instead of bad_regex.
        if value is not None and not isinstance(value, str):
            raise BadRegexError("regex must be a string")
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


class EventSerializer(serializers.Serializer[Any]):
    """A queued event as the websocket sends it (without the session fields)."""

    id = serializers.CharField()
    seq = serializers.IntegerField()
    region = serializers.CharField()
    key = serializers.CharField(allow_null=True)
    op = serializers.CharField()
    value = serializers.JSONField(allow_null=True)
    version = serializers.IntegerField(allow_null=True)
    ts = serializers.CharField()


class NodeSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    url = serializers.CharField()
    status = serializers.ChoiceField(choices=["up", "down"])
    last_heartbeat = serializers.DateTimeField()
    primary_queues = serializers.IntegerField()
    secondary_queues = serializers.IntegerField()
    queued_events = serializers.IntegerField()


class CqSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    region = serializers.CharField()
    query = serializers.CharField()
    durable = serializers.BooleanField()


DurableClientPageSerializer = paged_serializer(
    "DurableClientPage", DurableClientSerializer()
)
InterestPageSerializer = paged_serializer("InterestPage", InterestSerializer())
EventPageSerializer = paged_serializer("EventPage", EventSerializer())
NodePageSerializer = paged_serializer("NodePage", NodeSerializer())
CqPageSerializer = paged_serializer("CqPage", CqSerializer())
