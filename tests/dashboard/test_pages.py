"""The operators' dashboard pages (``/dashboard/``), through the test client:
access, CSRF, every page's content, every action's effect, the history
the pages show and the samples behind the charts."""

import json
import re
from collections import Counter
from datetime import timedelta
from html.parser import HTMLParser
from urllib.parse import quote, urljoin

import pytest
from django.conf import settings
from django.test import Client as DjangoClient
from django.utils import timezone

from cache import selectors as cache_selectors
from cache import services as cache_services
from cache.models import Entry, Event, Node, Region
from clients import fanout, placement, replication, samples
from clients import selectors as client_selectors
from clients import services as client_services
from clients.matching import parse_selector
from clients.models import (
    ClientHistory,
    ClientSample,
    ContinuousQuery,
    DurableClient,
    Interest,
    LostQueue,
    NodeSample,
    QueueSizeReport,
)
from dashboard import urls as dashboard_urls
from dashboard.views import clients as client_pages
from queues import selectors as queue_selectors
from queues import services as queue_services
from tests.helpers import hello, node_row

pytestmark = pytest.mark.django_db(databases=["default", "node"])

HERE = "node-1"

# --- a small DOM, enough to read the pages ------------------------------------

VOID = {"br", "hr", "img", "input", "link", "meta", "source", "wbr"}


class Element:
    def __init__(self, tag, attrs, parent):
        self.tag = tag
        self.attrs = dict(attrs)
        self.parent = parent
        self.children = []

    def iter(self):
        yield self
        for child in self.children:
            if isinstance(child, Element):
                yield from child.iter()

    def find_all(self, tag=None, **attrs):
        attrs = {k.rstrip("_").replace("_", "-"): v for k, v in attrs.items()}
        return [
            e
            for e in self.iter()
            if (tag is None or e.tag == tag)
            and all(e.attrs.get(k) == v for k, v in attrs.items())
        ]

    def find(self, tag=None, **attrs):
        found = self.find_all(tag, **attrs)
        return found[0] if found else None

    def by_id(self, ident):
        found = self.find(id=ident)
        assert found is not None, f"no element #{ident}"
        return found

    def text(self):
        parts = []
        for child in self.children:
            parts.append(child.text() if isinstance(child, Element) else child)
        return " ".join("".join(parts).split())


class _Builder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Element("#root", {}, None)
        self.current = self.root

    def handle_starttag(self, tag, attrs):
        element = Element(tag, attrs, self.current)
        self.current.children.append(element)
        if tag not in VOID:
            self.current = element

    def handle_startendtag(self, tag, attrs):
        self.current.children.append(Element(tag, attrs, self.current))

    def handle_endtag(self, tag):
        node = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.current = node.parent

    def handle_data(self, data):
        self.current.children.append(data)


def dom(response, status=200):
    assert response.status_code == status, (response.status_code, response)
    builder = _Builder()
    builder.feed(response.content.decode())
    return builder.root


def body_rows(page, table_id):
    """The <tr> of a table's body."""
    return page.by_id(table_id).find("tbody").find_all("tr")


def cells(row):
    return [td.text() for td in row.find_all("td")]


def kinds(page, list_id="history"):
    return [span.text() for span in page.by_id(list_id).find_all("span")]


def notes(response):
    """The messages shown on a (followed) page, as plain text."""
    return [str(m) for m in response.context["messages"]]


def listed_ids(page):
    """Durable ids in the clients table (live rows or expired rows)."""
    table = page.by_id("clients")
    if "data-state-filter" in table.attrs:
        rows = table.find_all("tr")
        return [
            tr.attrs["data-durable-id"] for tr in rows if "data-durable-id" in tr.attrs
        ]
    return [a.text() for a in table.find("tbody").find_all("a")]


def hidden_inputs(page, form_id=None):
    """The hidden fields of the confirmation form (or of form #form_id)."""
    if form_id is None:
        form = page.find("section", class_="confirm").find("form")
    else:
        form = page.by_id(form_id)
    assert form.attrs["method"] == "post"
    return {
        i.attrs["name"]: i.attrs.get("value")
        for i in form.find_all("input", type="hidden")
    }


# --- fixtures and helpers -----------------------------------------------------


def browser_for(user):
    browser = DjangoClient()
    browser.force_login(user)
    return browser


@pytest.fixture
def op(operator):
    """A browser signed in as the operator ``olga``."""
    return browser_for(operator)


def register(client, region="prices", durable=True, **selector):
    return client_services.interest_register(
        client=client,
        region=region,
        selector=parse_selector(selector or {"all_keys": True}),
        is_durable=durable,
        policy="none",
    )


def cq(client, name, query, region="prices", durable=True):
    return client_services.cq_register(
        client=client, name=name, region=region, query=query, durable=durable
    )


def disconnect(client, channel="ch-1"):
    client_services.client_disconnected(client_id=client.id, socket_id=channel)
    client.refresh_from_db()
    return client


def history_of(durable_id):
    return list(
        ClientHistory.objects.filter(durable_id=durable_id)
        .order_by("id")
        .values_list("kind", flat=True)
    )


# --- access -------------------------------------------------------------------

# (url name, path ({pk}: the interest's), whether the view takes a POST action)
PAGES = [
    ("overview", "/dashboard/", False),
    ("counts", "/dashboard/counts.json", False),
    ("node_series", "/dashboard/nodes.json", False),
    ("clients", "/dashboard/clients/", False),
    ("client", "/dashboard/clients/d1/", False),
    ("client_state", "/dashboard/clients/d1/state.json", False),
    ("client_close", "/dashboard/clients/d1/close/", True),
    ("interest_remove", "/dashboard/clients/d1/interests/{pk}/remove/", True),
    ("cq_close", "/dashboard/clients/d1/cqs/big/close/", True),
    ("regions", "/dashboard/regions/", True),
    ("region", "/dashboard/regions/prices/", True),
    ("region_live", "/dashboard/regions/prices/live/", False),
    ("entry_action", "/dashboard/regions/prices/entries/invalidate/?key=a", True),
    ("entry_action", "/dashboard/regions/prices/entries/destroy/?key=a", True),
    ("region_clear", "/dashboard/regions/prices/clear/", True),
    ("region_destroy", "/dashboard/regions/prices/destroy/", True),
]
POST_DATA = {"key": "a", "value": "2", "name": "new-region"}


@pytest.fixture
def world(user, region):
    """A connected durable client d1 with one interest and one CQ, big;
    prices:a = 1."""
    client = hello(user).client
    (interest,) = register(client, keys=["a"])
    cq(client, "big", "value > 5")
    cache_services.entry_put(region="prices", key="a", value=1)
    return {"client": client, "interest": interest}


def snapshot():
    """Everything a dashboard POST could change."""
    return {
        "clients": list(DurableClient.objects.values_list("durable_id", flat=True)),
        "interests": list(Interest.objects.values_list("pk", flat=True)),
        "cqs": list(ContinuousQuery.objects.values_list("pk", flat=True)),
        "regions": list(Region.objects.values_list("name", flat=True)),
        "entries": list(Entry.objects.values_list("key", "value", "is_destroyed")),
        "events": Event.objects.count(),
        "history": ClientHistory.objects.count(),
    }


# The login and logout pages are the only ones open to everyone.
PUBLIC = {"login", "logout"}


def test_the_access_table_names_every_dashboard_url():
    names = {p.name for p in dashboard_urls.urlpatterns}
    assert names - PUBLIC == {name for name, _, _ in PAGES}


