"""REST door onto regions and entries (docs/protocol.md, "REST API"); each
handler calls one service or selector and renders the result.

Entry keys arrive already decoded by the ``entrykey`` URL converter (a key
may hold "/", sent as %2F; see ``cache.api.urls``).
"""

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import permissions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from cache import selectors, services
from cache.api.serializers import (
    EntryEventSerializer,
    EntryPageSerializer,
    EntryPutResultSerializer,
    EntryPutSerializer,
    EntrySerializer,
    PutAllResultSerializer,
    PutAllSerializer,
    RegionCreateSerializer,
    RegionEventSerializer,
    RegionPageSerializer,
    RegionSerializer,
)
from cache.exceptions import NoSuchRegionError
from cache.group_commit import entry_put_together
from cache.validation import MAX_KEY_LEN, validate_key
from common.api import (
    PAGE_PARAMETERS,
    error_responses,
    keyset,
    name_parameter,
    page_params,
    paged_response,
)
from common.names import NAME_RE

REGION_PARAMETER = name_parameter("region", "the region's name")
KEY_PARAMETER = OpenApiParameter(
    "key",
    {"type": "string", "minLength": 1, "maxLength": MAX_KEY_LEN},
    OpenApiParameter.PATH,
    description="the entry key as one percent-encoded path segment: a `/` "
    "inside the key is sent as `%2F` (also encode `%`, `?`, `#`, spaces); no "
    "control characters (400)",
)


class IsOperator(permissions.BasePermission):
    """Operators (staff users) only."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return bool(request.user and request.user.is_staff)


class IsOperatorOrReadOnly(IsOperator):
    """Anyone authenticated may read; only operators may change regions."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if request.method in permissions.SAFE_METHODS:
            return bool(request.user and request.user.is_authenticated)
        return super().has_permission(request, view)


@extend_schema(parameters=[REGION_PARAMETER])
class RegionScopedView(APIView):
    """A view under ``regions/{region}/``.

    A name no region can have is a 404 before any query (PostgreSQL cannot
    even compare a string holding U+0000); checked after authentication and
    permissions, so those still answer first.
    """

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        name = kwargs["region"]
        if not NAME_RE.fullmatch(name):
            raise NoSuchRegionError(f"region {name!r} does not exist")


class RegionListView(APIView):
    permission_classes = [IsOperatorOrReadOnly]

    @extend_schema(
        parameters=PAGE_PARAMETERS,
        operation_id="regions_list",
        responses={200: RegionPageSerializer, **error_responses(400)},
        description="Regions by name, a page at a time.",
    )
    def get(self, request: Request) -> Response:
        page = page_params(request)
        rows = keyset(selectors.region_list(), "name", page)
        return paged_response(
            request,
            rows,
            page,
            cursor_of=lambda r: r.name,
            serialize=lambda rs: RegionSerializer(rs, many=True).data,
        )

    @extend_schema(
        request=RegionCreateSerializer,
        responses={
            201: RegionSerializer,
            **error_responses(403, 409, write=True, body=True),
        },
        description="Create a region (operators only): the only way a region "
        "comes to exist. 409 `region_exists` when it already does.",
    )
    def post(self, request: Request) -> Response:
        data = _valid(RegionCreateSerializer, request)
        region = services.region_create(**data)
        return Response(RegionSerializer(region).data, status=201)


class RegionDetailView(RegionScopedView):
    permission_classes = [IsOperatorOrReadOnly]

    @extend_schema(responses={200: RegionSerializer, **error_responses(404)})
    def get(self, request: Request, region: str) -> Response:
        return Response(RegionSerializer(selectors.region_get(name=region)).data)

    @extend_schema(
        responses={200: RegionEventSerializer, **error_responses(404, write=True)},
        description="Destroy a region and its entries (operators only): one "
        "`region_destroy` event. Interests in it stay.",
    )
    def delete(self, request: Request, region: str) -> Response:
        event = services.region_destroy(name=region)
        return Response(RegionEventSerializer(event).data)


class RegionClearView(RegionScopedView):
    permission_classes = [IsOperator]

    @extend_schema(
        request=None,
        responses={200: RegionEventSerializer, **error_responses(404, write=True)},
        description="Remove every entry of a region (operators only): one "
        "`region_clear` event.",
    )
    def post(self, request: Request, region: str) -> Response:
        event = services.region_clear(name=region)
        return Response(RegionEventSerializer(event).data)


