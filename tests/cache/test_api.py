"""The regions and entries REST API, seen from an HTTP client
(docs/protocol.md, "REST API")."""

import json
from unittest.mock import ANY
from urllib.parse import quote

import pytest
from rest_framework.test import APIClient

from cache import selectors, services
from cache.api.urls import ENCODED_SLASH
from cache.models import Entry, Event
from cache.services import batches
from tests.helpers import assert_error, follow_pages

pytestmark = pytest.mark.django_db(databases=["default", "node"])


BASE = "/api/v1"


def entry_url(region, key, suffix=""):
    return f"{BASE}/regions/{region}/entries/{quote(key, safe='')}/{suffix}"


def put_raw(api, region, key, text):
    return api.put(entry_url(region, key), text, content_type="application/json")


# --- authentication and permissions -------------------------------------


def test_no_token_is_401(db):
    assert_error(APIClient().get(f"{BASE}/regions/"), 401, "unauthorized")


def test_invalid_token_is_401(db):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert_error(api.get(f"{BASE}/regions/"), 401, "unauthorized")


def test_token_in_query_string_is_not_accepted(token):
    assert_error(APIClient().get(f"{BASE}/regions/?token={token}"), 401)


def test_plain_user_cannot_create_a_region(api):
    response = api.post(f"{BASE}/regions/", {"name": "r1"}, format="json")
    assert_error(response, 403, "forbidden")
    assert not selectors.region_list().exists()


def test_plain_user_cannot_destroy_or_clear_a_region(api, region):
    assert_error(api.delete(f"{BASE}/regions/prices/"), 403)
    assert_error(api.post(f"{BASE}/regions/prices/clear/"), 403)
    assert selectors.region_get(name="prices")


# --- regions --------------------------------------------------------------


def test_operator_creates_a_region(operator_api):
    response = operator_api.post(
        f"{BASE}/regions/", {"name": "r.1:x-y", "conflate_events": True}, format="json"
    )
    assert response.status_code == 201
    assert response.json()["name"] == "r.1:x-y"
    assert response.json()["conflate_events"] is True
    assert selectors.region_get(name="r.1:x-y").conflate_events


def test_region_conflate_events_defaults_to_false(operator_api):
    response = operator_api.post(f"{BASE}/regions/", {"name": "r"}, format="json")
    assert response.status_code == 201
    assert response.json()["conflate_events"] is False


@pytest.mark.parametrize("name", ["", "has space", "slash/no", "x" * 129, "é"])
def test_invalid_region_name_is_400(operator_api, name):
    response = operator_api.post(f"{BASE}/regions/", {"name": name}, format="json")
    assert_error(response, 400)
    assert not selectors.region_list().exists()


def test_missing_region_name_is_400(operator_api):
    assert_error(operator_api.post(f"{BASE}/regions/", {}, format="json"), 400)


def test_duplicate_region_is_409(operator_api, region):
    response = operator_api.post(f"{BASE}/regions/", {"name": "prices"}, format="json")
    assert_error(response, 409, "region_exists")


def test_region_list_is_paged_with_next_links(api):
    for name in ["a", "b", "c", "d", "e"]:
        services.region_create(name=name)
    pages = follow_pages(api, f"{BASE}/regions/?limit=2")
    assert [[r["name"] for r in page] for page in pages] == [
        ["a", "b"],
        ["c", "d"],
        ["e"],
    ]


def test_next_link_is_absolute_and_null_on_the_last_page(api, region):
    response = api.get(f"{BASE}/regions/?limit=1")
    assert response.json()["next"] is None
    services.region_create(name="zzz")
    next_url = api.get(f"{BASE}/regions/?limit=1").json()["next"]
    assert next_url.startswith("http://testserver/api/v1/regions/?")


def test_region_detail(api, region):
    response = api.get(f"{BASE}/regions/prices/")
    assert response.status_code == 200
    assert response.json()["name"] == "prices"