def test_a_stranger_follows_the_login_redirect_back_to_the_page(operator):
    browser = DjangoClient()
    response = browser.get("/dashboard/clients/", follow=True)
    assert response.status_code == 200
    target = response.redirect_chain[-1][0]
    assert target == f"{settings.LOGIN_URL}?next=/dashboard/clients/"
    page = dom(response)
    assert hidden_inputs(page, "login")["next"] == "/dashboard/clients/"
    response = browser.post(
        settings.LOGIN_URL,
        {"username": "olga", "password": "pw-olga-123", "next": "/dashboard/clients/"},
    )
    assert response.status_code == 302
    assert response["Location"] == "/dashboard/clients/"
    assert browser.get("/dashboard/clients/").status_code == 200


@pytest.mark.parametrize(
    ("path", "posts"), [(p, w) for _, p, w in PAGES], ids=[p for _, p, _ in PAGES]
)
def test_strangers_are_sent_to_the_login_page(world, path, posts):
    path = path.format(pk=world["interest"].pk)
    before = snapshot()
    methods = ["get", "post"] if posts else ["get"]
    for method in methods:
        data = POST_DATA if method == "post" else None
        response = getattr(DjangoClient(), method)(path, data)
        assert response.status_code == 302, method
        assert response["Location"] == (
            f"{settings.LOGIN_URL}?next={quote(path, safe='/')}"
        )
    assert snapshot() == before


@pytest.mark.parametrize(
    ("path", "posts"), [(p, w) for _, p, w in PAGES], ids=[p for _, p, _ in PAGES]
)
def test_plain_users_are_refused(world, user, path, posts):
    # alice owns d1, and still may not see it here: the dashboard is staff only.
    path = path.format(pk=world["interest"].pk)
    browser = browser_for(user)
    before = snapshot()
    for method in ["get", "post"] if posts else ["get"]:
        data = POST_DATA if method == "post" else None
        assert getattr(browser, method)(path, data).status_code == 403, method
    assert snapshot() == before


@pytest.mark.parametrize("path", [p for _, p, _ in PAGES], ids=[p for _, p, _ in PAGES])
def test_operators_get_every_page(world, op, path):
    before = snapshot()
    response = op.get(path.format(pk=world["interest"].pk))
    assert response.status_code == 200
    if path.endswith(".json"):
        assert isinstance(response.json(), dict)
    else:
        page = dom(response)
        assert page.find("title").text().endswith(f"— {HERE}")
    assert snapshot() == before  # a GET changes nothing, confirmations included


@pytest.mark.parametrize(
    "path", [p for _, p, w in PAGES if not w], ids=[p for _, p, w in PAGES if not w]
)
def test_read_only_pages_refuse_a_post(world, op, path):
    before = snapshot()
    assert op.post(path, POST_DATA).status_code == 405
    assert snapshot() == before


@pytest.mark.parametrize(
    "path", [p for _, p, w in PAGES if w], ids=[p for _, p, w in PAGES if w]
)
def test_action_pages_refuse_other_methods(world, op, path):
    path = path.format(pk=world["interest"].pk)
    before = snapshot()
    assert op.delete(path).status_code == 405
    assert op.put(path, "x").status_code == 405
    assert snapshot() == before


# --- CSRF ---------------------------------------------------------------------


@pytest.fixture
def strict(operator):
    """The operator in a browser whose POSTs must carry the CSRF token."""
    browser = DjangoClient(enforce_csrf_checks=True)
    browser.force_login(operator)
    return browser


@pytest.mark.parametrize(
    ("path", "data"),
    [
        ("/dashboard/clients/d1/close/", {}),
        ("/dashboard/clients/d1/cqs/big/close/", {}),
        ("/dashboard/regions/prices/clear/", {}),
        ("/dashboard/regions/prices/", {"key": "b", "value": "2"}),
    ],
    ids=["close-client", "close-cq", "clear-region", "put-entry"],
)
def test_a_post_without_the_csrf_token_is_refused(
    world, strict, path, data, django_capture_on_commit_callbacks
):
    before = snapshot()
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = strict.post(path, data)
    assert response.status_code == 403
    assert callbacks == []
    assert snapshot() == before
    assert queue_selectors.queue_size(client_id=world["client"].id) == 0


def test_the_confirmation_form_carries_a_working_csrf_token(
    world, strict, django_capture_on_commit_callbacks
):
    page = dom(strict.get("/dashboard/clients/d1/close/"))
    token = hidden_inputs(page)["csrfmiddlewaretoken"]
    assert token
    with django_capture_on_commit_callbacks(execute=True):
        response = strict.post(
            "/dashboard/clients/d1/close/", {"csrfmiddlewaretoken": token}
        )
    assert response.status_code == 302
    assert not DurableClient.objects.filter(durable_id="d1").exists()


# --- overview and counts ------------------------------------------------------


def test_overview_lists_nodes_with_their_status_and_numbers(user, op, region):
    cache_services.node_register(name=HERE, url="http://127.0.0.1:8000")
    node_row("node-2", down=True, url="http://node-2.test:8000")
    node_row("node-3", draining=True, url="http://node-3.test:8000")
    client = hello(user).client
    register(client)
    cache_services.entry_putall(region="prices", entries={"a": 1, "b": 2})
    fanout.fanout_node(HERE)
    DurableClient.objects.create(
        durable_id="away", owner=user, primary="node-2", secondaries=[HERE]
    )
    page = dom(op.get("/dashboard/"))
    rows = {tr.attrs["data-node"]: cells(tr) for tr in body_rows(page, "nodes")}
    assert set(rows) == {HERE, "node-2", "node-3"}
    # name, status, heartbeat, primary queues, secondary queues, queued,
    # overflows, url
    assert rows[HERE][1] == "up"
    assert rows["node-2"][1] == "down"
    assert rows["node-3"][1] == "down"  # draining is not offered to clients
    assert rows[HERE][3:6] == ["1", "1", "2"]
    assert rows["node-2"][3:5] == ["1", "0"]
    assert rows[HERE][6:8] == ["0", "http://127.0.0.1:8000"]


def test_overview_counts_clients_with_a_gap_and_each_nodes_overflows(
    user, op, region, counters_flush
):
    """Two queues overflow on node-1 (one resynced since: its gap is gone,
    its overflow still counted); node-2 counted one before."""
    cache_services.node_register(name=HERE, url="http://127.0.0.1:8000")
    node_row("node-2", url="http://node-2.test:8000")
    Node.objects.filter(name="node-2").update(overflows_total=1)
    for durable_id in ("d1", "d2"):
        client = hello(user, durable_id, socket_id=f"ch-{durable_id}", max_queued=1)
        register(client.client)
        disconnect(client.client, f"ch-{durable_id}")
    cache_services.entry_putall(region="prices", entries={"a": 1, "b": 2})
    fanout.fanout_node(HERE)
    counters_flush()  # what a node's process does every FLUSH_S
    assert DurableClient.objects.filter(gap_since__isnull=False).count() == 2
    DurableClient.objects.filter(durable_id="d2").update(gap_since=None)
    page = dom(op.get("/dashboard/"))
    rows = {tr.attrs["data-node"]: cells(tr) for tr in body_rows(page, "nodes")}
    assert rows[HERE][6] == "2"
    assert rows["node-2"][6] == "1"
    assert page.by_id("clients-with-gap").text() == "1"
    assert page.by_id("overflows-total").text() == "3"
    assert "with a gap now" in page.by_id("overflows").text()


