"""The durable clients and nodes REST API, seen from an HTTP client
(docs/protocol.md, "REST API")."""

import pytest
from rest_framework.test import APIClient

from cache import services as cache_services
from clients import fanout, services
from clients.models import DurableClient, Interest, QueueSizeReport
from queues import selectors as queue_selectors
from tests.helpers import assert_error, follow_pages, hello, node_row

pytestmark = pytest.mark.django_db(databases=["default", "node"])


BASE = "/api/v1"


def register(api, durable_id, **body):
    return api.post(f"{BASE}/clients/{durable_id}/interests/", body, format="json")


# --- clients/ -------------------------------------------------------------


def test_clients_needs_a_token(db):
    assert_error(APIClient().get(f"{BASE}/clients/"), 401, "unauthorized")
    assert_error(APIClient().get(f"{BASE}/nodes/"), 401, "unauthorized")


def test_connected_client_fields(api, user):
    hello(user, "d1", timeout=60, redundancy=0)
    response = api.get(f"{BASE}/clients/")
    assert response.status_code == 200
    (item,) = response.json()["results"]
    assert item == {
        "durable_id": "d1",
        "owner": "alice",
        "state": "connected",
        "node": "node-1",
        "primary": "node-1",
        "secondaries": [],
        "syncing": [],
        "queue_sizes": {"node-1": 0},
        "pending_events": 0,
        "timeout": 60,
        "redundancy": 0,
        "max_queued": 1000000,
        "gap": None,
        "expires_at": None,
    }
    assert response.json()["next"] is None


def test_max_queued_and_a_standing_gap_are_shown(api, user):
    client = hello(user, "d1", max_queued=5).client
    DurableClient.objects.filter(pk=client.pk).update(
        gap_since=41, gap_dropped=5, gap_reason="overflow"
    )
    item = api.get(f"{BASE}/clients/d1/").json()
    assert item["max_queued"] == 5
    assert item["gap"] == {"since": 41, "dropped": 5, "reason": "overflow"}
    assert item["pending_events"] == 0


def test_disconnected_client_has_expires_at(api, user):
    client = hello(user, "d1", timeout=60).client
    services.client_disconnected(client_id=client.id, socket_id="ch-1")
    item = api.get(f"{BASE}/clients/d1/").json()
    assert item["state"] == "disconnected"
    assert item["expires_at"] is not None


def test_plain_user_sees_only_its_own_clients(api, user, other_user):
    hello(user, "mine")
    hello(other_user, "theirs", socket_id="ch-2")
    results = api.get(f"{BASE}/clients/").json()["results"]
    assert [c["durable_id"] for c in results] == ["mine"]


def test_operator_sees_every_client(operator_api, user, other_user):
    hello(user, "mine")
    hello(other_user, "theirs", socket_id="ch-2")
    results = operator_api.get(f"{BASE}/clients/").json()["results"]
    assert [(c["durable_id"], c["owner"]) for c in results] == [
        ("mine", "alice"),
        ("theirs", "bob"),
    ]
    assert operator_api.get(f"{BASE}/clients/theirs/").status_code == 200


def test_non_durable_clients_are_not_listed(api, user):
    services.client_hello(
        user=user, socket_id="ch-x", options=services.parse_hello_options({})
    )
    assert api.get(f"{BASE}/clients/").json()["results"] == []


def test_client_list_is_paged_with_next_links(api, user):
    for i in range(5):
        hello(user, f"d{i}", socket_id=f"ch-{i}")
    pages = follow_pages(api, f"{BASE}/clients/?limit=2")
    assert [[c["durable_id"] for c in page] for page in pages] == [
        ["d0", "d1"],
        ["d2", "d3"],
        ["d4"],
    ]


def test_client_list_bad_limit_is_400(api):
    assert_error(api.get(f"{BASE}/clients/?limit=0"), 400)


def test_client_detail(api, user):
    hello(user, "d1")
    response = api.get(f"{BASE}/clients/d1/")
    assert response.status_code == 200
    assert response.json()["durable_id"] == "d1"


def test_unknown_client_is_404(api):
    assert_error(api.get(f"{BASE}/clients/nope/"), 404, "not_found")
    assert_error(api.delete(f"{BASE}/clients/nope/"), 404)
    assert_error(api.get(f"{BASE}/clients/nope/interests/"), 404)
    assert_error(api.get(f"{BASE}/clients/nope/queue/"), 404)
    assert_error(api.get(f"{BASE}/clients/nope/cqs/"), 404)