def test_unknown_region_is_404(api):
    assert_error(api.get(f"{BASE}/regions/nope/"), 404, "no_such_region")
    assert_error(api.get(f"{BASE}/regions/nope/entries/"), 404, "no_such_region")
    assert_error(api.get(entry_url("nope", "k")), 404, "no_such_region")


def test_operator_destroys_a_region(operator_api, region):
    services.entry_put(region="prices", key="a", value=1)
    response = operator_api.delete(f"{BASE}/regions/prices/")
    assert response.status_code == 200
    body = response.json()
    assert body["op"] == "region_destroy"
    assert Event.objects.get(event_id=body["event_id"]).op == "region_destroy"
    assert_error(operator_api.get(f"{BASE}/regions/prices/"), 404, "no_such_region")
    assert_error(operator_api.delete(f"{BASE}/regions/prices/"), 404)


def test_operator_clears_a_region(operator_api, region):
    services.entry_put(region="prices", key="a", value=1)
    response = operator_api.post(f"{BASE}/regions/prices/clear/")
    assert response.status_code == 200
    assert response.json()["op"] == "region_clear"
    assert operator_api.get(f"{BASE}/regions/prices/entries/").json()["results"] == []


def test_clear_unknown_region_is_404(operator_api):
    assert_error(operator_api.post(f"{BASE}/regions/nope/clear/"), 404)


# --- entries --------------------------------------------------------------