def test_overview_recent_activity_shows_the_history_newest_first(user, op):
    client = hello(user, "d1").client
    disconnect(client)
    hello(user, "d2", socket_id="ch-2")
    page = dom(op.get("/dashboard/"))
    items = page.by_id("activity").find_all("li")
    assert [(li.find("a").text(), li.find("span").text()) for li in items] == [
        ("d2", "connected"),
        ("d1", "disconnected"),
        ("d1", "connected"),
    ]
    assert items[0].find("a").attrs["href"] == "/dashboard/clients/d2/"
    assert HERE in items[0].text()


def test_overview_with_no_history_says_so(op):
    page = dom(op.get("/dashboard/"))
    assert page.by_id("activity").text() == "Nothing yet."


def test_counts_are_connected_disconnected_and_expired_in_the_last_hour(user, op):
    hello(user, "c1", socket_id="ch-1")
    hello(user, "c2", socket_id="ch-2")
    disconnect(hello(user, "gone-soon", socket_id="ch-3").client, channel="ch-3")
    hello(user, None, socket_id="ch-4")  # not durable: not counted
    LostQueue.objects.create(durable_id="x1", reason="expired", owner=user)
    old = LostQueue.objects.create(durable_id="x2", reason="expired", owner=user)
    LostQueue.objects.filter(pk=old.pk).update(
        lost_at=timezone.now() - timedelta(hours=1, minutes=1)
    )
    LostQueue.objects.create(durable_id="x3", reason="lost", owner=user)
    response = op.get("/dashboard/counts.json")
    assert response.json() == {"connected": 2, "disconnected": 1, "expired": 1}
    page = dom(op.get("/dashboard/clients/"))
    assert page.by_id("count-connected").text() == "2"
    assert page.by_id("count-disconnected").text() == "1"
    assert page.by_id("count-expired").text() == "1"


# --- the clients list ---------------------------------------------------------


@pytest.fixture
def mixed(user, other_user):
    """Connected c-1 (alice), disconnected d-1 (bob), lost queues x-1 and y-1."""
    hello(user, "c-1")
    disconnect(hello(other_user, "d-1", socket_id="ch-2").client, channel="ch-2")
    LostQueue.objects.create(durable_id="x-1", reason="expired", owner=user)
    LostQueue.objects.create(durable_id="y-1", reason="lost", owner=user)


@pytest.mark.parametrize(
    ("state", "ids"),
    [
        ("", ["c-1", "d-1"]),
        ("connected", ["c-1"]),
        ("disconnected", ["d-1"]),
        ("expired", ["x-1"]),
        ("nonsense", ["c-1", "d-1"]),
    ],
)
def test_clients_state_filter(mixed, op, state, ids):
    page = dom(op.get("/dashboard/clients/", {"state": state}))
    assert listed_ids(page) == ids
    options = page.find("select").find_all("option")
    (selected,) = [o for o in options if "selected" in o.attrs]
    assert selected.attrs["value"] == ("" if state == "nonsense" else state)


def test_clients_rows_show_owner_state_and_placement(mixed, op):
    page = dom(op.get("/dashboard/clients/"))
    rows = {tr.attrs["data-durable-id"]: cells(tr) for tr in body_rows(page, "clients")}
    assert rows["c-1"][:5] == ["c-1", "alice", "connected", HERE, HERE]
    # A disconnected client still shows the node it was last connected to.
    assert rows["d-1"][:5] == ["d-1", "bob", "disconnected", HERE, HERE]


def test_expired_list_shows_owner_and_links_to_the_history(mixed, op):
    page = dom(op.get("/dashboard/clients/", {"state": "expired"}))
    (row,) = body_rows(page, "clients")
    assert cells(row)[:2] == ["x-1", "alice"]
    assert row.find("a").attrs["href"] == "/dashboard/clients/x-1/"


def test_clients_search_is_a_case_insensitive_substring(user, op):
    for name in ("Alpha-1", "alpha-2", "beta-1", "gamma-ALPHA"):
        DurableClient.objects.create(durable_id=name, owner=user)
    page = dom(op.get("/dashboard/clients/", {"q": "ALPHA"}))
    assert listed_ids(page) == ["Alpha-1", "alpha-2", "gamma-ALPHA"]
    assert page.find("input", name="q").attrs["value"] == "ALPHA"
    assert listed_ids(dom(op.get("/dashboard/clients/", {"q": "ha-2"}))) == ["alpha-2"]
    page = dom(op.get("/dashboard/clients/", {"q": "zeta"}))
    assert listed_ids(page) == []
    assert page.by_id("clients").find("tbody").text() == "No durable client matches."


def test_clients_search_within_a_state_and_the_expired_list(user, op):
    hello(user, "app-on")
    disconnect(hello(user, "app-off", socket_id="ch-2").client, channel="ch-2")
    LostQueue.objects.create(durable_id="app-lost", reason="expired", owner=user)
    LostQueue.objects.create(durable_id="web-lost", reason="expired", owner=user)
    query = {"state": "disconnected", "q": "APP"}
    assert listed_ids(dom(op.get("/dashboard/clients/", query))) == ["app-off"]
    query = {"state": "expired", "q": "app"}
    assert listed_ids(dom(op.get("/dashboard/clients/", query))) == ["app-lost"]


def follow_next(browser, path, query=None):
    """Every page of the clients list: a list of id lists, and the hrefs."""
    pages, hrefs = [], []
    response = browser.get(path, query or {})
    while True:
        page = dom(response)
        pages.append(listed_ids(page))
        link = page.find("a", id="next-page")
        if link is None:
            return pages, hrefs
        assert link.text() == "Next page →"
        hrefs.append(link.attrs["href"])
        response = browser.get(urljoin(path, link.attrs["href"]))


def test_clients_paging_across_120_clients(user, op):
    ids = [f"c{i:03d}" for i in range(120)]
    for durable_id in reversed(ids):  # created out of order
        DurableClient.objects.create(durable_id=durable_id, owner=user)
    pages, hrefs = follow_next(op, "/dashboard/clients/")
    assert [len(p) for p in pages] == [client_pages.PAGE, client_pages.PAGE, 20]
    assert [i for p in pages for i in p] == ids
    assert hrefs == ["?after=c049", "?after=c099"]


def test_clients_paging_keeps_the_filter_and_the_search(user, op):
    ids = [f"c{i:03d}" for i in range(120)]
    DurableClient.objects.bulk_create(
        DurableClient(durable_id=d, owner=user, is_connected=i % 2 == 0)
        for i, d in enumerate(ids)
    )
    DurableClient.objects.create(durable_id="other", owner=user, is_connected=True)
    pages, hrefs = follow_next(
        op, "/dashboard/clients/", {"state": "connected", "q": "C"}
    )
    assert [len(p) for p in pages] == [50, 10]
    assert [i for p in pages for i in p] == ids[::2]
    assert hrefs == ["?state=connected&q=C&after=c098"]


def test_expired_list_pages_too(user, op):
    ids = [f"x{i:03d}" for i in range(60)]
    LostQueue.objects.bulk_create(
        LostQueue(durable_id=d, reason="expired", owner=user) for d in ids
    )
    pages, hrefs = follow_next(op, "/dashboard/clients/", {"state": "expired"})
    assert [i for p in pages for i in p] == ids
    assert hrefs == ["?state=expired&after=x049"]