class EntryListView(RegionScopedView):
    @extend_schema(
        parameters=[
            *PAGE_PARAMETERS,
            OpenApiParameter(
                "prefix",
                {"type": "string", "maxLength": MAX_KEY_LEN},
                description="only keys starting with this (no control characters)",
            ),
        ],
        operation_id="regions_entries_list",
        responses={200: EntryPageSerializer, **error_responses(400, 404)},
        description="The live entries of a region in key order, a page at a time.",
    )
    def get(self, request: Request, region: str) -> Response:
        page = page_params(request)
        prefix = request.query_params.get("prefix")
        rows = selectors.entry_list(
            region=region,
            after=page.after,
            prefix=_checked_key(prefix) if prefix else None,
            limit=page.limit + 1,
        )
        return paged_response(
            request,
            rows,
            page,
            cursor_of=lambda e: e.key,
            serialize=lambda es: EntrySerializer(es, many=True).data,
        )


@extend_schema(parameters=[KEY_PARAMETER])
class EntryDetailView(RegionScopedView):
    @extend_schema(
        responses={200: EntrySerializer, **error_responses(400, 404)},
        description="One entry; 404 `not_found` when absent or destroyed.",
    )
    def get(self, request: Request, region: str, key: str) -> Response:
        entry = selectors.entry_get(region=region, key=_checked_key(key))
        return Response(EntrySerializer(entry).data)

    @extend_schema(
        request=EntryPutSerializer,
        responses={
            200: EntryPutResultSerializer,
            **error_responses(404, write=True, body=True),
        },
        description="Create or update a key; 200 in both cases. The value is "
        "RFC 8259 JSON: no NaN/Infinity, U+0000 or lone surrogate, nesting at "
        "most 200 deep (else 400).",
    )
    def put(self, request: Request, region: str, key: str) -> Response:
        body = request.data
        if isinstance(body, dict) and "value" in body:
            # EntryPutSerializer's checks, done here: the body is an object
            # with a value (the parser only makes JSON, which the service
            # checks and encodes), without building and running the two
            # serializers on the hottest request of the API; a body without
            # a value still goes through one, for its exact 400.
            value = body["value"]
        else:
            value = _valid(EntryPutSerializer, request)["value"]
        written = entry_put_together(region=region, key=key, value=value)
        # EntryPutResultSerializer's shape, built directly.
        return Response(
            {
                "key": written.key,
                "value": value,
                "version": written.version,
                "event_id": written.event_id,
            }
        )

    @extend_schema(
        responses={200: EntryEventSerializer, **error_responses(400, 404, write=True)},
        description="Destroy a key (a `destroy` event); 404 when absent.",
    )
    def delete(self, request: Request, region: str, key: str) -> Response:
        _, event = services.entry_destroy(region=region, key=key)
        return Response(EntryEventSerializer(event).data)


@extend_schema(parameters=[KEY_PARAMETER])
class EntryInvalidateView(RegionScopedView):
    @extend_schema(
        request=None,
        responses={200: EntryEventSerializer, **error_responses(400, 404, write=True)},
        description="Set a key's value to null, keeping the key (an "
        "`invalidate` event); 404 when absent.",
    )
    def post(self, request: Request, region: str, key: str) -> Response:
        _, event = services.entry_invalidate(region=region, key=key)
        return Response(EntryEventSerializer(event).data)


class PutAllView(RegionScopedView):
    @extend_schema(
        request=PutAllSerializer,
        responses={
            200: PutAllResultSerializer,
            **error_responses(404, write=True, body=True),
        },
        description="Create or update many keys: all or nothing, one event each.",
    )
    def post(self, request: Request, region: str) -> Response:
        data = _valid(PutAllSerializer, request)
        events = services.entry_putall(region=region, entries=data["entries"])
        # PutAllResultSerializer's shape, built directly: a serializer per
        # event costs as much as writing the event.
        body = {
            "count": len(events),
            "events": [
                {"key": e.key, "version": e.version, "event_id": e.event_id}
                for e in events
            ],
        }
        return Response(body)


def _valid(serializer_class: Any, request: Request) -> dict[str, Any]:
    """Return the validated input of ``request`` (a 400 when it is invalid)."""
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _checked_key(key: str) -> str:
    """Refuse a key no entry can have before it reaches a query (PostgreSQL
    cannot even compare a string holding U+0000)."""
    return validate_key(key)
