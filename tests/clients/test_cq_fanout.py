"""Continuous queries through the fan-out: the membership table, one queue
row per change with a sorted ``cq`` list, region ops and conflation."""

from datetime import timedelta

import pytest
from django.utils import timezone

from cache import services as cache_services
from clients import fanout, services
from clients.exceptions import BadQueryError
from clients.models import ContinuousQuery, DurableClient, EndedCq
from common.errors import ValidationError
from queues import selectors as queue_selectors
from queues import services as queue_services
from queues.models import QueueEntry
from queues.services import copies
from tests.helpers import connected_client, queued_rows

pytestmark = pytest.mark.django_db(databases=["default", "node"])


def _hello(user, durable_id):
    options = services.parse_hello_options({"durable_id": durable_id})
    return services.client_hello(
        user=user, socket_id=durable_id, options=options
    ).client


def _rows(client):
    return [
        (r.op, r.key, r.cq)
        for r in QueueEntry.objects.filter(queue_id=client.id).order_by("seq")
    ]


def _cq(client, name, query, *, durable=False, region="prices"):
    return services.cq_register(
        client=client, name=name, region=region, query=query, durable=durable
    )


def test_membership_table_gives_each_change_its_cq_op(user, region):
    client = _hello(user, "c")
    _cq(client, "big", "value.qty > 5")
    put = cache_services.entry_put
    put(region="prices", key="k", value={"qty": 1})  # no -> no: nothing
    put(region="prices", key="k", value={"qty": 7})  # no -> yes: create
    put(region="prices", key="k", value={"qty": 9})  # yes -> yes: update
    put(region="prices", key="k", value={"qty": 2})  # yes -> no: destroy
    put(region="prices", key="k", value={"qty": 8})  # create again
    cache_services.entry_destroy(region="prices", key="k")  # member destroyed
    put(region="prices", key="j", value={"qty": 8})
    cache_services.entry_invalidate(region="prices", key="j")  # member invalidated
    fanout.fanout_node("node-1")
    assert _rows(client) == [
        ("update", "k", [{"name": "big", "cq_op": "create"}]),
        ("update", "k", [{"name": "big", "cq_op": "update"}]),
        ("update", "k", [{"name": "big", "cq_op": "destroy"}]),
        ("update", "k", [{"name": "big", "cq_op": "create"}]),
        ("destroy", "k", [{"name": "big", "cq_op": "destroy"}]),
        ("create", "j", [{"name": "big", "cq_op": "create"}]),
        ("invalidate", "j", [{"name": "big", "cq_op": "destroy"}]),
    ]


def test_one_row_per_change_with_several_cqs_and_an_interest(user, region):
    client = connected_client(user, "c", keys=["k", "other"])
    _cq(client, "zeta", "value.qty > 5")
    _cq(client, "alpha", "value.qty > 0")
    cache_services.entry_put(region="prices", key="k", value={"qty": 7})
    cache_services.entry_put(region="prices", key="other", value={"qty": -1})
    cache_services.entry_put(region="prices", key="nobody", value={"qty": -1})
    fanout.fanout_node("node-1")
    assert _rows(client) == [
        (
            "create",
            "k",
            [{"name": "alpha", "cq_op": "create"}, {"name": "zeta", "cq_op": "create"}],
        ),
        ("create", "other", None),  # the interest's, no CQ moved
    ]
    assert _size(client) == 2  # each change counted once


def test_region_clear_reaches_every_cq_of_the_region(user, region):
    client = _hello(user, "c")
    _cq(client, "b", "value.qty > 5")
    _cq(client, "a", "key = 'x'")
    cache_services.region_clear(name="prices")
    fanout.fanout_node("node-1")
    assert _rows(client) == [
        (
            "region_clear",
            None,
            [
                {"name": "a", "cq_op": "region_clear"},
                {"name": "b", "cq_op": "region_clear"},
            ],
        )
    ]


