"""REST door onto durable clients, their interests and queues, and nodes
(docs/protocol.md, "REST API"). Each handler looks the client up (as
DRF's get_object would) and calls one service or selector.

A plain user sees only the clients it owns; another owner's client is a
404, exactly like an unknown one. Operators (staff) see every client.
"""

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from clients import selectors, services
from clients.api.serializers import (
    CqCreateSerializer,
    CqPageSerializer,
    CqSerializer,
    DurableClientPageSerializer,
    DurableClientSerializer,
    EventPageSerializer,
    InterestCreateSerializer,
    InterestPageSerializer,
    InterestSerializer,
    NodePageSerializer,
    NodeSerializer,
)
from clients.exceptions import UnknownClientError
from clients.models import DurableClient
from common.api import (
    PAGE_PARAMETERS,
    error_responses,
    keyset,
    name_parameter,
    page_params,
    paged_response,
)
from common.errors import NotFoundError
from common.names import NAME_RE
from queues.selectors import entry_to_event

DURABLE_ID_PARAMETER = name_parameter("durable_id", "the client's durable id")


def _checked_id(durable_id: str) -> str:
    """Refuse an id no client can have before it reaches a query (PostgreSQL
    cannot even compare a string holding U+0000): a 404, like any unknown id."""
    if not NAME_RE.fullmatch(durable_id):
        raise UnknownClientError(f"no durable client {durable_id!r}")
    return durable_id


def _client(request: Request, durable_id: str) -> DurableClient:
    return selectors.client_visible_to(
        user=request.user, durable_id=_checked_id(durable_id)
    )


def _own_node() -> str:
    return settings.DURABLECACHE_NODE_NAME


class ClientListView(APIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        operation_id="clients_list",
        responses={200: DurableClientPageSerializer, **error_responses(400)},
        description="Durable clients by durable id (a plain user sees its own).",
    )
    def get(self, request: Request) -> Response:
        page = page_params(request)
        rows = keyset(selectors.client_list(user=request.user), "durable_id", page)
        return paged_response(
            request,
            rows,
            page,
            cursor_of=lambda c: c.durable_id,
            serialize=lambda cs: DurableClientSerializer(cs, many=True).data,
        )


@extend_schema(parameters=[DURABLE_ID_PARAMETER])
class ClientDetailView(APIView):
    @extend_schema(responses={200: DurableClientSerializer, **error_responses(404)})
    def get(self, request: Request, durable_id: str) -> Response:
        return Response(DurableClientSerializer(_client(request, durable_id)).data)

    @extend_schema(
        responses={204: None, **error_responses(404, write=True)},
        description="Close the durable client for good: its queue goes on every "
        "host and its socket is closed with 4410. Again: 404.",
    )
    def delete(self, request: Request, durable_id: str) -> Response:
        services.client_delete(user=request.user, durable_id=_checked_id(durable_id))
        return Response(status=204)


@extend_schema(parameters=[DURABLE_ID_PARAMETER])
class InterestListView(APIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        operation_id="clients_interests_list",
        responses={200: InterestPageSerializer, **error_responses(400, 404)},
    )
    def get(self, request: Request, durable_id: str) -> Response:
        page = page_params(request)
        interests = selectors.interest_list(client=_client(request, durable_id))
        rows = keyset(interests, "id", page, numeric=True)
        return paged_response(
            request,
            rows,
            page,
            cursor_of=lambda i: i.pk,
            serialize=lambda rs: InterestSerializer(rs, many=True).data,
        )

    @extend_schema(
        request=InterestCreateSerializer,
        responses={
            201: InterestPageSerializer,
            **error_responses(404, write=True, body=True),
        },
        description="Register interest, validated like the `register_interest` "
        "frame: exactly one of `keys`, `regex`, `all_keys` (400 otherwise); no "
        "image is sent. An unknown durable id (1-128 characters "
        "`[A-Za-z0-9._:-]`, else 400) is created, owned by the caller and "
        "disconnected, its timeout running; another owner's is a 404, as is an "
        "unknown region (`no_such_region`). Answers the interest rows (one per "
        "key) as a page with `next` null.",
    )
    def post(self, request: Request, durable_id: str) -> Response:
        services.client_check_claim(user=request.user, durable_id=durable_id)
        serializer = InterestCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        client = services.client_ensure_offline(
            user=request.user, durable_id=durable_id
        )
        rows = services.interest_register(client=client, **serializer.validated_data)
        body = {"results": InterestSerializer(rows, many=True).data, "next": None}
        return Response(body, status=201)


