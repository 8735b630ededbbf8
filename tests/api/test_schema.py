"""The served OpenAPI schema: valid, warning-free, complete against the URL
conf, and saying what the views do; and the browsable API."""

import pytest
from django.core.management import call_command
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.validation import validate_schema
from rest_framework.test import APIClient

from tests.helpers import assert_error

SCHEMA_URL = "/api/v1/schema/"
ERROR_REF = "#/components/schemas/Error"
# Pages about the API rather than operations of it.
NOT_IN_SCHEMA = {"api/v1/", "api/v1/schema/", "api/v1/schema/swagger-ui/"}


@pytest.fixture
def served(api):
    """The schema as GET /api/v1/schema/ serves it, generated afresh."""
    GENERATOR_STATS.reset()
    response = api.get(SCHEMA_URL, {"format": "json"})
    assert response.status_code == 200
    return response.json()


def _operations(schema):
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            yield path, method, operation


def test_served_schema_is_valid_openapi_without_warnings(served):
    validate_schema(served)
    assert not GENERATOR_STATS, "drf-spectacular warned or erred (see stderr)"


def test_spectacular_command_validates_and_fails_on_warnings(tmp_path):
    # Exits non-zero (SystemExit/CommandError) on a warning or an invalid schema.
    out = tmp_path / "schema.yaml"
    GENERATOR_STATS.reset()  # it keeps what earlier generations warned
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    assert out.read_text().startswith("openapi: 3.0")


def test_schema_is_served_without_a_token(db):
    response = APIClient().get(SCHEMA_URL, {"format": "json"})
    assert response.status_code == 200  # the document itself is public


def _api_routes(patterns, prefix=""):
    """Yield (schema path, view class) for every REST route under /api/v1/."""
    for entry in patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _api_routes(entry.url_patterns, route)
        elif isinstance(entry, URLPattern) and route.startswith("api/v1/"):
            view = getattr(entry.callback, "view_class", None)
            if view is not None and route not in NOT_IN_SCHEMA:
                yield route, view


def _schema_path(route):
    # "regions/<str:region>/entries/<entrykey:key>/" -> ".../{region}/.../{key}/"
    parts = []
    for part in route.split("/"):
        if part.startswith("<"):
            name = part.strip("<>").split(":")[-1]
            part = "{id}" if name == "pk" else "{" + name + "}"
        parts.append(part)
    return "/" + "/".join(parts)


def test_every_view_and_method_is_in_the_schema(served):
    expected = set()
    for route, view in _api_routes(get_resolver().url_patterns):
        methods = {m for m in view.http_method_names if hasattr(view, m)}
        expected |= {(_schema_path(route), m) for m in methods - {"options", "head"}}
    documented = {(path, method) for path, method, _ in _operations(served)}
    assert documented == expected


def test_every_error_status_has_the_error_body(served):
    for path, method, operation in _operations(served):
        responses = operation["responses"]
        for status in ("401", "406", "503"):
            assert status in responses, (path, method, status)
        if method in {"post", "put", "delete"}:
            assert "403" in responses, (path, method)  # CSRF under session auth
        if "requestBody" in operation:
            assert {"400", "413"} <= set(responses), (path, method)
            # A body not sent as JSON: 415.
            assert "415" in responses, (path, method)
        for status, response in responses.items():
            if int(status) >= 400:
                body = response["content"]["application/json"]["schema"]
                assert body == {"$ref": ERROR_REF}, (path, method, status)


def test_lists_are_pages_with_cursor_and_limit(served):
    pages = {
        "/api/v1/regions/": "RegionPage",
        "/api/v1/regions/{region}/entries/": "EntryPage",
        "/api/v1/clients/": "DurableClientPage",
        "/api/v1/clients/{durable_id}/interests/": "InterestPage",
        "/api/v1/clients/{durable_id}/queue/": "EventPage",
        "/api/v1/nodes/": "NodePage",
    }
    components = served["components"]["schemas"]
    for path, page in pages.items():
        operation = served["paths"][path]["get"]
        ref = operation["responses"]["200"]["content"]["application/json"]["schema"]
        assert ref == {"$ref": f"#/components/schemas/{page}"}
        assert components[page]["required"] == ["next", "results"]
        assert components[page]["properties"]["next"]["nullable"] is True
        params = {p["name"]: p for p in operation["parameters"] if p["in"] == "query"}
        assert {"cursor", "limit"} <= set(params), path
        assert params["limit"]["schema"]["minimum"] == 1
        assert params["limit"]["schema"]["maximum"] == 1000
    entries = served["paths"]["/api/v1/regions/{region}/entries/"]["get"]
    assert "prefix" in {p["name"] for p in entries["parameters"]}


