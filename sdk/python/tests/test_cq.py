"""Continuous queries in the client: the register_cq frame, the result set
kept apart from the region's cache, CQ events (base_op / query_op), the
ends of a CQ (close_cq, an operator's cq_closed, region_destroy), typed
errors, and re-registration after a reconnect."""

import asyncio

import pytest
from conftest import CqRecorder, register_answered

from durablecache_client import (
    BadFieldError,
    BadQueryError,
    DurableCacheError,
    NoSuchRegionError,
)

pytestmark = pytest.mark.asyncio


async def register_cq(conn, region, name, query, listener, entries=(), **options):
    """Register a CQ while the fake server answers with `entries`."""
    return await register_answered(
        conn, region.register_cq(name, query, listener, **options), entries
    )


async def test_register_cq_sends_the_frame_and_keeps_the_result_apart_from_the_cache(
    fake_server, make_client, run
):
    client = make_client(durable_id="app-1")
    _, conn = await fake_server.connect(client)
    region = client.region("orders")
    seen = []

    async def script():
        request = await conn.recv("register_cq")
        seen.append(request)
        await conn.answer_register(
            request, [("o1", {"total": 150}, 3), ("o2", {"total": 900}, 4)], chunk=1
        )

    count = await run(
        region.register_cq("big", "value.total > 100", CqRecorder(), durable=True),
        script,
    )

    assert count == 2
    assert {k: seen[0][k] for k in ("name", "region", "query", "durable")} == {
        "name": "big",
        "region": "orders",
        "query": "value.total > 100",
        "durable": True,
    }
    assert region.cq_results("big") == {
        "o1": ({"total": 150}, 3),
        "o2": ({"total": 900}, 4),
    }
    assert len(region) == 0  # as in Geode: CQ results are not cached
    assert region.cq_results("other") is None


async def test_a_cq_only_event_reaches_the_cq_listener_and_not_the_cache(
    fake_server, make_client, recorder
):
    client = make_client()
    _, conn = await fake_server.connect(client)
    region = client.region("r", recorder)
    cq_listener = CqRecorder()
    await register_cq(conn, region, "big", "value.n > 5", cq_listener)

    await conn.event(
        "e1", 1, "k", "create", {"n": 9}, 1, cq=[{"name": "big", "cq_op": "create"}]
    )
    await conn.event(
        "e2", 2, "k", "update", {"n": 1}, 2, cq=[{"name": "big", "cq_op": "destroy"}]
    )
    await conn.wait_ack(2)

    events = cq_listener.events()
    assert [(e.cq_name, e.base_op, e.query_op, e.key, e.version) for e in events] == [
        ("big", "create", "create", "k", 1),
        ("big", "update", "destroy", "k", 2),
    ]
    assert events[0].value == {"n": 9}
    assert events[0].entry.id == "e1"
    assert not events[0].is_replay
    assert not events[0].is_resync
    assert "k" not in region  # a CQ-only event leaves the cache alone
    assert recorder.calls == []  # and the region's listener
    assert region.cq_results("big") == {}  # k left the result


async def test_an_event_an_interest_also_covers_updates_the_cache_and_both_listeners(
    fake_server, make_client, recorder
):
    client = make_client()
    _, conn = await fake_server.connect(client)
    region = client.region("r", recorder)
    cq_listener = CqRecorder()
    await register_answered(conn, region.register_regex("k.*"))
    await register_cq(conn, region, "big", "value.n > 5", cq_listener)

    await conn.event(
        "e1", 1, "k1", "create", {"n": 9}, 1, cq=[{"name": "big", "cq_op": "create"}]
    )
    await conn.event(
        "e2", 2, "x", "create", {"n": 9}, 1, cq=[{"name": "big", "cq_op": "create"}]
    )
    await conn.wait_ack(2)

    assert region.get_entry("k1") == ({"n": 9}, 1)
    assert "x" not in region  # the regex does not cover x
    assert [(name, e.key) for name, e in recorder.calls] == [("after_create", "k1")]
    assert [e.key for e in cq_listener.events()] == ["k1", "x"]
    assert set(region.cq_results("big")) == {"k1", "x"}