def test_clients_show_queue_size_per_host_and_pending(user, op, region):
    client = hello(user).client
    register(client)
    cache_services.entry_putall(region="prices", entries={"a": 1, "b": 2})
    fanout.fanout_node(HERE)
    DurableClient.objects.filter(pk=client.pk).update(secondaries=["node-2"])
    QueueSizeReport.objects.create(client=client, node="node-2", size=7)
    QueueSizeReport.objects.create(client=client, node="node-3", size=99)  # not a host
    page = dom(op.get("/dashboard/clients/"))
    (row,) = body_rows(page, "clients")
    sizes = row.find("td", class_="sizes").text()
    assert sorted(sizes.split(", ")) == [f"{HERE}: 2", "node-2: 7"]
    assert row.find("td", class_="pending").text() == "2"
    assert row.find("td", class_="secondaries").text() == "node-2"


def test_a_client_with_a_gap_is_marked_in_the_list_and_on_its_page(user, op):
    client = hello(user).client
    DurableClient.objects.filter(pk=client.pk).update(
        gap_since=41, gap_dropped=5, gap_reason="overflow", max_queued=5
    )
    (row,) = body_rows(dom(op.get("/dashboard/clients/")), "clients")
    assert row.find("td", class_="pending").text() == "gap since 41, 5 dropped"
    page = op.get("/dashboard/clients/d1/").content.decode()
    assert "since seq 41, 5 event(s) dropped (overflow)" in page


def test_a_host_without_a_report_shows_zero(user, op):
    client = DurableClient.objects.create(
        durable_id="far", owner=user, primary="node-2", secondaries=["node-3"]
    )
    QueueSizeReport.objects.create(client=client, node="node-2", size=4)
    (row,) = body_rows(dom(op.get("/dashboard/clients/")), "clients")
    sizes = row.find("td", class_="sizes").text()
    assert sorted(sizes.split(", ")) == ["node-2: 4", "node-3: 0"]
    assert row.find("td", class_="pending").text() == "4"


def test_countdown_only_for_disconnected_clients(user, op):
    hello(user, "on")
    off = disconnect(
        hello(user, "off", socket_id="ch-2", timeout=90).client, channel="ch-2"
    )
    page = dom(op.get("/dashboard/clients/"))
    rows = {tr.attrs["data-durable-id"]: tr for tr in body_rows(page, "clients")}
    assert rows["on"].find("time") is None
    assert rows["on"].find("td", class_="expires").text() == "—"
    countdown = rows["off"].find("time")
    assert countdown.attrs["data-countdown"] == off.expires_at.isoformat()
    assert off.expires_at - off.disconnected_at == timedelta(seconds=90)
    assert len([e for e in page.iter() if "data-countdown" in e.attrs]) == 1


# --- one client's page --------------------------------------------------------


def test_client_page_lists_its_interests(user, op, region):
    cache_services.region_create(name="rates")
    client = hello(user).client
    register(client, keys=["a", "b"])
    register(client, region="rates", durable=False, regex="^eur")
    register(client, region="rates")
    page = dom(op.get("/dashboard/clients/d1/"))
    rows = body_rows(page, "interests")
    assert [cells(r)[:5] for r in rows] == [
        ["prices", "key", "a", "durable", "none"],
        ["prices", "key", "b", "durable", "none"],
        ["rates", "regex", "^eur", "not durable", "none"],
        ["rates", "all_keys", "(all keys)", "durable", "none"],
    ]
    pks = list(Interest.objects.order_by("id").values_list("pk", flat=True))
    assert [r.find("a").attrs["href"] for r in rows] == [
        f"/dashboard/clients/d1/interests/{pk}/remove/" for pk in pks
    ]


def test_client_page_lists_its_cqs_with_a_close_link(user, op, region):
    client = hello(user).client
    cq(client, "small", "value.qty < 5", durable=False)
    cq(client, "big", "SELECT * FROM /prices p WHERE p.qty > 100")
    page = dom(op.get("/dashboard/clients/d1/"))
    rows = body_rows(page, "cqs")
    assert [cells(r)[:4] for r in rows] == [
        ["big", "prices", "SELECT * FROM /prices p WHERE p.qty > 100", "durable"],
        ["small", "prices", "value.qty < 5", "not durable"],
    ]
    assert [r.find("a").attrs["href"] for r in rows] == [
        "/dashboard/clients/d1/cqs/big/close/",
        "/dashboard/clients/d1/cqs/small/close/",
    ]


def test_client_page_queue_shows_each_events_cq_list(user, op, region):
    client = hello(user).client
    cq(client, "big", "value.qty > 5")
    cq(client, "any", "value.qty > 0")
    cache_services.entry_put(region="prices", key="k", value={"qty": 7})
    cache_services.entry_put(region="prices", key="k", value={"qty": 2})
    fanout.fanout_node(HERE)
    page = dom(op.get("/dashboard/clients/d1/"))
    assert [cells(r)[6] for r in body_rows(page, "queue")] == [
        "any create, big create",
        "any update, big destroy",
    ]


def test_client_page_without_interests_says_so(user, op):
    hello(user)
    page = dom(op.get("/dashboard/clients/d1/"))
    assert page.by_id("cqs").find("tbody").text() == "No continuous query."
    assert page.by_id("interests").find("tbody").text() == "No interest."
    assert page.by_id("queue").find("tbody").text() == "Empty."


def test_client_page_peeks_at_the_queue_and_pages_with_after(user, op, region):
    client = hello(user).client
    register(client)
    keys = [f"k{i:02d}" for i in range(60)]
    events = cache_services.entry_putall(
        region="prices", entries={k: i for i, k in enumerate(keys)}
    )
    fanout.fanout_node(HERE)
    seqs = [e.seq for e in events]
    page = dom(op.get("/dashboard/clients/d1/"))
    rows = [cells(r) for r in body_rows(page, "queue")]
    assert [int(r[0]) for r in rows] == seqs[: client_pages.QUEUE_PAGE]
    assert rows[0][1:6] == ["create", "prices", "k00", "1", "0"]
    link = page.by_id("queue").parent.find("a", href=f"?after={seqs[49]}")
    assert link is not None
    assert link.text() == "Next page →"
    page = dom(op.get("/dashboard/clients/d1/", {"after": seqs[49]}))
    rows = [cells(r) for r in body_rows(page, "queue")]
    assert [int(r[0]) for r in rows] == seqs[50:]
    assert [r[3] for r in rows] == keys[50:]
    assert "Next page →" not in page.by_id("client").text()
    assert page.by_id("client-pending").text() == "60"


def test_client_page_shows_each_change_and_ignores_a_bad_after(user, op, region):
    client = hello(user).client
    register(client)
    cache_services.entry_put(region="prices", key="a", value={"x": [1, 2]})
    cache_services.entry_invalidate(region="prices", key="a")
    fanout.fanout_node(HERE)
    for after in ("", "junk"):
        page = dom(op.get("/dashboard/clients/d1/", {"after": after}))
        rows = [cells(r)[1:5] for r in body_rows(page, "queue")]
        assert rows == [
            ["create", "prices", "a", "1"],
            ["invalidate", "prices", "a", "2"],
        ]


def test_client_page_history_shows_connects_and_disconnects(user, op):
    client = hello(user).client
    disconnect(client)
    hello(user, socket_id="ch-2")
    page = dom(op.get("/dashboard/clients/d1/"))
    assert kinds(page) == ["connected", "disconnected", "connected"]
    assert page.by_id("client-state").text() == "connected"
    assert page.by_id("client-expires").text() == "— (connected)"


def test_a_disconnected_client_page_counts_down(user, op):
    client = disconnect(hello(user, timeout=120).client)
    page = dom(op.get("/dashboard/clients/d1/"))
    assert page.by_id("client-state").text() == "disconnected"
    countdown = page.by_id("client-expires").find("time")
    assert countdown.attrs["data-countdown"] == client.expires_at.isoformat()


