"""The operators' overview page and the project-level views."""

import pytest
from django.test import Client as DjangoClient

from cache import services as cache_services
from clients.models import DurableClient
from queues import services as queue_services

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


def test_overview_refuses_plain_users_and_sends_strangers_to_log_in(user):
    assert DjangoClient().get("/dashboard/").status_code == 302
    browser = DjangoClient()
    browser.force_login(user)
    assert browser.get("/dashboard/").status_code == 403


def test_metrics_and_health_answer(db):
    browser = DjangoClient()
    assert browser.get("/healthz/").json()["status"] == "ok"
    text = browser.get("/metrics").content.decode()
    assert "durablecache_queued_events" in text


def test_pages_name_the_dashboard_icon_and_favicon_ico_redirects_to_it(operator):
    browser = DjangoClient()
    browser.force_login(operator)
    page = browser.get("/dashboard/").content.decode()
    assert 'rel="icon" href="/static/dashboard/favicon.svg"' in page
    response = DjangoClient().get("/favicon.ico")
    assert response.status_code == 302
    assert response["Location"] == "/static/dashboard/favicon.svg"


def test_unknown_api_path_is_a_json_404(api):
    response = api.get("/api/v1/nope/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_metrics_count_clients_short_of_redundancy_and_copies_filling(user):
    for name in ("node-1", "node-2"):
        cache_services.node_register(name=name, url="http://127.0.0.1:1")
    DurableClient.objects.create(
        durable_id="full",
        owner=user,
        redundancy=1,
        primary="node-1",
        secondaries=["node-2"],
    )
    short = DurableClient.objects.create(
        durable_id="short",
        owner=user,
        redundancy=1,
        primary="node-2",
        secondaries=["node-1"],
        syncing=["node-1"],
    )
    queue_services.queue_adopt(
        client_id=short.id,
        durable_id="short",
        conflate="server",
        node="node-1",
        source="node-2",
    )
    text = DjangoClient().get("/metrics").content.decode()
    # Cluster-wide: no node label, the same figure on every node.
    assert "durablecache_redundancy_short 1.0" in text
    assert 'durablecache_copies_filling{node="node-1"} 1.0' in text