async def test_one_event_naming_two_cqs_reaches_each_with_its_own_query_op(
    fake_server, make_client
):
    client = make_client()
    _, conn = await fake_server.connect(client)
    region = client.region("r")
    low, high = CqRecorder(), CqRecorder()
    await register_cq(conn, region, "high", "value.n > 5", high, [("k", {"n": 9}, 1)])
    await register_cq(conn, region, "low", "value.n > 0", low, [("k", {"n": 9}, 1)])

    cq = [{"name": "high", "cq_op": "destroy"}, {"name": "low", "cq_op": "update"}]
    await conn.event("e1", 1, "k", "update", {"n": 2}, 2, cq=cq)
    await conn.wait_ack(1)

    assert [e.query_op for e in high.events()] == ["destroy"]
    assert [e.query_op for e in low.events()] == ["update"]
    assert region.cq_results("high") == {}
    assert region.cq_results("low") == {"k": ({"n": 2}, 2)}


async def test_close_cq_sends_close_cq_calls_on_close_and_forgets_the_cq(
    fake_server, make_client, run
):
    client = make_client()
    _, conn = await fake_server.connect(client)
    region = client.region("r")
    cq_listener = CqRecorder()
    await register_cq(conn, region, "big", "value.n > 5", cq_listener)

    async def script():
        request = await conn.recv("close_cq")
        assert request["name"] == "big"
        await conn.send({"type": "cq_closed", "id": request["id"], "name": "big"})

    await run(region.close_cq("big"), script)
    await conn.event(
        "e1", 1, "k", "create", {"n": 9}, 1, cq=[{"name": "big", "cq_op": "create"}]
    )
    await conn.wait_ack(1)

    assert cq_listener.calls == [("on_close", None)]
    assert region.cq_results("big") is None


async def test_an_operators_cq_closed_ends_the_cq_after_the_events_before_it(
    fake_server, make_client
):
    client = make_client(durable_id="app-1")
    _, conn = await fake_server.connect(client)
    region = client.region("r")
    cq_listener = CqRecorder()
    await register_cq(conn, region, "big", "value.n > 5", cq_listener, durable=True)

    await conn.event(
        "e1", 1, "k", "create", {"n": 9}, 1, cq=[{"name": "big", "cq_op": "create"}]
    )
    await conn.send({"type": "cq_closed", "name": "big"})  # no id: unsolicited
    await cq_listener.wait_calls(2)

    assert [name for name, _ in cq_listener.calls] == ["on_event", "on_close"]
    assert region.cq_results("big") is None

    # Not registered again after a reconnect.
    await conn.drop()
    conn2 = await fake_server.accept()
    await conn2.welcome(pending_events=0)
    put = asyncio.ensure_future(region.put("k", 1))
    assert (await conn2.recv())["type"] == "put"  # the first frame: no register_cq
    put.cancel()


async def test_region_destroy_ends_the_regions_cqs(fake_server, make_client, recorder):
    client = make_client()
    _, conn = await fake_server.connect(client)
    region = client.region("r", recorder)
    cq_listener = CqRecorder()
    await register_cq(
        conn, region, "big", "value.n > 5", cq_listener, [("k", {"n": 9}, 1)]
    )

    cq = [{"name": "big", "cq_op": "region_destroy"}]
    await conn.event("e1", 1, None, "region_destroy", None, None, cq=cq)
    await cq_listener.wait_calls(2)

    assert [
        (name, getattr(arg, "query_op", None)) for name, arg in cq_listener.calls
    ] == [
        ("on_event", "region_destroy"),
        ("on_close", None),
    ]
    assert cq_listener.events()[0].base_op == "region_destroy"
    assert region.cq_results("big") is None
    assert recorder.names() == ["after_region_destroy"]  # a region op reaches it