def test_put_creates_then_updates(api, region):
    response = api.put(entry_url("prices", "a"), {"value": {"p": 1}}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert body == {"key": "a", "value": {"p": 1}, "version": 1, "event_id": ANY}
    event = Event.objects.get(event_id=body["event_id"])
    assert (event.op, event.key, event.version) == ("create", "a", 1)
    # Fields besides value are ignored, as the serializer ignored them.
    body = api.put(
        entry_url("prices", "a"), {"value": 2, "other": 1}, format="json"
    ).json()
    assert body["version"] == 2
    assert Event.objects.get(event_id=body["event_id"]).op == "update"


def test_get_entry(api, region):
    services.entry_put(region="prices", key="a", value=[1, "x"])
    response = api.get(entry_url("prices", "a"))
    assert response.status_code == 200
    body = response.json()
    assert body["key"] == "a"
    assert body["value"] == [1, "x"]
    assert body["version"] == 1
    assert body["updated_at"]


def test_unknown_key_is_404(api, region):
    assert_error(api.get(entry_url("prices", "nope")), 404, "not_found")


def test_put_to_unknown_region_is_404_no_such_region(api):
    response = api.put(entry_url("nope", "a"), {"value": 1}, format="json")
    assert_error(response, 404, "no_such_region")


def test_put_without_value_is_400(api, region):
    assert_error(api.put(entry_url("prices", "a"), {}, format="json"), 400)
    assert_error(api.put(entry_url("prices", "a"), [1], format="json"), 400)
    assert not Entry.objects.exists()


def test_put_null_value_is_allowed(api, region):
    response = api.put(entry_url("prices", "a"), {"value": None}, format="json")
    assert response.status_code == 200
    assert response.json()["value"] is None


@pytest.mark.parametrize(
    "text",
    [
        '{"value": NaN}',
        '{"value": Infinity}',
        '{"value": [-Infinity]}',
        '{"value": "a\\u0000b"}',
        '{"value": {"k\\u0000": 1}}',
        '{"value": "\\ud800"}',
        '{"value": ',
    ],
)
def test_invalid_json_value_is_400_and_writes_nothing(api, region, text):
    assert_error(put_raw(api, "prices", "a", text), 400)
    assert not Entry.objects.exists()
    assert not Event.objects.exists()


def test_non_json_content_type_is_refused(api, region):
    response = api.put(entry_url("prices", "a"), "value=1", content_type="text/plain")
    assert_error(response, 415)


@pytest.mark.parametrize("key", ["x" * 513, "tab\there", "nl\n"])
def test_invalid_key_is_400(api, region, key):
    response = api.put(entry_url("prices", key), {"value": 1}, format="json")
    assert_error(response, 400)


def test_key_of_512_characters_is_accepted(api, region):
    key = "k" * 512
    response = api.put(entry_url("prices", key), {"value": 1}, format="json")
    assert response.status_code == 200
    assert api.get(entry_url("prices", key)).json()["key"] == key


def test_key_with_spaces_and_unicode(api, region):
    key = "a b:ü?#%"
    response = api.put(entry_url("prices", key), {"value": 1}, format="json")
    assert response.status_code == 200
    assert response.json()["key"] == key
    assert api.get(entry_url("prices", key)).json()["key"] == key


def test_encoded_slash_marker_in_the_path_is_a_slash_in_the_key(api, region):
    """Under ASGI, EncodedSlashMiddleware turns %2F into ENCODED_SLASH."""
    marked = quote(f"a{ENCODED_SLASH}b", safe="")
    url = f"{BASE}/regions/prices/entries/{marked}/"
    response = api.put(url, {"value": 1}, format="json")
    assert response.status_code == 200
    assert response.json()["key"] == "a/b"
    assert selectors.entry_get(region="prices", key="a/b").value == 1
    assert api.get(f"{url}").json()["key"] == "a/b"
    assert api.post(f"{url}invalidate/").json()["key"] == "a/b"


def test_destroy_answers_key_version_event_id(api, region):
    services.entry_put(region="prices", key="a", value=1)
    response = api.delete(entry_url("prices", "a"))
    assert response.status_code == 200
    body = response.json()
    assert body["key"] == "a"
    assert body["version"] == 2
    assert Event.objects.get(event_id=body["event_id"]).op == "destroy"
    assert_error(api.get(entry_url("prices", "a")), 404)
    assert_error(api.delete(entry_url("prices", "a")), 404)


def test_recreated_key_continues_its_version(api, region):
    services.entry_put(region="prices", key="a", value=1)
    api.delete(entry_url("prices", "a"))
    body = api.put(entry_url("prices", "a"), {"value": 3}, format="json").json()
    assert body["version"] == 3
    assert Event.objects.get(event_id=body["event_id"]).op == "create"


def test_invalidate_keeps_the_key_with_null_value(api, region):
    services.entry_put(region="prices", key="a", value=1)
    response = api.post(entry_url("prices", "a", "invalidate/"))
    assert response.status_code == 200
    body = response.json()
    assert (body["key"], body["version"]) == ("a", 2)
    assert Event.objects.get(event_id=body["event_id"]).op == "invalidate"
    entry = api.get(entry_url("prices", "a")).json()
    assert (entry["value"], entry["version"]) == (None, 2)


def test_invalidate_unknown_key_is_404(api, region):
    assert_error(api.post(entry_url("prices", "nope", "invalidate/")), 404)


def test_entry_list_is_paged_in_key_order(api, region):
    for key in ["d", "a", "c", "e", "b"]:
        services.entry_put(region="prices", key=key, value=key)
    pages = follow_pages(api, f"{BASE}/regions/prices/entries/?limit=2")
    assert [[e["key"] for e in page] for page in pages] == [
        ["a", "b"],
        ["c", "d"],
        ["e"],
    ]
    assert pages[0][0] == {
        "key": "a",
        "value": "a",
        "version": 1,
        "updated_at": pages[0][0]["updated_at"],
    }


def test_entry_list_prefix_survives_paging(api, region):
    for key in ["user/1", "user/2", "user/3", "other", "users"]:
        services.entry_put(region="prices", key=key, value=1)
    url = f"{BASE}/regions/prices/entries/?prefix={quote('user/')}&limit=2"
    pages = follow_pages(api, url)
    assert [[e["key"] for e in page] for page in pages] == [
        ["user/1", "user/2"],
        ["user/3"],
    ]


def test_entry_list_default_limit_is_100(api, region):
    services.entry_putall(region="prices", entries={f"k{i:03}": i for i in range(150)})
    body = api.get(f"{BASE}/regions/prices/entries/").json()
    assert len(body["results"]) == 100
    assert body["next"]
    assert len(api.get(body["next"]).json()["results"]) == 50


def test_entry_list_skips_destroyed_entries(api, region):
    services.entry_put(region="prices", key="a", value=1)
    services.entry_put(region="prices", key="b", value=1)
    services.entry_destroy(region="prices", key="a")
    results = api.get(f"{BASE}/regions/prices/entries/").json()["results"]
    assert [e["key"] for e in results] == ["b"]


@pytest.mark.parametrize(
    "limit", ["0", "-1", "abc", "1001", "1.5", "%C2%B2", "9" * 5000, "%20"]
)
def test_bad_limit_is_400(api, region, limit):
    assert_error(api.get(f"{BASE}/regions/prices/entries/?limit={limit}"), 400)


def test_limit_of_1000_is_accepted(api, region):
    assert api.get(f"{BASE}/regions/prices/entries/?limit=1000").status_code == 200


def test_bad_cursor_is_400(api, region):
    assert_error(api.get(f"{BASE}/regions/prices/entries/?cursor=%%%"), 400)


# --- putall ---------------------------------------------------------------


def test_putall_writes_every_key_with_one_event_each(api, region):
    services.entry_put(region="prices", key="b", value=0)
    response = api.post(
        f"{BASE}/regions/prices/putall/",
        {"entries": {"a": 1, "b": {"x": None}, "c/d": [1]}},
        format="json",
    )
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 3
    assert [(e["key"], e["version"]) for e in body["events"]] == [
        ("a", 1),
        ("b", 2),
        ("c/d", 1),
    ]
    ops = {e.key: e.op for e in Event.objects.filter(key__in=["a", "b", "c/d"])}
    assert ops == {"a": "create", "b": "update", "c/d": "create"}
    assert selectors.entry_get(region="prices", key="b").value == {"x": None}


def test_putall_over_many_existing_destroyed_and_new_keys(region, monkeypatch):
    # Lookups go in chunks: make them small so several are needed.
    monkeypatch.setattr(batches, "_KEYS_PER_LOOKUP", 7)
    services.entry_putall(region="prices", entries={f"k{i:02}": i for i in range(20)})
    services.entry_destroy(region="prices", key="k03")
    events = services.entry_putall(
        region="prices", entries={f"k{i:02}": -i for i in range(30)}
    )
    got = {e.key: (e.op, e.version) for e in events}
    assert got["k00"] == ("update", 2)
    assert got["k03"] == ("create", 3)  # re-created: continues from its version
    assert got["k25"] == ("create", 1)
    assert len(got) == 30
    rows = {e.key: (e.value, e.version, e.is_destroyed) for e in Entry.objects.all()}
    assert rows["k03"] == (-3, 3, False)
    assert rows["k19"] == (-19, 2, False)
    assert rows["k29"] == (-29, 1, False)
    assert len(rows) == 30


@pytest.mark.parametrize(
    "entries",
    [
        {"good": 1, "x" * 513: 2},
        {"good": 1, "bad\u0001key": 2},
        {"good": 1, "other": "nul\u0000"},
    ],
)
def test_putall_is_all_or_nothing(api, region, entries):
    response = api.post(
        f"{BASE}/regions/prices/putall/", {"entries": entries}, format="json"
    )
    assert_error(response, 400)
    assert not Entry.objects.exists()
    assert not Event.objects.exists()


def test_putall_with_nan_is_400(api, region):
    response = api.post(
        f"{BASE}/regions/prices/putall/",
        '{"entries": {"a": 1, "b": NaN}}',
        content_type="application/json",
    )
    assert_error(response, 400)
    assert not Entry.objects.exists()


@pytest.mark.parametrize("body", [{}, {"entries": {}}, {"entries": [1]}])
def test_putall_needs_a_non_empty_object(api, region, body):
    assert_error(api.post(f"{BASE}/regions/prices/putall/", body, format="json"), 400)


def test_putall_to_unknown_region_is_404(api):
    response = api.post(
        f"{BASE}/regions/nope/putall/", {"entries": {"a": 1}}, format="json"
    )
    assert_error(response, 404, "no_such_region")


# --- limits, methods, schema ----------------------------------------------


def test_body_over_max_body_bytes_is_413(api, region, settings):
    settings.DURABLECACHE_MAX_BODY_BYTES = 1024
    response = api.put(entry_url("prices", "a"), {"value": "x" * 2000}, format="json")
    assert_error(response, 413, "too_large")
    assert not Entry.objects.exists()
    response = api.put(entry_url("prices", "a"), {"value": "x" * 100}, format="json")
    assert response.status_code == 200


def test_putall_over_max_body_bytes_is_413(api, region, settings):
    settings.DURABLECACHE_MAX_BODY_BYTES = 1024
    entries = {f"k{i}": "v" * 50 for i in range(40)}
    response = api.post(
        f"{BASE}/regions/prices/putall/", {"entries": entries}, format="json"
    )
    assert_error(response, 413)
    assert not Entry.objects.exists()


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("patch", "/regions/prices/"),
        ("put", "/regions/"),
        ("post", "/regions/prices/entries/a/"),
        ("get", "/regions/prices/putall/"),
        ("get", "/regions/prices/clear/"),
        ("delete", "/regions/prices/entries/"),
    ],
)
def test_wrong_method_is_405_with_the_error_shape(operator_api, region, method, url):
    response = getattr(operator_api, method)(f"{BASE}{url}", {}, format="json")
    assert_error(response, 405, "method_not_allowed")


