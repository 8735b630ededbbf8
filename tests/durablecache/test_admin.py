"""The Django admin: every model registered, writes only through services."""

from datetime import timedelta

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.test import Client as DjangoClient
from django.urls import reverse
from django.utils import timezone
from rest_framework.authtoken.models import TokenProxy

from cache import services as cache_services
from cache.models import Entry, Event, EventLog, Node, Region
from clients import fanout
from clients import services as client_services
from clients.matching import parse_selector
from clients.models import (
    ContinuousQuery,
    DurableClient,
    Interest,
    LostQueue,
    QueueSizeReport,
)
from queues import notify
from queues.models import FanoutCursor, QueuedEvent, QueueEntry, QueueState

pytestmark = pytest.mark.django_db(databases=["default", "node"])

OURS = [
    Region,
    Entry,
    Event,
    EventLog,
    Node,
    DurableClient,
    Interest,
    ContinuousQuery,
    LostQueue,
    QueueSizeReport,
    QueueState,
    QueueEntry,
    QueuedEvent,
    FanoutCursor,
]


def url(model, view="changelist", *args):
    opts = model._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_{view}", args=args)


def act(browser, model, action, objs, **extra):
    """Run an admin action on ``objs`` from the changelist (no confirmation)."""
    return browser.post(
        url(model),
        {"action": action, "_selected_action": [o.pk for o in objs], "index": "0"}
        | extra,
        follow=True,
    )


def notes(response):
    """The messages shown on the (followed) page, as plain text."""
    return [str(m) for m in response.context["messages"]]


def body(response):
    assert response.status_code == 200, response.status_code
    return response.content.decode()


@pytest.fixture
def browser(operator):
    """The operator as ``issue_token --operator`` makes one, logged in."""
    operator.is_superuser = True
    operator.save(update_fields=["is_superuser"])
    browser = DjangoClient()
    browser.force_login(operator)
    return browser


@pytest.fixture
def world(user, region):
    """A little of everything, made the way the system makes it."""
    cache_services.node_register(name="node-1", url="http://127.0.0.1:8000")
    gone = cache_services.node_register(name="node-9", url="http://127.0.0.1:8009")
    Node.objects.filter(pk=gone.pk).update(
        last_heartbeat=timezone.now() - timedelta(hours=1)
    )
    options = client_services.parse_hello_options({"durable_id": "orders"})
    client = client_services.client_hello(
        user=user, socket_id="ch-1", options=options
    ).client
    (interest,) = client_services.interest_register(
        client=client,
        region="prices",
        selector=parse_selector({"keys": ["apple"]}),
        is_durable=True,
        policy="keys_values",
    )
    entry, _ = cache_services.entry_put(region="prices", key="apple", value=3)
    cache_services.entry_put(region="prices", key="pear", value=4)
    fanout.fanout_node("node-1")
    QueueSizeReport.objects.create(client=client, node="node-1", size=1)
    cq = client_services.cq_register(
        client=client, name="big", region="prices", query="value > 3", durable=True
    )
    lost = LostQueue.objects.create(
        durable_id="old-orders", owner=user, reason="expired"
    )
    return {
        "client": client,
        "interest": interest,
        "cq": cq,
        "entry": entry,
        "lost": lost,
        "state": QueueState.objects.get(pk=client.id),
        "queue_entry": QueueEntry.objects.get(queue_id=client.id),
        "queued_event": QueuedEvent.objects.get(key="apple"),
        "cursor": FanoutCursor.objects.get(node="node-1"),
        "event": Event.objects.get(key="apple"),
        "log": EventLog.objects.get(pk=1),
        "up": Node.objects.get(name="node-1"),
        "down": Node.objects.get(name="node-9"),
        "report": QueueSizeReport.objects.get(),
    }


# -- registrations and pages ------------------------------------------------