def test_changes_before_registration_are_not_judged(user, region):
    client = _hello(user, "c")
    cache_services.entry_put(region="prices", key="k", value={"qty": 7})
    _cq(client, "big", "value.qty > 5")
    cache_services.entry_put(region="prices", key="k", value={"qty": 8})
    fanout.fanout_node("node-1")
    assert _rows(client) == [("update", "k", [{"name": "big", "cq_op": "update"}])]


def test_conflation_never_removes_an_entered_or_left_event(user):
    cache_services.region_create(name="prices", conflate_events=True)
    client = _hello(user, "c")
    _cq(client, "big", "value.qty > 5")
    for qty in (1, 2, 7, 8, 9, 3, 4):
        cache_services.entry_put(region="prices", key="k", value={"qty": qty})
    fanout.fanout_node("node-1")
    ops = [row[2][0]["cq_op"] for row in _rows(client)]
    # 7 entered and 3 left stay; 8 and 9 (update only) are conflated away
    # by the updates after them; 1, 2 and 4 moved no CQ.
    assert ops == ["create", "destroy"]


def test_same_definition_is_idempotent_and_another_is_bad_field(user, region):
    client = _hello(user, "c")
    first = _cq(client, "big", "value.qty > 5")
    again = _cq(client, "big", "SELECT * FROM /prices p WHERE p.qty > 5")
    assert again.pk == first.pk
    with pytest.raises(ValidationError):
        _cq(client, "big", "value.qty > 6")


def test_checks_come_in_order_bad_field_region_query(user, region):
    client = _hello(user, "c")
    with pytest.raises(ValidationError):
        _cq(client, "bad name!", "nonsense (", region="missing")
    with pytest.raises(Exception) as region_error:
        _cq(client, "ok", "nonsense (", region="missing")
    assert region_error.value.code == "no_such_region"
    with pytest.raises(BadQueryError, match="line 1, column"):
        _cq(client, "ok", "value.qty >")


def test_non_durable_cq_ends_with_the_socket_and_a_durable_one_stays(user, region):
    client = _hello(user, "c")
    _cq(client, "kept", "value.qty > 5", durable=True)
    _cq(client, "ends", "value.qty > 5")
    services.client_disconnected(client_id=client.id, socket_id="c")
    cache_services.entry_put(region="prices", key="k", value={"qty": 7})
    fanout.fanout_node("node-1")
    assert _rows(client) == [("create", "k", [{"name": "kept", "cq_op": "create"}])]
    assert DurableClient.objects.get(pk=client.pk).cqs.count() == 1


def test_closed_cq_is_named_by_no_later_event(user, region):
    client = _hello(user, "c")
    _cq(client, "big", "value.qty > 5")
    assert services.cq_close(client=client, name="big") is True
    assert services.cq_close(client=client, name="big") is False
    cache_services.entry_put(region="prices", key="k", value={"qty": 7})
    fanout.fanout_node("node-1")
    assert _rows(client) == []


def _size(client):
    return queue_selectors.queue_size(client_id=client.id)


@pytest.mark.django_db(transaction=True, databases=["default", "node"])
def test_closing_drains_what_only_that_cq_wanted(user, region):
    client = connected_client(user, "c", keys=["kept"])
    _cq(client, "big", "value.qty > 5", durable=True)
    _cq(client, "any", "value.qty > 0", durable=True)
    cache_services.entry_put(region="prices", key="kept", value={"qty": 7})
    cache_services.entry_put(region="prices", key="only", value={"qty": 7})
    cache_services.entry_put(region="prices", key="small", value={"qty": 1})
    fanout.fanout_node("node-1")
    assert _size(client) == 3
    services.client_disconnected(client_id=client.id, socket_id="c")  # away
    services.cq_close(client=client, name="big")
    services.cq_close(client=client, name="any")
    # "kept" stays for the interest, without a cq list; the others go.
    assert _rows(client) == [("create", "kept", None)]
    assert _size(client) == 1


