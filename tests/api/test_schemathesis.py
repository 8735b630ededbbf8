"""Schemathesis against the served OpenAPI schema, in-process over ASGI.

Every operation of ``GET /api/v1/schema/`` gets generated requests (valid
and invalid ones, plus the boundary cases of schemathesis' coverage phase),
sent with an operator's token to the real ASGI application (the one Daphne
serves, so a key's ``%2F`` goes through the same path handling), and every
answer is checked: no 5xx, a status the operation documents, the documented
content type and headers, a body matching the documented schema, 405 for a
method an operation does not list, 401 without the token, and invalid input
rejected.

The database starts each operation with a region, entries (one key holding
a ``/``), a durable client with an interest and a queue, and a node; path
parameters and a body's ``region`` are often swapped for those names, so the
requests reach the views' success paths and not only their 404s.
"""

from typing import Any
from urllib.parse import quote

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)

from cache import services as cache_services
from clients import fanout
from clients import services as client_services
from clients.matching import parse_selector
from durablecache.asgi import application

# Loaded at collection, before pytest-django allows the host "testserver".
schema = schemathesis.openapi.from_asgi(
    "/api/v1/schema/?format=json", application, headers={"Host": "localhost"}
)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    unsupported_method,
    ignored_auth,
    negative_data_rejection,
]
MAX_EXAMPLES = 20  # per operation, plus the coverage phase's own cases

# Names that exist in the seeded database, by path parameter; "id" (the
# interest's primary key) is filled in by the fixture.
KNOWN: dict[str, list[Any]] = {
    "region": ["prices"],
    "key": ["EUR", "a/b"],
    "durable_id": ["orders-app"],
    "name": ["q"],
}


@schema.hook
def flatmap_path_parameters(context: Any, path_parameters: Any) -> Any:
    """Draw each path parameter as generated or as a known name."""
    if not path_parameters:
        return st.just(path_parameters)
    return st.fixed_dictionaries(
        {
            name: st.sampled_from([value, *KNOWN.get(name, [])])
            for name, value in path_parameters.items()
        }
    )


@schema.hook
def flatmap_body(context: Any, body: Any) -> Any:
    """Draw a body's ``region`` as generated or as the known region."""
    if not isinstance(body, dict) or "region" not in body:
        return st.just(body)
    return st.sampled_from([body, {**body, "region": KNOWN["region"][0]}])


@pytest.fixture
def seeded(operator):
    """The region, entries, client, interest, queue and node of the run."""
    cache_services.region_create(name="prices")
    client = client_services.client_ensure_offline(
        user=operator, durable_id="orders-app"
    )
    [interest] = client_services.interest_register(
        client=client,
        region="prices",
        selector=parse_selector({"all_keys": True}),
        is_durable=True,
        policy="keys_values",
    )
    KNOWN["id"] = [interest.pk]
    cache_services.entry_putall(
        region="prices", entries={"EUR": 1.08, "USD": None, "a/b": {"x": [1]}}
    )
    cache_services.entry_invalidate(region="prices", key="USD")
    fanout.fanout_node("node-1")
    cache_services.node_register(name="node-1", url="http://127.0.0.1:8000")


# --- Generated requests -----------------------------------------------------


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@pytest.mark.django_db(transaction=True, databases=["default", "node"])
def test_api_conforms_to_its_schema(case, operator_token, seeded):
    case.call_and_validate(
        headers={"Authorization": f"Token {operator_token}"}, checks=CHECKS
    )


# --- Hand-picked path values, through every operation ------------------------
#
# Values random generation seldom draws but that have broken views before:
# PostgreSQL refuses to compare a string holding U+0000 (a 503 instead of a
# 404), an id past 64 bits, a "/" inside a segment, dot segments.

EDGE_VALUES: dict[str, list[Any]] = {
    "id": [0, 2**63, 10**30],
    "key": ["a\x00b", "\x1f", "a/b", "/", ".", "..", "%2F", "?#", "é€😀", "x" * 513],
}
EDGE_STRINGS = ["\x00", "a\x00b", "\x1f", "é", "x" * 129, "%", "a/b", ".."]
BODIES = {
    "PUT /api/v1/regions/{region}/entries/{key}/": {"value": [1, {"a": None}]},
    "POST /api/v1/regions/{region}/putall/": {"entries": {"k": 1, "a/b": 2}},
    "POST /api/v1/clients/{durable_id}/interests/": {
        "region": "prices",
        "keys": ["EUR", "a/b"],
        "durable": True,
    },
    "POST /api/v1/clients/{durable_id}/cqs/": {
        "name": "q",
        "region": "prices",
        "query": "value > 1",
        "durable": True,
    },
}


def _segment(value: Any) -> str:
    """``value`` as one path segment, the way a client must send it."""
    text = str(value)
    if text in {".", ".."}:
        return text.replace(".", "%2E")
    return quote(text, safe="")


def _operations_with_path_parameters() -> list[Any]:
    operations = (result.ok() for result in schema.get_all_operations())
    return [
        pytest.param(operation, id=operation.label)
        for operation in operations
        if operation.path_parameters
    ]


@pytest.mark.parametrize("operation", _operations_with_path_parameters())
@pytest.mark.django_db(transaction=True, databases=["default", "node"])
def test_edge_path_values_conform_to_the_schema(operation, operator_token, seeded):
    names = [parameter.name for parameter in operation.path_parameters]
    body = BODIES.get(operation.label)
    failures = []
    for name in names:
        for value in EDGE_VALUES.get(name, EDGE_STRINGS):
            path = {
                other: _segment(value if other == name else KNOWN[other][0])
                for other in names
            }
            case = operation.Case(
                path_parameters=path, **({"body": body} if body else {})
            )
            try:
                case.call_and_validate(
                    headers={"Authorization": f"Token {operator_token}"},
                    checks=[
                        not_a_server_error,
                        status_code_conformance,
                        content_type_conformance,
                        response_schema_conformance,
                    ],
                )
            except Exception as exc:
                failures.append(f"{name}={value!r:.40}: {exc}")
    assert not failures, "\n\n".join(failures)


# --- Hand-picked requests: bugs found by the generator or by hand ------------

EDGE_REQUESTS = [
    # A name must be a JSON string: DRF's CharField turned 0 into "0".
    ("POST", "/api/v1/regions/", {}, {}, {"name": 0}, "bad_request"),
    # A flag must be a JSON boolean: DRF's BooleanField took 0, "yes", "on".
    (
        "POST",
        "/api/v1/regions/",
        {},
        {},
        {"name": "r", "conflate_events": 0},
        "bad_request",
    ),
    # An empty limit is not the default.
    ("GET", "/api/v1/regions/", {}, {"limit": ""}, None, "bad_request"),
    # PostgreSQL cannot store U+0000 (it was a 503 there, accepted on SQLite).
    (
        "POST",
        "/api/v1/clients/{durable_id}/interests/",
        {"durable_id": "orders-app"},
        {},
        {"region": "prices", "regex": "a\x00"},
        "bad_regex",
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "path_parameters", "query", "body", "code"),
    EDGE_REQUESTS,
    ids=[f"{m} {p} {b or q}" for m, p, _, q, b, _ in EDGE_REQUESTS],
)
@pytest.mark.django_db(transaction=True, databases=["default", "node"])
def test_edge_requests_are_refused_as_the_schema_says(
    method, path, path_parameters, query, body, code, operator_token, seeded
):
    case = schema[path][method].Case(
        path_parameters=path_parameters,
        query=query,
        **({"body": body} if body is not None else {}),
    )
    response = case.call_and_validate(
        headers={"Authorization": f"Token {operator_token}"},
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == code
