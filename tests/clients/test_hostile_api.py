"""Hostile REST requests on another owner's durable client: authorization
comes before the body is judged, as the websocket door checks 4403 first
(docs/protocol.md, "REST API": 403, or 404, for another owner's client
whatever the body)."""

import pytest
from rest_framework.test import APIClient

from clients import services
from clients.models import DurableClient, Interest
from tests.helpers import assert_error

pytestmark = pytest.mark.django_db(databases=["default", "node"])

BASE = "/api/v1"

BODIES = [
    {"region": "prices", "keys": ["a"], "durable": True},  # a good one
    {},
    {"region": "prices"},
    {"region": "prices", "keys": "a"},
    {"region": "prices", "regex": "(a"},
    {"region": "prices", "regex": "a\x00"},
    {"region": "no such", "all_keys": True},
    {"region": "prices", "all_keys": True, "policy": "nope"},
    {"name": "q", "region": "prices", "query": "key = 'a'", "durable": True},
    [1, 2],
    "not an object",
]


@pytest.fixture
def bob_api(other_token):
    api_client = APIClient()
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {other_token}")
    return api_client


@pytest.fixture
def alices_client(user, region):
    return services.client_ensure_offline(user=user, durable_id="alices")


@pytest.mark.parametrize("body", BODIES)
@pytest.mark.parametrize("what", ["interests", "cqs"])
def test_another_owners_client_is_404_whatever_the_body(
    bob_api, alices_client, what, body
):
    response = bob_api.post(f"{BASE}/clients/alices/{what}/", body, format="json")
    assert_error(response, 404, "not_found")
    assert not Interest.objects.exists()
    assert DurableClient.objects.get().owner.username == "alice"


@pytest.mark.parametrize("what", ["interests", "cqs"])
def test_a_body_that_is_not_json_is_404_too(bob_api, alices_client, what):
    response = bob_api.generic(
        "POST", f"{BASE}/clients/alices/{what}/", "{", content_type="application/json"
    )
    assert_error(response, 404, "not_found")


def test_the_owner_still_gets_400_for_a_bad_body(api, alices_client):
    response = api.post(
        f"{BASE}/clients/alices/interests/", {"region": "prices"}, format="json"
    )
    assert_error(response, 400)


def test_an_unknown_id_with_a_bad_body_is_400_and_creates_nothing(bob_api, region):
    response = bob_api.post(
        f"{BASE}/clients/fresh/interests/", {"region": "prices"}, format="json"
    )
    assert_error(response, 400)
    assert not DurableClient.objects.exists()


def test_an_unknown_id_with_a_bad_query_is_bad_query_and_creates_nothing(
    bob_api, region
):
    response = bob_api.post(
        f"{BASE}/clients/fresh/cqs/",
        {"name": "q", "region": "prices", "query": "key = "},
        format="json",
    )
    assert_error(response, 400, "bad_query")
    assert not DurableClient.objects.exists()