def test_every_model_is_registered_and_drf_tokens_stay_registered():
    for model in OURS:
        assert admin.site.is_registered(model), model
    assert admin.site.is_registered(TokenProxy)


# (model, search, filter, text expected on the page)
CHANGELISTS = [
    (Region, "pri", {"conflate_events__exact": "0"}, "prices"),
    (Entry, "app", {"is_destroyed__exact": "0"}, "apple"),
    (Event, "apple", {"op__exact": "create"}, "apple"),
    (EventLog, None, {}, "Event logs"),
    (Node, "node", {"status": "down"}, "node-9"),
    (DurableClient, "ord", {"is_connected__exact": "1"}, "orders"),
    (Interest, "apple", {"kind__exact": "key"}, "apple"),
    (ContinuousQuery, "orders", {"is_durable__exact": "1"}, "value &gt; 3"),
    (LostQueue, "old", {"reason": "expired"}, "old-orders"),
    (QueueSizeReport, "orders", {"node": "node-1"}, "orders"),
    (QueueState, "orders", {"is_synced__exact": "1"}, "orders"),
    (QueueEntry, "apple", {"op": "create"}, "apple"),
    (QueuedEvent, "apple", {"op": "create"}, "apple"),
    (
        FanoutCursor,
        "node",
        {"updated_at__gte": str(timezone.now() - timedelta(days=1))},
        "node-1",
    ),
    (TokenProxy, "alice", {}, "alice"),
]


@pytest.mark.parametrize(
    ("model", "search", "filters", "text"),
    CHANGELISTS,
    ids=[m._meta.model_name for m, *_ in CHANGELISTS],
)
def test_changelist_with_search_and_filter(
    browser, world, token, model, search, filters, text
):
    params = dict(filters)
    if search is not None:
        params["q"] = search
    response = browser.get(url(model), params)
    assert text in body(response)  # 200 with the filter accepted (no ?e=1)
    if filters:
        assert list(response.context["cl"].result_list), "the filter hides the row"


def test_every_registered_model_of_ours_has_a_changelist_test():
    assert {m for m, *_ in CHANGELISTS} == {*OURS, TokenProxy}


@pytest.mark.parametrize(
    "name",
    [
        "entry",
        "event",
        "log",
        "up",
        "client",
        "interest",
        "cq",
        "lost",
        "report",
        "state",
        "queue_entry",
        "cursor",
    ],
)
def test_change_page_shows_the_row_read_only(browser, world, name):
    obj = world[name]
    page = body(browser.get(url(type(obj), "change", obj.pk)))
    assert 'name="_save"' not in page  # view only: nothing to save


def test_region_change_page_is_view_only(browser, region):
    page = body(browser.get(url(Region, "change", region.pk)))
    assert 'name="_save"' not in page


def test_system_written_rows_cannot_be_added(browser, world):
    for model in (Entry, Event, Node, DurableClient, Interest, QueueState):
        assert browser.get(url(model, "add")).status_code == 403, model
    for model in (ContinuousQuery,):
        assert browser.get(url(model, "add")).status_code == 403, model


def test_system_written_rows_cannot_be_deleted(browser, world):
    for name in ("event", "state", "queue_entry", "cursor", "report", "log"):
        obj = world[name]
        response = browser.post(url(type(obj), "delete", obj.pk), {"post": "yes"})
        assert response.status_code == 403, name


def test_queue_pages_say_they_show_this_nodes_store(browser, world):
    for model in (QueueState, QueueEntry, QueuedEvent, FanoutCursor):
        assert "store of node node-1 (this node only" in body(browser.get(url(model)))


def test_node_status_column_says_up_draining_and_down(browser, world):
    cache_services.node_drain(name="node-1")
    page = body(browser.get(url(Node), {"status": "draining"}))
    assert "node-1" in page
    assert "node-9" not in page
    page = body(browser.get(url(Node)))
    assert "draining" in page
    assert "down" in page