def test_another_owners_client_is_404(api, other_user):
    hello(other_user, "theirs")
    assert_error(api.get(f"{BASE}/clients/theirs/"), 404)
    assert_error(api.delete(f"{BASE}/clients/theirs/"), 404)
    assert_error(api.get(f"{BASE}/clients/theirs/interests/"), 404)
    assert_error(api.get(f"{BASE}/clients/theirs/queue/"), 404)
    response = register(api, "theirs", region="prices", all_keys=True)
    assert_error(response, 404)
    assert DurableClient.objects.filter(durable_id="theirs").exists()


def test_delete_client_drops_it_and_its_queue(
    api, user, django_capture_on_commit_callbacks
):
    client = hello(user, "d1").client
    assert queue_selectors.queue_size(client_id=client.id) == 0
    with django_capture_on_commit_callbacks(execute=True):
        response = api.delete(f"{BASE}/clients/d1/")
    assert response.status_code == 204
    assert not DurableClient.objects.filter(durable_id="d1").exists()
    assert queue_selectors.queue_size(client_id=client.id) == -2
    assert_error(api.delete(f"{BASE}/clients/d1/"), 404)


def test_operator_deletes_anyones_client(operator_api, user):
    hello(user, "d1")
    assert operator_api.delete(f"{BASE}/clients/d1/").status_code == 204
    assert not DurableClient.objects.filter(durable_id="d1").exists()


# --- interests ------------------------------------------------------------


def test_preregistering_creates_an_offline_client_owned_by_the_caller(
    api, user, region
):
    response = register(api, "backend-1", region="prices", keys=["a"], durable=True)
    assert response.status_code == 201
    (row,) = response.json()["results"]
    assert row == {
        "id": row["id"],
        "region": "prices",
        "kind": "key",
        "keys": ["a"],
        "durable": True,
        "policy": "keys_values",
    }
    client = DurableClient.objects.get(durable_id="backend-1")
    assert client.owner == user
    item = api.get(f"{BASE}/clients/backend-1/").json()
    assert item["state"] == "disconnected"
    assert item["expires_at"] is not None
    assert item["primary"] == "node-1"
    assert item["pending_events"] == 0


def test_preregistered_durable_interest_queues_events(api, user, region):
    register(api, "backend-1", region="prices", keys=["a"], durable=True)
    api.put(f"{BASE}/regions/prices/entries/a/", {"value": 1}, format="json")
    api.put(f"{BASE}/regions/prices/entries/b/", {"value": 2}, format="json")
    api.put(f"{BASE}/regions/prices/entries/a/", {"value": 3}, format="json")
    fanout.fanout_node("node-1")
    response = api.get(f"{BASE}/clients/backend-1/queue/")
    assert response.status_code == 200
    events = response.json()["results"]
    assert [(e["key"], e["op"], e["value"], e["version"]) for e in events] == [
        ("a", "create", 1, 1),
        ("a", "update", 3, 2),
    ]
    assert events[0]["seq"] < events[1]["seq"]
    assert set(events[0]) == {"id", "seq", "region", "key", "op", "value"} | {
        "version",
        "ts",
    }
    assert api.get(f"{BASE}/clients/backend-1/").json()["pending_events"] == 2


def test_queue_is_paged_with_next_links(api, user, region):
    register(api, "d1", region="prices", all_keys=True, durable=True)
    for i in range(5):
        cache_services.entry_put(region="prices", key=f"k{i}", value=i)
    fanout.fanout_node("node-1")
    pages = follow_pages(api, f"{BASE}/clients/d1/queue/?limit=2")
    assert [[e["value"] for e in page] for page in pages] == [[0, 1], [2, 3], [4]]


@pytest.mark.parametrize("cursor", ["bm9wZQ", "wrI", "%%"])
def test_queue_bad_cursor_is_400(api, user, cursor):
    # "bm9wZQ" is "nope" and "wrI" is "²": neither is a seq.
    hello(user, "d1")
    assert_error(api.get(f"{BASE}/clients/d1/queue/?cursor={cursor}"), 400)


def test_queue_on_another_primary_is_409_naming_it(api, user):
    DurableClient.objects.create(durable_id="far", owner=user, primary="node-2")
    error = assert_error(api.get(f"{BASE}/clients/far/queue/"), 409, "conflict")
    assert "node-2" in error["message"]