async def test_region_clear_empties_the_result_set_and_keeps_the_cq(
    fake_server, make_client
):
    client = make_client()
    _, conn = await fake_server.connect(client)
    region = client.region("r")
    cq_listener = CqRecorder()
    await register_cq(
        conn, region, "big", "value.n > 5", cq_listener, [("k", {"n": 9}, 1)]
    )

    cq = [{"name": "big", "cq_op": "region_clear"}]
    await conn.event("e1", 1, None, "region_clear", None, None, cq=cq)
    await conn.wait_ack(1)

    assert [e.query_op for e in cq_listener.events()] == ["region_clear"]
    assert region.cq_results("big") == {}


@pytest.mark.parametrize(
    ("code", "error_class"),
    [
        ("bad_query", BadQueryError),
        ("bad_field", BadFieldError),
        ("no_such_region", NoSuchRegionError),
    ],
)
async def test_a_refused_cq_raises_a_typed_error_with_the_servers_message(
    fake_server, make_client, run, code, error_class
):
    client = make_client()
    _, conn = await fake_server.connect(client)
    region = client.region("r")
    message = "line 1, column 12: unexpected character ';'"

    async def script():
        request = await conn.recv("register_cq")
        await conn.send(
            {"type": "error", "id": request["id"], "code": code, "message": message}
        )

    with pytest.raises(error_class) as raised:
        await run(
            region.register_cq("q", "value.a = 1; DROP TABLE x", CqRecorder()), script
        )

    assert isinstance(raised.value, DurableCacheError)
    assert (raised.value.code, raised.value.message) == (code, message)
    assert region.cq_results("q") is None
    assert client.connected


async def test_durable_cq_is_registered_again_silently_when_the_queue_was_kept(
    fake_server, make_client
):
    client = make_client(durable_id="app-1")
    _, conn = await fake_server.connect(client)
    region = client.region("r")
    cq_listener = CqRecorder()
    await register_cq(
        conn,
        region,
        "big",
        "value.n > 5",
        cq_listener,
        [("a", {"n": 9}, 1)],
        durable=True,
    )

    await conn.drop()
    conn2 = await fake_server.accept()
    await conn2.welcome(pending_events=1)
    request = await conn2.recv("register_cq")
    await conn2.answer_register(request, [("a", {"n": 10}, 2)])
    # The replay tells the listener; the image said it already (same version).
    cq = [{"name": "big", "cq_op": "update"}]
    await conn2.event("e1", 1, "a", "update", {"n": 10}, 2, replay=True, cq=cq)
    await conn2.wait_ack(1)

    assert {k: request[k] for k in ("name", "region", "query", "durable")} == {
        "name": "big",
        "region": "r",
        "query": "value.n > 5",
        "durable": True,
    }
    assert [(e.query_op, e.is_replay, e.is_resync) for e in cq_listener.events()] == [
        ("update", True, False)
    ]
    assert region.cq_results("big") == {"a": ({"n": 10}, 2)}


async def test_a_cq_no_replay_covers_resyncs_its_listener_from_the_fresh_image(
    fake_server, make_client
):
    client = make_client()  # non-durable: the server drops its CQs meanwhile
    _, conn = await fake_server.connect(client)
    region = client.region("r")
    cq_listener = CqRecorder()
    await register_cq(
        conn, region, "big", "value.n > 5", cq_listener,
        [("stay", {"n": 9}, 1), ("same", {"n": 7}, 1), ("gone", {"n": 8}, 1)],
    )  # fmt: skip

    await conn.drop()
    conn2 = await fake_server.accept()
    await conn2.welcome(pending_events=-2)
    request = await conn2.recv("register_cq")
    await conn2.answer_register(
        request, [("new", {"n": 6}, 3), ("same", {"n": 7}, 1), ("stay", {"n": 10}, 2)]
    )
    calls = await cq_listener.wait_calls(3)

    seen = sorted((e.key, e.base_op, e.query_op, e.value) for _, e in calls)
    assert seen == [
        ("gone", "update", "destroy", None),
        ("new", "create", "create", {"n": 6}),
        ("stay", "update", "update", {"n": 10}),
    ]
    assert all(e.is_resync and e.entry is None for _, e in calls)
    assert calls[0][1].to_json_dict()["cq"] == [
        {"name": "big", "cq_op": calls[0][1].query_op}
    ]
    assert region.cq_results("big") == {
        "new": ({"n": 6}, 3),
        "same": ({"n": 7}, 1),
        "stay": ({"n": 10}, 2),
    }
    assert len(region) == 0