def test_plain_users_are_sent_to_the_admin_login(user):
    browser = DjangoClient()
    browser.force_login(user)
    for target in (reverse("admin:index"), url(Region), url(QueueState)):
        response = browser.get(target)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login"))


# -- regions -----------------------------------------------------------------


def test_region_add_goes_through_region_create(browser, db):
    response = browser.post(
        url(Region, "add"), {"name": "stock", "conflate_events": "on"}, follow=True
    )
    assert "was added successfully" in body(response)
    region = Region.objects.get(name="stock")
    assert region.conflate_events
    assert EventLog.objects.filter(pk=1).exists()  # region_create took the log lock


def test_region_add_rejects_bad_and_taken_names_in_the_form(browser, region):
    page = body(browser.post(url(Region, "add"), {"name": "no spaces"}))
    assert "region name must be" in page
    page = body(browser.post(url(Region, "add"), {"name": "prices"}))
    assert "already exists" in page
    assert Region.objects.count() == 1


def test_clear_action_appends_a_region_clear_event(browser, world, region):
    response = act(browser, Region, "clear_regions", [region])
    assert notes(response) == ["Cleared 1 region."]
    event = Event.objects.order_by("seq").last()
    assert (event.op, event.region, event.key) == ("region_clear", "prices", None)
    assert not Entry.objects.filter(region=region, is_destroyed=False).exists()


def test_region_delete_page_goes_through_region_destroy(browser, world, region):
    confirm = body(browser.get(url(Region, "delete", region.pk)))
    assert "apple" in confirm  # the entries that go with it are listed
    response = browser.post(url(Region, "delete", region.pk), {"post": "yes"})
    assert response.status_code == 302
    assert not Region.objects.exists()
    event = Event.objects.order_by("seq").last()
    assert (event.op, event.region) == ("region_destroy", "prices")


def test_delete_selected_regions_goes_through_region_destroy(browser, region, db):
    other = cache_services.region_create(name="stock")
    selected = [region.pk, other.pk]
    confirm = browser.post(
        url(Region), {"action": "delete_selected", "_selected_action": selected}
    )
    assert "Are you sure" in body(confirm)
    response = browser.post(
        url(Region),
        {"action": "delete_selected", "_selected_action": selected, "post": "yes"},
        follow=True,
    )
    assert notes(response) == ["Deleted 2 regions."]
    assert not Region.objects.exists()
    ops = list(Event.objects.order_by("seq").values_list("op", "region"))
    assert ops == [("region_destroy", "prices"), ("region_destroy", "stock")]


