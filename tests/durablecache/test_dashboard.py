"""The operators' overview page and the project-level views."""

import pytest
from django.test import Client as DjangoClient

from durablecache.cache import services as cache_services

pytestmark = pytest.mark.django_db(databases=["default", "node"])


def test_overview_shows_nodes_clients_and_regions_to_operators(operator, region):
    cache_services.node_register(name="node-1", url="http://127.0.0.1:8000")
    browser = DjangoClient()
    browser.force_login(operator)
    response = browser.get("/dashboard/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "node-1" in body
    assert "prices" in body


def test_overview_sends_plain_users_to_the_login_page(user):
    browser = DjangoClient()
    browser.force_login(user)
    response = browser.get("/dashboard/")
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_metrics_and_health_answer(db):
    browser = DjangoClient()
    assert browser.get("/healthz/").json()["status"] == "ok"
    text = browser.get("/metrics").content.decode()
    assert "durablecache_queued_events" in text


def test_unknown_api_path_is_a_json_404(api):
    response = api.get("/api/v1/nope/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