def test_client_on_another_primary_links_there_and_reads_no_queue(user, op):
    node_row("node-2", url="http://node-2.test:8000/")
    client = DurableClient.objects.create(
        durable_id="d1", owner=user, primary="node-2", secondaries=[HERE]
    )
    # This node holds a copy; the page must not peek at it.
    queue_services.queue_ensure(client_id=client.id, durable_id="d1", conflate="false")
    page = dom(op.get("/dashboard/clients/d1/"))
    assert page.find(id="queue") is None
    link = page.find("a", href="http://node-2.test:8000/dashboard/clients/d1/")
    assert link is not None
    assert link.text() == "open this page there"


def test_client_state_json_of_a_connected_client(user, op, region):
    client = hello(user).client
    register(client)
    cache_services.entry_put(region="prices", key="a", value=1)
    fanout.fanout_node(HERE)
    DurableClient.objects.filter(pk=client.pk).update(
        secondaries=["node-2", "node-3"], syncing=["node-3"]
    )
    QueueSizeReport.objects.create(client=client, node="node-2", size=1)
    at = timezone.now() - timedelta(minutes=1)
    ClientSample.objects.create(durable_id="d1", node=HERE, at=at, size=3)
    assert op.get("/dashboard/clients/d1/state.json").json() == {
        "durable_id": "d1",
        "state": "connected",
        "node": HERE,
        "primary": HERE,
        "secondaries": ["node-2", "node-3"],
        "syncing": ["node-3"],
        "queue_sizes": {HERE: 1, "node-2": 1, "node-3": 0},
        "pending_events": 1,
        "expires_at": None,
        "series": [{"at": at.isoformat(), "size": 3, "node": HERE}],
    }


def test_client_state_json_of_a_disconnected_and_a_gone_client(user, op):
    client = disconnect(hello(user, timeout=60).client)
    state = op.get("/dashboard/clients/d1/state.json").json()
    assert (state["state"], state["node"]) == ("disconnected", HERE)
    assert state["expires_at"] == client.expires_at.isoformat()
    assert state["pending_events"] == 0
    assert state["series"] == []
    response = op.get("/dashboard/clients/nope/state.json")
    assert response.status_code == 404
    assert response.json() == {"durable_id": "nope", "state": "gone"}


def test_a_gone_client_is_a_404_page_that_still_shows_its_history(
    user, operator, op, django_capture_on_commit_callbacks
):
    client = hello(user).client
    disconnect(client)
    with django_capture_on_commit_callbacks(execute=True):
        client_services.client_delete(user=operator, durable_id="d1")
    page = dom(op.get("/dashboard/clients/d1/"), status=404)
    assert "no such durable client" in page.find("h1").text()
    assert kinds(page) == ["deleted", "disconnected", "connected"]
    assert "closed by olga" in page.by_id("history").text()


def test_a_never_seen_client_is_a_404_with_nothing_recorded(op):
    page = dom(op.get("/dashboard/clients/never/"), status=404)
    assert page.by_id("history").text() == "Nothing recorded."


# --- actions ------------------------------------------------------------------


def confirm_page(browser, path, title):
    page = dom(browser.get(path))
    assert page.find("h1").text() == title
    assert page.find("button", id="confirm") is not None
    return page


def test_close_a_client(user, op, region, django_capture_on_commit_callbacks):
    client = hello(user).client
    register(client)
    cache_services.entry_put(region="prices", key="a", value=1)
    fanout.fanout_node(HERE)
    assert queue_selectors.queue_size(client_id=client.id) == 1
    page = confirm_page(op, "/dashboard/clients/d1/close/", "Close d1?")
    cancel = page.find("a", class_="button")
    assert cancel.attrs["href"] == "/dashboard/clients/d1/"
    assert DurableClient.objects.filter(pk=client.pk).exists()  # not yet
    with django_capture_on_commit_callbacks(execute=True):
        response = op.post("/dashboard/clients/d1/close/")
    assert response.status_code == 302
    assert response["Location"] == "/dashboard/clients/"
    assert not DurableClient.objects.filter(pk=client.pk).exists()
    assert not Interest.objects.exists()
    assert queue_selectors.queue_size(client_id=client.id) == -2
    assert history_of("d1") == ["connected", "deleted"]
    assert not LostQueue.objects.exists()
    followed = op.get(response["Location"])
    assert notes(followed) == ["d1 closed; its queue is dropped everywhere."]


def test_closing_an_unknown_client_says_so(op):
    response = op.post("/dashboard/clients/nope/close/", follow=True)
    assert response.redirect_chain == [("/dashboard/clients/nope/", 302)]
    assert response.status_code == 404
    assert notes(response) == ["no durable client 'nope'"]


def test_remove_an_interest(user, op, region):
    client = hello(user).client
    first, second = register(client, keys=["a", "b"])
    path = f"/dashboard/clients/d1/interests/{first.pk}/remove/"
    page = confirm_page(op, path, "Remove this interest?")
    assert "region prices for key a" in page.find("p").text()
    response = op.post(path, follow=True)
    assert response.redirect_chain == [("/dashboard/clients/d1/", 302)]
    assert notes(response) == ["Interest removed."]
    assert list(Interest.objects.values_list("pk", flat=True)) == [second.pk]
    rows = body_rows(dom(response), "interests")
    assert [cells(r)[2] for r in rows] == ["b"]


def test_close_a_cq_as_an_operator(
    user, op, region, monkeypatch, django_capture_on_commit_callbacks
):
    told = []
    monkeypatch.setattr("queues.notify.cq_closed", lambda *args: told.append(args))
    client = hello(user).client
    register(client, keys=["a"])
    cq(client, "big", "value > 5")
    cq(client, "all", "value > 0")
    cache_services.entry_put(region="prices", key="a", value=9)  # all three
    cache_services.entry_put(region="prices", key="b", value=7)  # two CQs
    cache_services.entry_put(region="prices", key="c", value=3)  # "all" only
    fanout.fanout_node(HERE)
    assert queue_selectors.queue_size(client_id=client.id) == 3
    path = "/dashboard/clients/d1/cqs/all/close/"
    page = confirm_page(op, path, "Close the continuous query all?")
    assert page.find("a", class_="button").attrs["href"] == "/dashboard/clients/d1/"
    assert ContinuousQuery.objects.filter(name="all").exists()  # not yet
    with django_capture_on_commit_callbacks(execute=True):
        response = op.post(path)
    assert response.status_code == 302
    assert response["Location"] == "/dashboard/clients/d1/"
    response = op.get(response["Location"])
    assert notes(response) == ["Continuous query all closed."]
    assert list(ContinuousQuery.objects.values_list("name", flat=True)) == ["big"]
    assert told == [(client.id, "all", HERE)]  # connected: told at once
    # c was queued for "all" alone: dropped; a and b stay, without its name.
    assert [
        (e.key, e.cq)
        for e in queue_selectors.queue_entries_after(
            client_id=client.id, after=0, limit=10
        )
    ] == [
        ("a", [{"name": "big", "cq_op": "create"}]),
        ("b", [{"name": "big", "cq_op": "create"}]),
    ]
    page = dom(response)
    assert page.by_id("client-pending").text() == "2"
    assert [cells(r)[0] for r in body_rows(page, "cqs")] == ["big"]