async def test_a_cq_refused_after_a_reconnect_reaches_on_error_and_stays_registered(
    fake_server, make_client
):
    errors = []
    client = make_client(durable_id="app-1", on_error=errors.append)
    _, conn = await fake_server.connect(client)
    region = client.region("r")
    cq_listener = CqRecorder()
    await register_cq(conn, region, "big", "value.n > 5", cq_listener, durable=True)

    await conn.drop()
    conn2 = await fake_server.accept()
    await conn2.welcome(pending_events=0)
    request = await conn2.recv("register_cq")
    await conn2.send(
        {
            "type": "error",
            "id": request["id"],
            "code": "no_such_region",
            "message": "gone",
        }
    )
    await cq_listener.wait_calls(1)

    ((name, error),) = cq_listener.calls
    assert name == "on_error"
    assert isinstance(error, NoSuchRegionError)
    assert error.message == "gone"
    assert errors == [error]

    await conn2.drop()
    conn3 = await fake_server.accept()
    await conn3.welcome(pending_events=0)
    assert (await conn3.recv("register_cq"))["name"] == "big"


async def test_register_cq_refuses_a_positional_durable_flag(fake_server, make_client):
    client = make_client()
    await fake_server.connect(client)

    with pytest.raises(TypeError):
        await client.region("r").register_cq("big", "value.n > 5", True)


async def test_the_servers_resync_image_tells_the_listener_what_entered_and_left(
    fake_server, make_client
):
    client = make_client()
    _, conn = await fake_server.connect(client)
    region = client.region("r")
    cq_listener = CqRecorder()
    await register_cq(
        conn, region, "big", "value.n > 5", cq_listener, [("a", {"n": 9}, 1)]
    )

    await conn.send(
        {
            "type": "image",
            "region": "r",
            "cq": "big",
            "resync": True,
            "entries": [
                {"key": "a", "version": 4, "cq_op": "destroy"},
                {"key": "b", "value": {"n": 8}, "version": 5},
                {"key": "never", "version": 6, "cq_op": "destroy"},
            ],
        }
    )
    calls = await cq_listener.wait_calls(2)

    assert [(e.key, e.base_op, e.query_op, e.is_resync) for _, e in calls] == [
        ("a", "update", "destroy", True),
        ("b", "create", "create", True),
    ]
    assert region.cq_results("big") == {"b": ({"n": 8}, 5)}
    assert len(region) == 0


async def test_unregistering_an_interest_stops_it_covering_cq_events(
    fake_server, make_client, run, recorder
):
    client = make_client()
    _, conn = await fake_server.connect(client)
    region = client.region("r", recorder)
    await register_answered(conn, region.register_keys(["k"]))
    await register_cq(conn, region, "big", "value.n > 5", CqRecorder())
    cq = [{"name": "big", "cq_op": "create"}]
    await conn.event("e1", 1, "k", "create", {"n": 9}, 1, cq=cq)
    await conn.wait_ack(1)

    async def script():
        request = await conn.recv("unregister_interest")
        await conn.send({"type": "interest_unregistered", "id": request["id"]})

    await run(region.unregister_keys(["k"]), script)
    await conn.event(
        "e2", 2, "k", "update", {"n": 10}, 2, cq=[{"name": "big", "cq_op": "update"}]
    )
    await conn.wait_ack(2)

    assert region.get_entry("k") == ({"n": 9}, 1)  # e2 was CQ-only
    assert recorder.names() == ["after_create"]