def test_openapi_schema_is_served(api):
    response = api.get(
        f"{BASE}/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json"
    )
    assert response.status_code == 200
    paths = json.loads(response.content)["paths"]
    assert "/api/v1/regions/{region}/entries/{key}/" in paths
    assert "/api/v1/regions/{region}/putall/" in paths


# --- the real ASGI stack: %2F inside a key ----------------------------------


@pytest.mark.django_db(transaction=True, databases=["default", "node"])
async def test_percent_encoded_slash_through_asgi(token):
    """A key holding "/" sent as %2F round-trips through the ASGI application."""
    from asgiref.testing import ApplicationCommunicator
    from channels.db import database_sync_to_async

    from durablecache.asgi import application

    # database_sync_to_async: its thread's connection is closed after the
    # call (PostgreSQL will not drop a test database still connected).
    await database_sync_to_async(services.region_create)(name="paths")
    raw = b"/api/v1/regions/paths/entries/dir%2Ffile.txt/"
    body = b'{"value": 7}'
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "PUT",
        "path": "/api/v1/regions/paths/entries/dir/file.txt/",
        "raw_path": raw,
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"authorization", f"Token {token}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 5000),
    }
    app = ApplicationCommunicator(application, scope)
    await app.send_input({"type": "http.request", "body": body})
    start = await app.receive_output(timeout=10)
    content = (await app.receive_output(timeout=10))["body"]
    assert start["status"] == 200, content
    assert json.loads(content)["key"] == "dir/file.txt"
    entry = await database_sync_to_async(selectors.entry_get)(
        region="paths", key="dir/file.txt"
    )
    assert entry.value == 7


# --- inputs that must never reach the database or crash a node -------------


def test_json_nested_too_deeply_for_the_parser_is_400(api, region):
    text = '{"value": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert_error(put_raw(api, "prices", "a", text), 400, "bad_json")
    assert not Entry.objects.exists()


def test_value_nested_past_the_depth_limit_is_400(api, region):
    text = '{"value": ' + "[" * 300 + "]" * 300 + "}"
    assert_error(put_raw(api, "prices", "a", text), 400, "bad_field")


def test_get_of_a_key_holding_a_control_character_is_400(api, region):
    assert_error(api.get(entry_url("prices", "a\u0000b")), 400, "bad_field")


def test_prefix_holding_a_control_character_is_400(api, region):
    assert_error(api.get(f"{BASE}/regions/prices/entries/?prefix=%00"), 400)


def test_cursor_decoding_to_a_control_character_is_400(api, region):
    # "AA" is the URL-safe base64 of a single U+0000.
    assert_error(api.get(f"{BASE}/regions/prices/entries/?cursor=AA"), 400)