@pytest.mark.parametrize(
    "path",
    [
        "/dashboard/clients/d1/cqs/nope/close/",  # not held
        "/dashboard/clients/d2/cqs/big/close/",  # another client's
        "/dashboard/clients/gone/cqs/big/close/",  # no such client
        "/dashboard/clients/d1/cqs/bad%20name/close/",  # no CQ has that name
    ],
)
def test_closing_a_cq_the_client_does_not_hold_is_a_404(
    user, other_user, op, region, path
):
    cq(hello(user).client, "big", "value > 5")
    hello(other_user, "d2", socket_id="ch-2")
    before = snapshot()
    assert op.get(path).status_code == 404
    assert op.post(path).status_code == 404
    assert snapshot() == before


def test_removing_an_unknown_interest_changes_nothing(user, other_user, op, region):
    (mine,) = register(hello(user).client, keys=["a"])
    hello(other_user, "d2", socket_id="ch-2")
    # d1's interest asked for under d2: not d2's, so not removed.
    response = op.post(
        f"/dashboard/clients/d2/interests/{mine.pk}/remove/", follow=True
    )
    assert response.redirect_chain == [("/dashboard/clients/d2/", 302)]
    assert notes(response) == [f"no interest {mine.pk} of d2"]
    assert Interest.objects.filter(pk=mine.pk).exists()
    response = op.get(
        f"/dashboard/clients/gone/interests/{mine.pk}/remove/", follow=True
    )
    assert response.redirect_chain == [("/dashboard/clients/", 302)]
    assert notes(response) == ["no durable client 'gone'"]


def test_create_a_region(op):
    page = dom(op.get("/dashboard/regions/"))
    assert page.by_id("new-region").find("input", name="name") is not None
    response = op.post(
        "/dashboard/regions/", {"name": "eur", "conflate_events": "on"}, follow=True
    )
    assert response.redirect_chain == [("/dashboard/regions/", 302)]
    assert notes(response) == ["Region eur created."]
    assert Region.objects.get(name="eur").conflate_events is True
    op.post("/dashboard/regions/", {"name": "usd"})
    assert Region.objects.get(name="usd").conflate_events is False
    rows = [cells(r)[:3] for r in body_rows(dom(response), "regions")]
    assert rows == [["eur", "0", "yes"]]


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("bad name", "region name must be 1-128 characters of A-Z a-z 0-9 . _ : -"),
        ("", "region name must be 1-128 characters of A-Z a-z 0-9 . _ : -"),
        ("x" * 129, "region name must be 1-128 characters of A-Z a-z 0-9 . _ : -"),
        ("prices", "region 'prices' already exists"),
    ],
    ids=["space", "empty", "too-long", "exists"],
)
def test_a_bad_region_name_is_an_error_message(op, region, name, error):
    response = op.post("/dashboard/regions/", {"name": name}, follow=True)
    assert response.status_code == 200
    assert notes(response) == [error]
    assert list(Region.objects.values_list("name", flat=True)) == ["prices"]
    page = dom(response)
    assert page.find("ul", class_="messages").text() == error


def test_regions_page_counts_live_entries(op, region):
    cache_services.region_create(name="empty")
    cache_services.entry_putall(region="prices", entries={"a": 1, "b": 2, "c": 3})
    cache_services.entry_destroy(region="prices", key="b")
    rows = [
        cells(r)[:3] for r in body_rows(dom(op.get("/dashboard/regions/")), "regions")
    ]
    assert rows == [["empty", "0", "no"], ["prices", "2", "no"]]


def test_region_page_lists_entries_and_pages_them(op, region):
    entries = {f"k{i:03d}": {"n": i} for i in range(55)}
    cache_services.entry_putall(region="prices", entries=entries)
    cache_services.entry_destroy(region="prices", key="k000")
    page = dom(op.get("/dashboard/regions/prices/"))
    rows = [cells(r) for r in body_rows(page, "entries")]
    assert [r[0] for r in rows] == [f"k{i:03d}" for i in range(1, 51)]
    assert rows[0][1:3] == ['{"n": 1}', "1"]
    link = page.find("a", href="?after=k050")
    assert link is not None
    page = dom(op.get("/dashboard/regions/prices/", {"after": "k050"}))
    assert [cells(r)[0] for r in body_rows(page, "entries")] == [
        f"k{i:03d}" for i in range(51, 55)
    ]
    page = dom(op.get("/dashboard/regions/prices/", {"prefix": "k05"}))
    assert [cells(r)[0] for r in body_rows(page, "entries")] == [
        f"k05{i}" for i in range(5)
    ]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": [1, 2.5, null]}', {"a": [1, 2.5, None]}),
        ('"text"', "text"),
        ("1.08", 1.08),
        ("null", None),
    ],
)
def test_put_an_entry_with_a_json_value(op, region, text, value):
    head = cache_selectors.event_log_head()
    response = op.post(
        "/dashboard/regions/prices/", {"key": "eur/usd", "value": text}, follow=True
    )
    assert response.redirect_chain == [("/dashboard/regions/prices/", 302)]
    entry = Entry.objects.get(region__name="prices", key="eur/usd")
    assert (entry.value, entry.version, entry.is_destroyed) == (value, 1, False)
    (event,) = Event.objects.filter(seq__gt=head)
    assert (event.op, event.key, event.value, event.version) == (
        "create",
        "eur/usd",
        value,
        1,
    )
    assert notes(response) == [f"eur/usd = {json.dumps(value)} (version 1)"]


def test_put_again_is_an_update(op, region):
    cache_services.entry_put(region="prices", key="a", value=1)
    op.post("/dashboard/regions/prices/", {"key": "a", "value": "2"})
    assert Event.objects.order_by("-seq").values_list("op", "value", "version")[0] == (
        "update",
        2,
        2,
    )


@pytest.mark.parametrize(
    ("key", "text", "error"),
    [
        ("a", "abc", "The value must be JSON (a string needs quotes)."),
        ("a", "", "The value must be JSON (a string needs quotes)."),
        ("a", "{'a': 1}", "The value must be JSON (a string needs quotes)."),
        ("", "1", "key must be a string of 1-512 characters"),
    ],
    ids=["bare-word", "empty", "single-quotes", "no-key"],
)
def test_a_bad_put_is_an_error_message_and_writes_nothing(op, region, key, text, error):
    head = cache_selectors.event_log_head()
    response = op.post(
        "/dashboard/regions/prices/", {"key": key, "value": text}, follow=True
    )
    assert response.status_code == 200
    assert notes(response) == [error]
    assert not Entry.objects.exists()
    assert cache_selectors.event_log_head() == head


def test_invalidate_an_entry(op, region):
    cache_services.entry_put(region="prices", key="a", value=1)
    path = "/dashboard/regions/prices/entries/invalidate/?key=a"
    page = confirm_page(op, path, "Invalidate 'a' in prices?")
    assert hidden_inputs(page)["key"] == "a"
    head = cache_selectors.event_log_head()
    response = op.post(
        "/dashboard/regions/prices/entries/invalidate/", {"key": "a"}, follow=True
    )
    assert response.redirect_chain == [("/dashboard/regions/prices/", 302)]
    assert notes(response) == ["Invalidate: a (version 2)."]
    entry = Entry.objects.get(key="a")
    assert (entry.value, entry.version, entry.is_destroyed) == (None, 2, False)
    (event,) = Event.objects.filter(seq__gt=head)
    assert (event.op, event.key, event.value, event.version) == (
        "invalidate",
        "a",
        None,
        2,
    )