@extend_schema(
    parameters=[
        DURABLE_ID_PARAMETER,
        OpenApiParameter(
            "id",
            {"type": "integer", "minimum": 0},
            OpenApiParameter.PATH,
            description="the interest's `id`",
        ),
    ]
)
class InterestDetailView(APIView):
    @extend_schema(
        responses={204: None, **error_responses(404, write=True)},
        description="Remove one interest row; queued events stay.",
    )
    def delete(self, request: Request, durable_id: str, pk: int) -> Response:
        services.interest_delete(client=_client(request, durable_id), pk=pk)
        return Response(status=204)


@extend_schema(parameters=[DURABLE_ID_PARAMETER])
class QueueView(APIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        operation_id="clients_queue_list",
        responses={200: EventPageSerializer, **error_responses(400, 404, 409)},
        description="Peek at the pending events, in seq order. Answered by the "
        "client's primary node only; elsewhere 409 `conflict` names the primary.",
    )
    def get(self, request: Request, durable_id: str) -> Response:
        page = page_params(request)
        rows = selectors.client_queue_page(
            client=_client(request, durable_id),
            own_node=_own_node(),
            after=page.after_int(),
            limit=page.limit + 1,
        )
        return paged_response(
            request,
            rows,
            page,
            cursor_of=lambda e: e.seq,
            serialize=lambda es: [entry_to_event(e) for e in es],
        )


@extend_schema(parameters=[DURABLE_ID_PARAMETER])
class CqListView(APIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        operation_id="clients_cqs_list",
        responses={200: CqPageSerializer, **error_responses(400, 404)},
        description="The client's continuous queries, by name.",
    )
    def get(self, request: Request, durable_id: str) -> Response:
        page = page_params(request)
        cqs = selectors.cq_list(client=_client(request, durable_id))
        rows = keyset(cqs, "name", page)
        return paged_response(
            request,
            rows,
            page,
            cursor_of=lambda q: q.name,
            serialize=lambda qs: CqSerializer(qs, many=True).data,
        )

    @extend_schema(
        request=CqCreateSerializer,
        responses={201: CqSerializer, **error_responses(404, write=True, body=True)},
        description="Register a continuous query, judged like the `register_cq` "
        "frame (400 `bad_field`, 404 `no_such_region`, 400 `bad_query` with the "
        "query's line and column, in that order); no image is sent. The same "
        "definition again is idempotent; another one under the name is 400 "
        "`bad_field`. An unknown durable id is created as for interests, owned "
        "by the caller and disconnected; another owner's is a 404 whatever the "
        "body.",
    )
    def post(self, request: Request, durable_id: str) -> Response:
        services.client_check_claim(user=request.user, durable_id=durable_id)
        body = request.data if isinstance(request.data, dict) else {}
        fields = {f: body.get(f) for f in ("name", "region", "query", "durable")}
        # Judged before the client may be created: a refused body changes nothing.
        services.cq_check(**fields, client_is_durable=True)
        client = services.client_ensure_offline(
            user=request.user, durable_id=durable_id
        )
        cq = services.cq_register(client=client, **fields)
        return Response(CqSerializer(cq).data, status=201)


@extend_schema(
    parameters=[
        DURABLE_ID_PARAMETER,
        OpenApiParameter(
            "name", str, OpenApiParameter.PATH, description="the query's name"
        ),
    ]
)
class CqDetailView(APIView):
    @extend_schema(
        responses={204: None, **error_responses(404, write=True)},
        description="Close a continuous query (404 for a name the client does "
        "not hold). A connected client gets an unsolicited `cq_closed`.",
    )
    def delete(self, request: Request, durable_id: str, name: str) -> Response:
        client = _client(request, durable_id)
        if not services.cq_close(client=client, name=name, by_operator=True):
            raise NotFoundError(f"no continuous query {name!r}")
        return Response(status=204)


class NodeListView(APIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        operation_id="nodes_list",
        responses={200: NodePageSerializer, **error_responses(400)},
        description="Nodes by name; `status` is `up` while the heartbeat is "
        "younger than DURABLECACHE_NODE_TIMEOUT_S and the node is not stopping.",
    )
    def get(self, request: Request) -> Response:
        page = page_params(request)
        rows = selectors.node_overview(
            own_node=_own_node(), after=page.after, limit=page.limit + 1
        )
        return paged_response(
            request,
            rows,
            page,
            cursor_of=lambda n: n["name"],
            serialize=lambda ns: NodeSerializer(ns, many=True).data,
        )