def test_fields_say_what_the_views_answer(served):
    schemas = served["components"]["schemas"]
    client = schemas["DurableClient"]
    assert set(client["required"]) == {
        "durable_id", "owner", "state", "node", "primary", "secondaries",
        "syncing", "queue_sizes", "pending_events", "timeout", "redundancy",
        "max_queued", "gap", "expires_at",
    }  # fmt: skip
    assert client["properties"]["expires_at"]["nullable"] is True
    gap = client["properties"]["gap"]
    assert gap["nullable"] is True
    [ref] = [part["$ref"] for part in gap["allOf"]]
    gap_schema = schemas[ref.rsplit("/", 1)[1]]
    assert set(gap_schema["required"]) == {"since", "dropped", "reason"}
    reason = gap_schema["properties"]["reason"]["$ref"].rsplit("/", 1)[1]
    assert schemas[reason]["enum"] == ["overflow"]
    assert client["properties"]["syncing"]["items"] == {"type": "string"}
    assert "nullable" not in client["properties"]["durable_id"]
    assert schemas["Entry"]["properties"]["value"]["nullable"] is True
    assert schemas["EntryPutResult"]["properties"]["value"]["nullable"] is True
    event = schemas["Event"]["properties"]
    assert event["key"]["nullable"] is True
    assert event["value"]["nullable"] is True
    assert event["version"]["nullable"] is True
    assert len(schemas["Interest"]["oneOf"]) == 3  # keys | regex | all_keys
    assert len(schemas["InterestCreate"]["oneOf"]) == 3


def test_entry_key_is_one_percent_encoded_segment(served):
    operation = served["paths"]["/api/v1/regions/{region}/entries/{key}/"]["get"]
    [key] = [p for p in operation["parameters"] if p["name"] == "key"]
    assert key["in"] == "path"
    assert "%2F" in key["description"]
    assert key["schema"]["maxLength"] == 512


def test_continuous_queries_describe_their_bodies(served):
    cqs = "/api/v1/clients/{durable_id}/cqs/"
    post = served["paths"][cqs]["post"]
    body = post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    schemas = served["components"]["schemas"]
    created = schemas[body.rsplit("/", 1)[1]]
    assert set(created["properties"]) == {"name", "region", "query", "durable"}
    answer = post["responses"]["201"]["content"]["application/json"]["schema"]
    listed = schemas[answer["$ref"].rsplit("/", 1)[1]]["properties"]
    assert set(listed) == {"name", "region", "query", "durable", "created_at"}
    delete = served["paths"][cqs + "{name}/"]["delete"]["responses"]
    assert {"204", "404"} <= set(delete)


# --- The browsable API -------------------------------------------------------


def test_browsable_api_renders_for_a_logged_in_session(client, operator, region):
    client.force_login(operator)
    response = client.get("/api/v1/regions/", HTTP_ACCEPT="text/html")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    body = response.content.decode()
    assert "Django REST framework" in body
    assert "prices" in body


def test_session_write_without_csrf_token_is_403_json(operator, region):
    browser = APIClient(enforce_csrf_checks=True)
    browser.force_login(operator)
    response = browser.put(
        "/api/v1/regions/prices/entries/k/", {"value": 1}, format="json"
    )
    assert_error(response, 403, "forbidden")


def test_write_to_an_unknown_api_path_is_json_404_not_csrf_html(operator):
    browser = APIClient(enforce_csrf_checks=True)
    browser.force_login(operator)
    assert_error(browser.delete("/api/v1/nowhere/"), 404, "not_found")