def test_destroy_a_key_with_a_slash(op, region):
    cache_services.entry_put(region="prices", key="a/b", value=1)
    cache_services.entry_put(region="prices", key="a", value=2)
    region_page = dom(op.get("/dashboard/regions/prices/"))
    hrefs = [a.attrs["href"] for a in region_page.by_id("entries").find_all("a")]
    assert "/dashboard/regions/prices/entries/destroy/?key=a%2Fb" in hrefs
    path = "/dashboard/regions/prices/entries/destroy/?key=a%2Fb"
    page = confirm_page(op, path, "Destroy 'a/b' in prices?")
    assert hidden_inputs(page)["key"] == "a/b"
    head = cache_selectors.event_log_head()
    response = op.post(
        "/dashboard/regions/prices/entries/destroy/", {"key": "a/b"}, follow=True
    )
    assert notes(response) == ["Destroy: a/b (version 2)."]
    assert Entry.objects.get(key="a/b").is_destroyed is True
    assert Entry.objects.get(key="a").is_destroyed is False
    (event,) = Event.objects.filter(seq__gt=head)
    assert (event.op, event.key, event.region) == ("destroy", "a/b", "prices")
    assert [cells(r)[0] for r in body_rows(dom(response), "entries")] == ["a"]


def test_keys_and_values_are_shown_as_text(op, region):
    key = '<b id="k">x</b>&"'
    cache_services.entry_put(region="prices", key=key, value="<i id='v'>y</i>")
    page = dom(op.get("/dashboard/regions/prices/"))
    assert page.find(id="k") is None
    assert page.find(id="v") is None
    (row,) = body_rows(page, "entries")
    assert cells(row)[:2] == [key, "\"<i id='v'>y</i>\""]
    hrefs = [a.attrs["href"] for a in row.find_all("a")]
    assert hrefs[1] == (
        "/dashboard/regions/prices/entries/destroy/?key=" + quote(key, safe="")
    )
    page = dom(op.get(hrefs[1]))
    assert hidden_inputs(page)["key"] == key
    assert page.find("h1").text() == f"Destroy {key!r} in prices?"


@pytest.mark.parametrize(
    ("path", "data", "error"),
    [
        (
            "entries/destroy/",
            {"key": "missing"},
            "no entry 'missing' in region 'prices'",
        ),
        ("entries/invalidate/", {}, "no key given"),
        ("entries/rename/", {"key": "a"}, "unknown action 'rename'"),
    ],
    ids=["missing-key", "no-key", "unknown-action"],
)
def test_a_bad_entry_action_is_an_error_message(op, region, path, data, error):
    cache_services.entry_put(region="prices", key="a", value=1)
    head = cache_selectors.event_log_head()
    response = op.post(f"/dashboard/regions/prices/{path}", data, follow=True)
    assert response.redirect_chain == [("/dashboard/regions/prices/", 302)]
    assert notes(response) == [error]
    assert cache_selectors.event_log_head() == head


def test_clear_a_region(op, region):
    cache_services.entry_putall(region="prices", entries={"a": 1, "b": 2})
    confirm_page(op, "/dashboard/regions/prices/clear/", "Clear region prices?")
    head = cache_selectors.event_log_head()
    response = op.post("/dashboard/regions/prices/clear/", follow=True)
    assert response.redirect_chain == [("/dashboard/regions/prices/", 302)]
    assert notes(response) == ["Region prices cleared."]
    assert Region.objects.filter(name="prices").exists()
    assert list(Entry.objects.values_list("is_destroyed", flat=True)) == [True, True]
    (event,) = Event.objects.filter(seq__gt=head)
    assert (event.op, event.region, event.key) == ("region_clear", "prices", None)
    assert body_rows(dom(response), "entries")[0].text() == "No entry."


def test_destroy_a_region(op, region):
    cache_services.entry_put(region="prices", key="a", value=1)
    page = confirm_page(
        op, "/dashboard/regions/prices/destroy/", "Destroy region prices?"
    )
    assert page.find("a", class_="button").attrs["href"] == "/dashboard/regions/prices/"
    head = cache_selectors.event_log_head()
    response = op.post("/dashboard/regions/prices/destroy/", follow=True)
    assert response.redirect_chain == [("/dashboard/regions/", 302)]
    assert notes(response) == ["Region prices destroyed."]
    assert not Region.objects.exists()
    assert not Entry.objects.exists()
    (event,) = Event.objects.filter(seq__gt=head)
    assert (event.op, event.region) == ("region_destroy", "prices")


def test_clearing_or_destroying_an_unknown_region_changes_nothing(op):
    for action in ("clear", "destroy"):
        response = op.post(f"/dashboard/regions/nope/{action}/")
        assert response.status_code == 302
        assert response["Location"] == "/dashboard/regions/nope/"
        # The message waits in the session for the next page shown.
        stored = [str(m) for m in response.wsgi_request._messages]
        assert stored[-1] == "region 'nope' does not exist"
    assert Event.objects.count() == 0


# --- history ------------------------------------------------------------------


def page_kinds(browser, durable_id):
    response = browser.get(f"/dashboard/clients/{durable_id}/")
    assert response.status_code in (200, 404)
    return kinds(dom(response, status=response.status_code))


def test_history_of_connect_disconnect_and_close(user, op):
    client = hello(user).client
    disconnect(client)
    hello(user, socket_id="ch-2")
    client_services.client_close(client_id=client.id, socket_id="ch-2", keepalive=False)
    assert not DurableClient.objects.exists()
    assert not LostQueue.objects.exists()
    assert history_of("d1") == ["connected", "disconnected", "connected", "closed"]
    assert page_kinds(op, "d1") == ["closed", "connected", "disconnected", "connected"]
    closed = ClientHistory.objects.get(kind="closed")
    assert (closed.node, closed.detail) == (HERE, "close with keepalive false")


def test_history_of_a_keepalive_close_is_a_disconnect(user, op):
    client = hello(user).client
    client_services.client_close(client_id=client.id, socket_id="ch-1", keepalive=True)
    assert history_of("d1") == ["connected", "disconnected"]
    assert page_kinds(op, "d1") == ["disconnected", "connected"]


def test_history_of_a_delete(user, operator, op):
    hello(user)
    client_services.client_delete(user=operator, durable_id="d1")
    assert history_of("d1") == ["connected", "deleted"]
    assert page_kinds(op, "d1") == ["deleted", "connected"]
    assert ClientHistory.objects.get(kind="deleted").detail == "closed by olga"