@pytest.mark.django_db(transaction=True, databases=["default", "node"])
def test_closing_one_cq_keeps_the_events_another_names(user, region):
    client = _hello(user, "c")
    _cq(client, "big", "value.qty > 5")
    _cq(client, "any", "value.qty > 0")
    cache_services.entry_put(region="prices", key="k", value={"qty": 7})
    fanout.fanout_node("node-1")
    services.cq_close(client=client, name="big")
    assert _rows(client) == [("create", "k", [{"name": "any", "cq_op": "create"}])]


def test_region_destroy_reaches_its_cqs_and_closes_them(user, region):
    client = _hello(user, "c")
    _cq(client, "big", "value.qty > 5", durable=True)
    cache_services.region_destroy(name="prices")
    fanout.fanout_node("node-1")
    assert _rows(client) == [
        ("region_destroy", None, [{"name": "big", "cq_op": "region_destroy"}])
    ]
    assert not client.cqs.exists()
    cache_services.region_create(name="prices")
    cache_services.entry_put(region="prices", key="k", value={"qty": 7})
    fanout.fanout_node("node-1")
    assert len(_rows(client)) == 1  # nothing names the closed CQ


def test_close_without_keepalive_removes_every_cq(user, region):
    client = _hello(user, "c")
    _cq(client, "big", "value.qty > 5", durable=True)
    services.client_close(client_id=client.id, socket_id="c", keepalive=False)
    assert not DurableClient.objects.filter(pk=client.pk).exists()
    assert not ContinuousQuery.objects.exists()