def test_service_actions_need_the_change_permission(region, django_user_model):
    staff = django_user_model.objects.create_user("vera", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_region"))
    browser = DjangoClient()
    browser.force_login(staff)
    assert "clear_regions" not in body(browser.get(url(Region)))
    act(browser, Region, "clear_regions", [region])
    assert not Event.objects.exists()
    staff.user_permissions.add(Permission.objects.get(codename="change_region"))
    assert "clear_regions" in body(browser.get(url(Region)))


# -- entries -----------------------------------------------------------------


def test_invalidate_action_bumps_the_version_and_logs_an_event(browser, world):
    entry = world["entry"]
    response = act(browser, Entry, "invalidate_entries", [entry])
    assert notes(response) == ["Invalidated 1 entry."]
    entry.refresh_from_db()
    assert (entry.version, entry.value, entry.is_destroyed) == (2, None, False)
    event = Event.objects.order_by("seq").last()
    assert (event.op, event.key, event.version) == ("invalidate", "apple", 2)


def test_destroy_action_destroys_and_reports_rows_already_gone(browser, world):
    entry = world["entry"]
    cache_services.entry_destroy(region="prices", key="pear")
    pear = Entry.objects.get(key="pear")
    response = act(browser, Entry, "destroy_entries", [entry, pear])
    assert notes(response) == [
        "prices:pear: no entry 'pear' in region 'prices'",
        "Destroyed 1 entry.",
    ]
    entry.refresh_from_db()
    assert entry.is_destroyed
    assert entry.version == 2
    assert Event.objects.filter(op="destroy", key="apple").exists()


def test_entry_delete_page_goes_through_entry_destroy(browser, world):
    entry = world["entry"]
    response = browser.post(url(Entry, "delete", entry.pk), {"post": "yes"})
    assert response.status_code == 302
    entry.refresh_from_db()  # the row stays: versions go on
    assert entry.is_destroyed
    assert Event.objects.order_by("seq").last().op == "destroy"


def test_entry_delete_of_a_destroyed_entry_is_an_error_message(browser, world):
    entry = world["entry"]
    cache_services.entry_destroy(region="prices", key="apple")
    before = Event.objects.count()
    response = browser.post(
        url(Entry, "delete", entry.pk), {"post": "yes"}, follow=True
    )
    assert notes(response) == ["no entry 'apple' in region 'prices'"]
    assert Event.objects.count() == before


# -- clients and interests -----------------------------------------------------


def test_close_action_deletes_the_client_and_drops_its_queue(
    browser, world, django_capture_on_commit_callbacks
):
    client = world["client"]
    with django_capture_on_commit_callbacks(execute=True):
        response = act(browser, DurableClient, "close_clients", [client])
    assert notes(response) == ["Closed 1 durable client."]
    assert not DurableClient.objects.filter(pk=client.pk).exists()
    assert not Interest.objects.exists()
    assert not QueueState.objects.filter(pk=client.pk).exists()  # dropped on commit
    assert list(LostQueue.objects.all()) == [world["lost"]]  # untouched


def test_client_delete_page_goes_through_client_delete(
    browser, world, django_capture_on_commit_callbacks
):
    client = world["client"]
    confirm = body(browser.get(url(DurableClient, "delete", client.pk)))
    assert "Are you sure" in confirm  # size reports do not block the page
    with django_capture_on_commit_callbacks(execute=True):
        response = browser.post(url(DurableClient, "delete", client.pk), {"post": "y"})
    assert response.status_code == 302
    assert not DurableClient.objects.exists()
    assert not QueueState.objects.exists()
    assert LostQueue.objects.count() == 1


def test_non_durable_clients_cannot_be_closed(browser, user):
    client = DurableClient.objects.create(owner=user, is_connected=True)
    response = act(browser, DurableClient, "close_clients", [client])
    assert notes(response) == [
        "skipped 1 non-durable client(s): they go with their socket"
    ]
    response = browser.post(
        url(DurableClient, "delete", client.pk), {"post": "yes"}, follow=True
    )
    assert "goes when its socket closes" in notes(response)[0]
    assert DurableClient.objects.filter(pk=client.pk).exists()


def test_interest_delete_goes_through_interest_delete(browser, world):
    interest = world["interest"]
    response = browser.post(url(Interest, "delete", interest.pk), {"post": "yes"})
    assert response.status_code == 302
    assert not Interest.objects.exists()
    assert DurableClient.objects.filter(pk=world["client"].pk).exists()


def test_delete_selected_interests(browser, world):
    interest = world["interest"]
    response = browser.post(
        url(Interest),
        {"action": "delete_selected", "_selected_action": [interest.pk], "post": "y"},
        follow=True,
    )
    assert notes(response) == ["Deleted 1 interest."]
    assert not Interest.objects.exists()


# -- continuous queries ----------------------------------------------------------


@pytest.fixture
def closed_cqs(monkeypatch):
    """The unsolicited ``cq_closed`` each operator's close sends."""
    sent = []
    monkeypatch.setattr(notify, "cq_closed", lambda *args: sent.append(args))
    return sent


def queued(client):
    return [
        (e.key, e.cq)
        for e in QueueEntry.objects.filter(queue_id=client.pk).order_by("seq")
    ]


def test_client_page_lists_its_cqs_read_only(browser, world):
    page = body(browser.get(url(DurableClient, "change", world["client"].pk)))
    assert "Continuous queries (close them from their own page)" in page
    assert "value &gt; 3" in page
    assert 'name="cqs-0-query"' not in page  # no form field: nothing to edit


def test_cq_change_page_has_no_form_to_edit_the_query(browser, world):
    page = body(browser.get(url(ContinuousQuery, "change", world["cq"].pk)))
    assert 'name="_save"' not in page
    assert 'name="query"' not in page
    assert (
        browser.post(
            url(ContinuousQuery, "change", world["cq"].pk), {"query": "true"}
        ).status_code
        == 403
    )
    assert ContinuousQuery.objects.get().query == "value > 3"


def test_close_cqs_action_goes_through_cq_close_as_an_operator(
    browser, world, closed_cqs, django_capture_on_commit_callbacks
):
    client, cq = world["client"], world["cq"]
    cache_services.entry_put(region="prices", key="plum", value=5)  # CQ only
    cache_services.entry_put(region="prices", key="apple", value=6)  # both
    fanout.fanout_node("node-1")
    assert queued(client)[1:] == [
        ("plum", [{"name": "big", "cq_op": "create"}]),
        ("apple", [{"name": "big", "cq_op": "create"}]),
    ]
    with django_capture_on_commit_callbacks(execute=True):
        response = act(browser, ContinuousQuery, "close_cqs", [cq])
    assert notes(response) == ["Closed 1 continuous query."]
    assert not ContinuousQuery.objects.exists()
    assert closed_cqs == [(client.pk, "big", client.node)]  # connected: told
    # "plum" was wanted by the CQ alone and goes; "apple" loses its name.
    assert queued(client) == [("apple", None), ("apple", None)]
    assert DurableClient.objects.filter(pk=client.pk).exists()


def test_cq_delete_page_closes_it_through_the_service(
    browser, world, closed_cqs, django_capture_on_commit_callbacks
):
    cq = world["cq"]
    confirm = body(browser.get(url(ContinuousQuery, "delete", cq.pk)))
    assert "Are you sure" in confirm
    with django_capture_on_commit_callbacks(execute=True):
        response = browser.post(url(ContinuousQuery, "delete", cq.pk), {"post": "y"})
    assert response.status_code == 302
    assert not ContinuousQuery.objects.exists()
    assert closed_cqs == [(cq.client.pk, "big", cq.client.node)]


def test_cq_changelist_offers_close_not_delete_selected(browser, world):
    page = body(browser.get(url(ContinuousQuery)))
    assert "Close selected CQs" in page
    assert "delete_selected" not in page


def test_lost_queue_rows_can_be_deleted(browser, world):
    lost = world["lost"]
    response = browser.post(url(LostQueue, "delete", lost.pk), {"post": "yes"})
    assert response.status_code == 302
    assert not LostQueue.objects.exists()


# -- nodes -------------------------------------------------------------------


def test_a_node_that_is_up_cannot_be_deleted(browser, world):
    up = world["up"]
    response = browser.post(url(Node, "delete", up.pk), {"post": "yes"}, follow=True)
    assert notes(response) == [
        "node node-1 is up: only a down node can be deleted "
        "(stop it first; see docs/operations.md)"
    ]
    assert Node.objects.filter(pk=up.pk).exists()


def test_a_down_node_is_retired_by_deleting_its_row(browser, world):
    up, down = world["up"], world["down"]
    response = browser.post(
        url(Node),
        {
            "action": "delete_selected",
            "_selected_action": [up.pk, down.pk],
            "post": "y",
        },
        follow=True,
    )
    first, second = notes(response)
    assert first.startswith("node-1: node node-1 is up")
    assert second == "Deleted 1 node."
    assert list(Node.objects.values_list("name", flat=True)) == ["node-1"]
