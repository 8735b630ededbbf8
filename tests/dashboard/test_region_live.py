"""The Live view of a region (``dashboard.live``): the page, its links, and
the vendored copy of the TypeScript client it loads.

Access (login redirect, 403 for plain users) is in test_pages.py's table;
the page at work, in a browser against a node, is
tests/browser/test_live_view_browser.py.
"""

from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.test import Client as DjangoClient
from rest_framework.authtoken.models import Token

from cache import services as cache_services
from dashboard import live
from tests.jsbuild import build

VENDORED = "dashboard/vendor/durablecache.min.js"


@pytest.fixture
def op(operator):
    browser = DjangoClient()
    browser.force_login(operator)
    return browser


@pytest.mark.django_db(databases=["default", "node"])
def test_live_view_loads_the_client_module_for_its_region(op, operator, region):
    api_token = Token.objects.create(user=operator).key
    cache_services.entry_put(region="prices", key="a", value=1)
    response = op.get("/dashboard/regions/prices/live/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-region="prices"' in html
    assert 'data-policy="keys_values"' in html  # small: starts from the values
    assert '<script type="module" src="/static/dashboard/live.js">' in html
    assert 'id="live-state"' in html
    # The socket takes the session: no token is put into the page.
    assert api_token not in html
    assert "token=" not in html


@pytest.mark.django_db(databases=["default", "node"])
def test_live_view_of_a_large_region_starts_empty(op, region, monkeypatch):
    monkeypatch.setattr(live, "IMAGE_LIMIT", 1)
    for key in "ab":
        cache_services.entry_put(region="prices", key=key, value=1)
    html = op.get("/dashboard/regions/prices/live/").content.decode()
    assert 'data-policy="none"' in html
    assert "rows appear as their keys change" in html


@pytest.mark.django_db(databases=["default", "node"])
def test_live_view_of_an_unknown_region_goes_back_to_the_list(op):
    response = op.get("/dashboard/regions/nope/live/", follow=True)
    assert response.redirect_chain[-1][0] == "/dashboard/regions/"
    assert "no region &#x27;nope&#x27;" in response.content.decode()


@pytest.mark.django_db(databases=["default", "node"])
def test_region_page_and_list_link_to_the_live_view(op, region):
    link = 'href="/dashboard/regions/prices/live/"'
    assert link in op.get("/dashboard/regions/prices/").content.decode()
    assert link in op.get("/dashboard/regions/").content.decode()


def test_the_page_and_the_module_it_imports_are_static_files():
    assert finders.find("dashboard/live.js")
    assert finders.find(VENDORED)


def test_vendored_client_is_a_fresh_build_of_sdk_js():
    """The dashboard works without npm, so the bundle is committed; it must
    be exactly what ``npm run build`` makes of sdk/js now."""
    vendored = finders.find(VENDORED)
    fresh = build(force=True)
    assert Path(vendored).read_bytes() == fresh.read_bytes(), (
        "dashboard/static/dashboard/vendor/durablecache.min.js is not the "
        "current build: cd sdk/js && npm run build && cp "
        "dist/durablecache.min.js ../../dashboard/static/dashboard/vendor/"
    )