@pytest.mark.django_db(transaction=True, databases=["default", "node"])
def test_expiry_removes_every_cq_and_the_queue_they_filled(user, region):
    client = _hello(user, "c")
    _cq(client, "big", "value.qty > 5", durable=True)
    _cq(client, "ends", "value.qty > 5")
    services.client_disconnected(client_id=client.id, socket_id="c")
    cache_services.entry_put(region="prices", key="k", value={"qty": 7})
    fanout.fanout_node("node-1")
    assert _size(client) == 1
    DurableClient.objects.filter(pk=client.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert services.clients_expire() == 1
    assert not ContinuousQuery.objects.exists()
    assert not EndedCq.objects.exists()
    assert _size(client) == queue_selectors.NO_QUEUE
    again = services.client_hello(
        user=user,
        socket_id="c2",
        options=services.parse_hello_options({"durable_id": "c"}),
    )
    assert again.pending_events == -1
    assert not again.client.cqs.exists()


def test_a_copy_page_carries_the_cq_list_to_the_new_host(user, region):
    client = _hello(user, "c")
    _cq(client, "big", "value.qty > 5", durable=True)
    cache_services.entry_put(region="prices", key="k", value={"qty": 7})
    fanout.fanout_node("node-1")
    head = queue_selectors.queue_head(client_id=client.id)
    page = queue_selectors.queue_copy_page(
        client_id=client.id, after=0, upto=head, limit=10
    )
    [copied] = page["entries"]
    assert copied["cq"] == [{"name": "big", "cq_op": "create"}]
    state = queue_selectors.queue_get(client_id=client.id)
    assert copies._entry_from_copy(state, copied).cq == copied["cq"]


def test_cq_list_is_in_name_order_when_one_name_prefixes_another(user, region):
    client = _hello(user, "c")
    for name in ("n", "n-1", "n.2", "m"):
        _cq(client, name, "value.qty > 5")
    cache_services.entry_put(region="prices", key="k", value={"qty": 7})
    fanout.fanout_node("node-1")
    [(_, _, listed)] = _rows(client)
    assert [entry["name"] for entry in listed] == ["m", "n", "n-1", "n.2"]


def test_one_pass_judges_each_event_by_the_cqs_that_existed_when_it_was_written(
    user, region
):
    # Both clients' CQs and all the writes are fanned out in one pass: the
    # pass must still give each event only the CQs registered before it.
    first, second = _hello(user, "first"), _hello(user, "second")
    _cq(first, "a", "value.qty > 5", durable=True)
    _cq(first, "b", "value.qty > 0")  # ends with the socket, events kept
    cache_services.entry_put(region="prices", key="k", value={"qty": 7})
    _cq(second, "a", "value.qty > 5")
    cache_services.entry_put(region="prices", key="k", value={"qty": 9})
    services.client_disconnected(client_id=first.id, socket_id="first")
    cache_services.entry_put(region="prices", key="k", value={"qty": 2})
    cache_services.region_clear(name="prices")
    fanout.fanout_node("node-1")
    assert _rows(first) == [
        (
            "create",
            "k",
            [{"name": "a", "cq_op": "create"}, {"name": "b", "cq_op": "create"}],
        ),
        (
            "update",
            "k",
            [{"name": "a", "cq_op": "update"}, {"name": "b", "cq_op": "update"}],
        ),
        ("update", "k", [{"name": "a", "cq_op": "destroy"}]),
        ("region_clear", None, [{"name": "a", "cq_op": "region_clear"}]),
    ]
    assert _rows(second) == [
        ("update", "k", [{"name": "a", "cq_op": "update"}]),
        ("update", "k", [{"name": "a", "cq_op": "destroy"}]),
        ("region_clear", None, [{"name": "a", "cq_op": "region_clear"}]),
    ]


@pytest.mark.parametrize("conflate", ["true", True])
def test_a_mode_turned_conflating_while_away_conflates_update_only_cq_rows(
    user, region, conflate
):
    """Rows queued while the client did not conflate take the new mode at
    its next hello: an update whose ``cq_op``s are all ``update`` may go,
    an entered or left one never."""
    client = _hello_as(user, "c", conflate="false")
    _cq(client, "big", "value.qty > 5", durable=True)
    for qty in (1, 7, 8):  # 1: moves nothing; 7: entered; 8: changed, in
        cache_services.entry_put(region="prices", key="k", value={"qty": qty})
    fanout.fanout_node("node-1")
    services.client_disconnected(client_id=client.id, socket_id="c")
    _hello_as(user, "c", conflate=conflate)
    cache_services.entry_put(region="prices", key="k", value={"qty": 9})
    fanout.fanout_node("node-1")
    assert [(r[2][0]["cq_op"], r[0]) for r in _rows(client)] == [
        ("create", "update"),
        ("update", "update"),  # qty 9; qty 8's row conflated away
    ]
    assert [r.value["qty"] for r in queued_rows(client.id)] == [7, 9]
    assert _size(client) == 2


def test_a_mode_turned_non_conflating_while_away_keeps_every_update(user, region):
    client = _hello_as(user, "c", conflate="true")
    _cq(client, "big", "value.qty > 5", durable=True)
    cache_services.entry_put(region="prices", key="k", value={"qty": 7})
    cache_services.entry_put(region="prices", key="k", value={"qty": 8})
    fanout.fanout_node("node-1")
    services.client_disconnected(client_id=client.id, socket_id="c")
    _hello_as(user, "c", conflate=False)
    cache_services.entry_put(region="prices", key="k", value={"qty": 9})
    fanout.fanout_node("node-1")
    assert [r.value["qty"] for r in queued_rows(client.id)] == [7, 8, 9]
    assert not QueueEntry.objects.filter(conflates=True).exists()


def _hello_as(user, durable_id, **extra):
    options = services.parse_hello_options({"durable_id": durable_id, **extra})
    return services.client_hello(
        user=user, socket_id=durable_id, options=options
    ).client


def test_a_copied_row_without_its_mark_never_conflates_an_entered_event(user):
    """A page entry without ``conflates`` (from a node that does not send
    it) is marked as the fan-out would: not when a CQ entered or left."""
    cache_services.region_create(name="prices", conflate_events=True)
    client = _hello(user, "c")
    _cq(client, "big", "value.qty > 5")
    cache_services.entry_put(region="prices", key="k", value={"qty": 1})
    cache_services.entry_put(region="prices", key="k", value={"qty": 7})
    cache_services.entry_put(region="prices", key="k", value={"qty": 8})
    fanout.fanout_node("node-1")
    head = queue_selectors.queue_head(client_id=client.id)
    page = queue_selectors.queue_copy_page(
        client_id=client.id, after=0, upto=head, limit=10
    )
    state = queue_selectors.queue_get(client_id=client.id)
    marks = []
    for entry in page["entries"]:
        assert entry["op"] == "update"
        marks.append(entry.pop("conflates"))
        assert copies._entry_from_copy(state, entry).conflates is marks[-1]
    assert marks == [False, True]  # entered; changed, still in


@pytest.mark.django_db(transaction=True, databases=["default", "node"])
def test_a_copy_conflates_a_copied_update_that_an_entered_or_left_one_superseded(
    user,
):
    """A page built before the source queued a later update brings the
    older update next to it on the new host; it goes there as it went on
    the source, even when the later one is an entered or left event,
    which may not conflate itself but supersedes (as in the fan-out)."""
    cache_services.region_create(name="prices", conflate_events=True)
    client = DurableClient.objects.create(
        durable_id="c",
        owner=user,
        primary="node-2",
        secondaries=["node-1"],
        syncing=["node-1"],
    )
    _cq(client, "big", "value.qty > 5", durable=True)
    _, first = cache_services.entry_put(region="prices", key="k", value={"qty": 7})
    _, second = cache_services.entry_put(region="prices", key="k", value={"qty": 8})
    fanout.fanout_node("node-1")  # no copy here yet: the cursor moves on
    state = queue_services.queue_adopt(
        client_id=client.id,
        durable_id="c",
        conflate="server",
        node="node-1",
        source="node-2",
    )
    cache_services.entry_put(region="prices", key="k", value={"qty": 2})  # left
    fanout.fanout_node("node-1")
    ts = timezone.now().isoformat()

    def entry(event, op, cq_op, conflates):
        return {
            "seq": event.seq,
            "event_id": event.event_id,
            "region": "prices",
            "key": "k",
            "op": op,
            "value": event.value,
            "version": event.version,
            "ts": ts,
            "conflates": conflates,
            "cq": [{"name": "big", "cq_op": cq_op}],
        }

    page = {
        "durable_id": "c",
        "conflate": "server",
        "acked_through": 0,
        "entries": [
            entry(first, "create", "create", False),
            entry(second, "update", "update", True),
        ],
        "next_after": state.copy_upto,
        "done": True,
    }
    assert queue_services.queue_copy_in(client_id=client.id, page=page) is True
    assert [r[2][0]["cq_op"] for r in _rows(client)] == ["create", "destroy"]
    assert _size(client) == 2


@pytest.mark.parametrize(
    "fields",
    [
        {"name": ""},
        {"name": "x" * 129},
        {"name": "a b"},
        {"name": "a/b"},
        {"name": "é"},
        {"name": 5},
        {"name": None},
        {"region": 5},
        {"query": None},
        {"query": ["value.qty > 5"]},
        {"durable": "yes"},
        {"durable": 1},
    ],
)
def test_each_malformed_field_is_bad_field(user, region, fields):
    client = _hello(user, "c")
    cq = {"name": "ok", "region": "prices", "query": "value.qty > 5", "durable": True}
    with pytest.raises(ValidationError):
        services.cq_register(client=client, **{**cq, **fields})
    assert not ContinuousQuery.objects.exists()


def test_names_of_1_to_128_allowed_characters_are_accepted(user, region):
    client = _hello(user, "c")
    for name in ("a", "A-z.0_9:x", "x" * 128):
        assert _cq(client, name, "value.qty > 5").name == name
    assert client.cqs.count() == 3
    other = _hello(user, "d")  # two clients may use one name
    assert _cq(other, "a", "value.qty > 1").name == "a"


def test_a_durable_cq_of_a_non_durable_client_is_bad_field(user, region):
    client = services.client_hello(
        user=user,
        socket_id="n",
        options=services.parse_hello_options({"durable_id": None}),
    ).client
    with pytest.raises(ValidationError):
        _cq(client, "big", "value.qty > 5", durable=True)
    assert _cq(client, "big", "value.qty > 5").is_durable is False