def test_register_existing_client_and_list_interests(api, user, region):
    hello(user, "d1")
    assert register(api, "d1", region="prices", keys=["a", "b"]).status_code == 201
    register(api, "d1", region="prices", regex="user/.*", policy="keys")
    register(api, "d1", region="prices", all_keys=True, policy="none")
    response = api.get(f"{BASE}/clients/d1/interests/")
    assert response.status_code == 200
    rows = response.json()["results"]
    assert [{k: v for k, v in r.items() if k != "id"} for r in rows] == [
        {
            "region": "prices",
            "kind": "key",
            "keys": ["a"],
            "durable": False,
            "policy": "keys_values",
        },
        {
            "region": "prices",
            "kind": "key",
            "keys": ["b"],
            "durable": False,
            "policy": "keys_values",
        },
        {
            "region": "prices",
            "kind": "regex",
            "regex": "user/.*",
            "durable": False,
            "policy": "keys",
        },
        {
            "region": "prices",
            "kind": "all_keys",
            "all_keys": True,
            "durable": False,
            "policy": "none",
        },
    ]


def test_registering_twice_is_idempotent(api, user, region):
    first = register(api, "d1", region="prices", keys=["a"], durable=True).json()
    second = register(api, "d1", region="prices", keys=["a"], durable=True).json()
    assert first["results"][0]["id"] == second["results"][0]["id"]
    assert Interest.objects.count() == 1


def test_interest_list_is_paged(api, user, region):
    register(api, "d1", region="prices", keys=["a", "b", "c"])
    pages = follow_pages(api, f"{BASE}/clients/d1/interests/?limit=2")
    assert [[r["keys"] for r in page] for page in pages] == [[["a"], ["b"]], [["c"]]]


def test_delete_interest(api, user, region):
    rows = register(api, "d1", region="prices", keys=["a", "b"]).json()["results"]
    response = api.delete(f"{BASE}/clients/d1/interests/{rows[0]['id']}/")
    assert response.status_code == 204
    remaining = api.get(f"{BASE}/clients/d1/interests/").json()["results"]
    assert [r["keys"] for r in remaining] == [["b"]]
    assert_error(api.delete(f"{BASE}/clients/d1/interests/{rows[0]['id']}/"), 404)


def test_cannot_delete_another_clients_interest(api, user, region):
    theirs = register(api, "d1", region="prices", keys=["a"]).json()["results"]
    register(api, "d2", region="prices", keys=["a"])
    assert_error(api.delete(f"{BASE}/clients/d2/interests/{theirs[0]['id']}/"), 404)
    assert Interest.objects.filter(pk=theirs[0]["id"]).exists()


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"region": "prices"}, "bad_field"),
        ({"region": "prices", "keys": ["a"], "all_keys": True}, "bad_field"),
        ({"region": "prices", "keys": []}, "bad_field"),
        ({"region": "prices", "keys": ["bad\u0001"]}, "bad_field"),
        ({"region": "prices", "all_keys": "yes"}, "bad_field"),
        ({"region": "prices", "regex": "(a"}, "bad_regex"),
        ({"region": "prices", "regex": "(a)\\1"}, "bad_regex"),
        ({"region": "prices", "regex": ["a"]}, "bad_regex"),
        ({"region": "prices", "regex": 5}, "bad_regex"),
        ({"region": "prices", "all_keys": True, "policy": "all"}, "bad_field"),
        ({"region": "prices", "all_keys": True, "durable": "true"}, "bad_field"),
        ({"all_keys": True}, None),
    ],
)
def test_bad_interest_is_400_and_creates_no_client(api, region, body, code):
    assert_error(register(api, "new-1", **body), 400, code)
    assert not DurableClient.objects.filter(durable_id="new-1").exists()


def test_interest_in_unknown_region_is_404_and_creates_no_client(api, user):
    assert_error(register(api, "new-1", region="nope", all_keys=True), 404)
    assert not DurableClient.objects.filter(durable_id="new-1").exists()


def test_interest_for_an_invalid_durable_id_is_400(api, region):
    assert_error(register(api, "bad id!", region="prices", all_keys=True), 400)


# --- continuous queries -----------------------------------------------------


def post_cq(api, durable_id, **body):
    return api.post(f"{BASE}/clients/{durable_id}/cqs/", body, format="json")


def test_cqs_are_registered_listed_and_closed(api, user, region):
    hello(user, "d1")
    body = {
        "name": "big",
        "region": "prices",
        "query": "value.qty > 5",
        "durable": True,
    }
    response = post_cq(api, "d1", **body)
    assert response.status_code == 201
    assert post_cq(api, "d1", **body).status_code == 201  # idempotent
    post_cq(api, "d1", name="all", region="prices", query="value IS NOT NULL")
    listed = api.get(f"{BASE}/clients/d1/cqs/").json()
    assert [(q["name"], q["durable"]) for q in listed["results"]] == [
        ("all", False),
        ("big", True),
    ]
    assert listed["results"][1]["query"] == "value.qty > 5"
    assert "created_at" in listed["results"][1]
    assert api.delete(f"{BASE}/clients/d1/cqs/big/").status_code == 204
    assert_error(api.delete(f"{BASE}/clients/d1/cqs/big/"), 404)