def test_history_of_an_expiry(user, op):
    client = disconnect(hello(user, timeout=30).client)
    DurableClient.objects.filter(pk=client.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert client_services.clients_expire() == 1
    assert history_of("d1") == ["connected", "disconnected", "expired"]
    assert page_kinds(op, "d1") == ["expired", "disconnected", "connected"]
    assert ClientHistory.objects.get(kind="expired").detail == "away over 30 s"
    assert LostQueue.objects.get(durable_id="d1").reason == "expired"
    assert op.get("/dashboard/counts.json").json()["expired"] == 1
    assert listed_ids(dom(op.get("/dashboard/clients/", {"state": "expired"}))) == [
        "d1"
    ]


def test_a_client_not_yet_due_does_not_expire(user):
    disconnect(hello(user, timeout=30).client)
    assert client_services.clients_expire() == 0
    assert history_of("d1") == ["connected", "disconnected"]


def test_history_of_a_failover(user, op):
    node_row(HERE, down=True, url=f"http://{HERE}.test:8000")
    node_row("node-2", url="http://node-2.test:8000")
    client = DurableClient.objects.create(
        durable_id="d1", owner=user, primary=HERE, secondaries=["node-2"]
    )
    members = placement.Membership.read()
    assert replication.fix_placement(client.id, members, Counter()) is True
    client.refresh_from_db()
    assert (client.primary, client.secondaries) == ("node-2", [])
    assert history_of("d1") == ["failover"]
    row = ClientHistory.objects.get()
    assert row.detail == f"primary {HERE} -> node-2"
    assert row.node == "node-2"
    assert page_kinds(op, "d1") == ["failover"]
    activity = dom(op.get("/dashboard/")).by_id("activity")
    assert "failover" in activity.text()
    assert "node-2" in activity.text()


def test_no_failover_history_without_a_complete_secondary(user):
    node_row(HERE, down=True, url=f"http://{HERE}.test:8000")
    node_row("node-2", url="http://node-2.test:8000")
    client = DurableClient.objects.create(
        durable_id="d1",
        owner=user,
        primary=HERE,
        secondaries=["node-2"],
        syncing=["node-2"],
    )
    members = placement.Membership.read()
    assert replication.fix_placement(client.id, members, Counter()) is False
    assert history_of("d1") == []


def test_non_durable_clients_leave_no_history(user):
    client = hello(user, None).client
    client_services.client_disconnected(client_id=client.id, socket_id="ch-1")
    assert not ClientHistory.objects.exists()


# --- samples and charts -------------------------------------------------------


def test_sample_records_the_node_and_the_queues_it_is_primary_of(user, op, region):
    cache_services.node_register(name=HERE, url="http://127.0.0.1:8000")
    Node.objects.filter(name=HERE).update(delivered_total=5)
    p1 = hello(user, "p1").client
    p2 = hello(user, "p2", socket_id="ch-2").client
    anonymous = hello(user, None, socket_id="ch-3").client
    copy = DurableClient.objects.create(durable_id="copy", owner=user, primary="node-2")
    queue_services.queue_ensure(client_id=copy.id, durable_id="copy", conflate="false")
    for client in (p1, anonymous, copy):
        register(client, durable=client.is_durable)
    register(p2, keys=["a"])
    cache_services.entry_putall(region="prices", entries={"a": 1, "b": 2, "c": 3})
    fanout.fanout_node(HERE)
    assert samples.sample(HERE) is True
    node = NodeSample.objects.get()
    assert node.node == HERE
    assert (node.queued_events, node.hosted_queues) == (3 + 1 + 3 + 3, 4)
    assert (node.log_head, node.delivered_total) == (
        cache_selectors.event_log_head(),
        5,
    )
    client_samples = sorted(
        ClientSample.objects.values_list("durable_id", "node", "size")
    )
    assert client_samples == [("p1", HERE, 3), ("p2", HERE, 1)]
    assert {s.at for s in ClientSample.objects.all()} == {node.at}
    # Again within SAMPLE_S: nothing taken.
    assert samples.sample(HERE) is False
    assert (NodeSample.objects.count(), ClientSample.objects.count()) == (1, 2)
    # Once the last sample is SAMPLE_S old, the next one is taken.
    NodeSample.objects.update(at=node.at - timedelta(seconds=samples.SAMPLE_S))
    assert samples.sample(HERE) is True
    assert (NodeSample.objects.count(), ClientSample.objects.count()) == (2, 4)
    series = client_selectors.client_series(durable_id="p1")
    assert [p["size"] for p in series] == [3, 3]


def test_sample_of_another_node_is_its_own_and_old_samples_are_pruned(user):
    old = timezone.now() - samples.SAMPLE_RETENTION - timedelta(minutes=1)
    NodeSample.objects.create(node=HERE, at=old)
    NodeSample.objects.create(node="node-2", at=old)
    ClientSample.objects.create(durable_id="d1", node=HERE, at=old)
    assert samples.sample(HERE) is True
    # node-1's old sample is pruned, node-2's is left to node-2.
    kept = sorted(
        (n, at > old) for n, at in NodeSample.objects.values_list("node", "at")
    )
    assert kept == [(HERE, True), ("node-2", False)]
    assert not ClientSample.objects.filter(at=old).exists()
    # node-1's fresh sample does not hold node-2 back.
    assert samples.sample("node-2") is True
    kept = sorted(
        (n, at > old) for n, at in NodeSample.objects.values_list("node", "at")
    )
    assert kept == [(HERE, True), ("node-2", True)]


def test_node_series_rates_from_samples(op):
    t0 = timezone.now() - timedelta(minutes=5)
    NodeSample.objects.create(
        node=HERE, at=timezone.now() - timedelta(minutes=45), log_head=1
    )  # outside the 30 minutes
    NodeSample.objects.create(
        node=HERE, at=t0, queued_events=3, log_head=100, delivered_total=10
    )
    NodeSample.objects.create(
        node="node-2", at=t0 + timedelta(seconds=5), queued_events=9, log_head=120
    )
    NodeSample.objects.create(
        node=HERE,
        at=t0 + timedelta(seconds=10),
        queued_events=5,
        log_head=150,
        delivered_total=40,
    )
    NodeSample.objects.create(
        node=HERE,
        at=t0 + timedelta(seconds=20),
        queued_events=0,
        log_head=157,
        delivered_total=35,  # a counter never goes back; shown as 0
    )
    series = client_selectors.node_series(minutes=30)
    assert series == {
        HERE: [
            {"at": t0.isoformat(), "queued": 3, "in": None, "out": None},
            {
                "at": (t0 + timedelta(seconds=10)).isoformat(),
                "queued": 5,
                "in": 5.0,
                "out": 3.0,
            },
            {
                "at": (t0 + timedelta(seconds=20)).isoformat(),
                "queued": 0,
                "in": 0.7,
                "out": 0.0,
            },
        ],
        "node-2": [
            {
                "at": (t0 + timedelta(seconds=5)).isoformat(),
                "queued": 9,
                "in": None,
                "out": None,
            }
        ],
    }
    assert op.get("/dashboard/nodes.json").json()["nodes"] == series


def test_client_series_is_the_clients_depth_in_time_order(op, user):
    now = timezone.now()
    at = [now - timedelta(minutes=m) for m in (40, 20, 10, 1)]
    ClientSample.objects.create(durable_id="d1", node=HERE, at=at[0], size=9)
    ClientSample.objects.create(durable_id="d1", node="node-2", at=at[2], size=4)
    ClientSample.objects.create(durable_id="d1", node=HERE, at=at[1], size=2)
    ClientSample.objects.create(durable_id="d2", node=HERE, at=at[3], size=7)
    assert client_selectors.client_series(durable_id="d1") == [
        {"at": at[1].isoformat(), "size": 2, "node": HERE},
        {"at": at[2].isoformat(), "size": 4, "node": "node-2"},
    ]
    assert client_selectors.client_series(durable_id="d1", minutes=60)[0]["size"] == 9
    assert client_selectors.client_series(durable_id="nope") == []


def test_an_unknown_region_page_sends_back_to_the_regions_list(operator):
    browser = DjangoClient()
    browser.force_login(operator)
    response = browser.get("/dashboard/regions/nope/", follow=True)
    assert response.redirect_chain[-1][0] == "/dashboard/regions/"
    assert "no region &#x27;nope&#x27;" in response.content.decode()


def test_clients_list_counts_each_clients_interests(operator, user, region):
    client = hello(user, "counted").client
    for key in ("a", "b", "c"):
        client_services.interest_register(
            client=client,
            region="prices",
            selector=parse_selector({"keys": [key]}),
            is_durable=True,
            policy="none",
        )
    browser = DjangoClient()
    browser.force_login(operator)
    body = browser.get("/dashboard/clients/").content.decode()
    assert re.search(
        r'data-durable-id="counted".*?<td class="interests">3</td>', body, re.S
    )
