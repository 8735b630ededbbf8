"""The API's own pages: the root listing the endpoints, Swagger UI served
from the node's static files (no CDN), the schema document beside it."""

import re

import pytest
from django.contrib.staticfiles import finders
from rest_framework.test import APIClient

ENDPOINTS = {
    "regions": "/api/v1/regions/",
    "clients": "/api/v1/clients/",
    "nodes": "/api/v1/nodes/",
    "schema": "/api/v1/schema/",
    "docs": "/api/v1/schema/swagger-ui/",
}


def test_root_lists_every_top_level_endpoint_as_a_link(db):
    response = APIClient().get("/api/v1/")
    assert response.status_code == 200
    assert response.json() == {
        name: f"http://testserver{path}" for name, path in ENDPOINTS.items()
    }


def test_root_is_the_browsable_apis_page_in_a_browser(client, operator):
    client.force_login(operator)
    response = client.get("/api/v1/", HTTP_ACCEPT="text/html")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    body = response.content.decode()
    for path in ENDPOINTS.values():
        assert f'href="http://testserver{path}"' in body


def test_swagger_ui_loads_only_the_nodes_own_files(client):
    response = client.get("/api/v1/schema/swagger-ui/")
    assert response.status_code == 200
    body = response.content.decode()
    assert '"/api/v1/schema/"' in body  # the document it renders
    sources = re.findall(r'(?:src|href)="([^"]+)"', body)
    assert sources
    for source in sources:
        assert source.startswith("/static/drf_spectacular_sidecar/"), source
        path = source.removeprefix("/static/")
        assert finders.find(path), f"{path} is not among the static files"


def test_schema_stays_the_openapi_document(db):
    response = APIClient().get("/api/v1/schema/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/vnd.oai.openapi")
    assert response.content.startswith(b"openapi: 3.0")


@pytest.mark.django_db(databases=["default", "node"])
def test_dashboards_api_link_leads_to_the_root(client, operator):
    client.force_login(operator)
    page = client.get("/dashboard/").content.decode()
    link = re.search(r'<a href="([^"]+)">API</a>', page)
    assert link
    assert client.get(link.group(1), HTTP_ACCEPT="text/html").status_code == 200