def test_a_cq_for_an_unknown_id_creates_the_client_offline(api, user, region):
    response = post_cq(api, "new-1", name="big", region="prices", query="value.qty > 5")
    assert response.status_code == 201
    client = DurableClient.objects.get(durable_id="new-1")
    assert (client.owner, client.is_connected) == (user, False)
    assert client.cqs.get().name == "big"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"name": "bad name", "region": "nope", "query": "("}, 400, "bad_field"),
        ({"name": "q", "region": "prices", "query": 5}, 400, "bad_field"),
        ({"name": "q", "region": "nope", "query": "("}, 404, "no_such_region"),
        ({"name": "q", "region": "prices", "query": "value >"}, 400, "bad_query"),
    ],
)
def test_a_refused_cq_changes_nothing(api, region, body, status, code):
    assert_error(post_cq(api, "new-1", **body), status, code)
    assert not DurableClient.objects.filter(durable_id="new-1").exists()


def test_a_different_definition_under_a_name_is_bad_field(api, user, region):
    hello(user, "d1")
    post_cq(api, "d1", name="big", region="prices", query="value.qty > 5")
    response = post_cq(api, "d1", name="big", region="prices", query="value.qty > 6")
    assert_error(response, 400, "bad_field")


def test_another_owners_client_cqs_are_404_whatever_the_body(api, other_user, region):
    hello(other_user, "theirs", socket_id="ch-2")
    assert_error(post_cq(api, "theirs", name="bad name"), 404)
    assert_error(api.get(f"{BASE}/clients/theirs/cqs/"), 404)
    assert_error(api.delete(f"{BASE}/clients/theirs/cqs/x/"), 404)


# --- nodes/ ----------------------------------------------------------------


def test_nodes_report_status_placement_and_queued_events(api, user, other_user, region):
    node_row("node-1", url="http://127.0.0.1:8010")
    node_row("node-2", age_s=3600, url="http://127.0.0.1:8020")
    node_row("node-3", draining=True, url="http://127.0.0.1:8030")
    register(api, "here", region="prices", all_keys=True, durable=True)
    far = DurableClient.objects.create(
        durable_id="far", owner=other_user, primary="node-2", secondaries=["node-1"]
    )
    QueueSizeReport.objects.create(client=far, node="node-2", size=5)
    # A report from a node that no longer hosts the queue does not count.
    QueueSizeReport.objects.create(client=far, node="node-3", size=9)
    cache_services.entry_put(region="prices", key="a", value=1)
    fanout.fanout_node("node-1")
    response = api.get(f"{BASE}/nodes/")
    assert response.status_code == 200
    nodes = {n["name"]: n for n in response.json()["results"]}
    assert list(nodes) == ["node-1", "node-2", "node-3"]
    assert nodes["node-1"]["status"] == "up"
    assert nodes["node-1"]["url"] == "http://127.0.0.1:8010"
    assert nodes["node-1"]["last_heartbeat"]
    assert nodes["node-2"]["status"] == "down"
    assert nodes["node-3"]["status"] == "down"
    counts = {
        name: (n["primary_queues"], n["secondary_queues"], n["queued_events"])
        for name, n in nodes.items()
    }
    assert counts == {"node-1": (1, 1, 1), "node-2": (1, 0, 5), "node-3": (0, 0, 0)}


def test_nodes_are_paged(api):
    for i in range(1, 4):
        node_row(f"node-{i}", url=f"http://127.0.0.1:80{i}0")
    pages = follow_pages(api, f"{BASE}/nodes/?limit=2")
    assert [[n["name"] for n in page] for page in pages] == [
        ["node-1", "node-2"],
        ["node-3"],
    ]


def test_wrong_method_is_405_with_the_error_shape(api, user):
    hello(user, "d1")
    assert_error(api.post(f"{BASE}/nodes/", {}, format="json"), 405)
    assert_error(api.put(f"{BASE}/clients/d1/", {}, format="json"), 405)
    assert_error(api.post(f"{BASE}/clients/d1/queue/", {}, format="json"), 405)


def test_deleting_a_cq_named_with_a_nul_is_404_on_every_database(api, user):
    hello(user, "d-nul")
    response = api.delete("/api/v1/clients/d-nul/cqs/%00/")
    assert response.status_code == 404
