"""Recovery by key: the server's resync after a gap, `since` re-registration
after a lost queue or a drop, `since_too_old` and full images that prune.

The fake server speaks the protocol's recovery frames (sdk/python/README.md,
"Recovery"): `welcome` with `gap`, the `gap` frame, `image` chunks with
`resync: true`, tombstones (`destroyed`) and CQ non-member markers
(`cq_op: "destroy"`), replies that say `since` back, and the
`since_too_old` error.
"""

import asyncio

import pytest
from conftest import WAIT, CqRecorder, register_answered

from durablecache_client import EntryEvent, Gap, SinceTooOldError

pytestmark = pytest.mark.asyncio

GAP = {"since": 15, "dropped": 9, "reason": "overflow"}


async def answer(conn, request, items, *, since=None, field="entries", **extra):
    """Answer a register request with one image chunk of raw `items` (none
    when empty), then its reply; the reply says `since` back when given."""
    cq = {"cq": request["name"]} if request["type"] == "register_cq" else {}
    if items or extra:
        await conn.send(
            {
                "type": "image",
                "id": request["id"],
                "region": request["region"],
                **cq,
                field: items,
                **extra,
            }
        )
    if request["type"] == "register_cq":
        reply = {"type": "cq_registered", "name": request["name"]}
    else:
        reply = {"type": "interest_registered"}
    if since is not None:
        reply["since"] = since
    count = len(items) + sum(len(v) for v in extra.values())
    await conn.send({**reply, "id": request["id"], "count": count})


def entry(key, value, version):
    return {"key": key, "value": value, "version": version}


def tombstone(key, version):
    return {"key": key, "version": version, "destroyed": True}


def left(key, version):
    return {"key": key, "version": version, "cq_op": "destroy"}


def told(recorder, start=0):
    """The recorded entry events from `start`, as `name key value flag`."""
    return [
        (name, event.key, event.value, event.is_resync)
        for name, event in recorder.calls[start:]
        if isinstance(event, EntryEvent)
    ]


async def primed(fake_server, make_client, recorder, *, durable=True, **options):
    """A client with an all-keys interest in "r" (image a, b, c at version
    1), a CQ "big" on it (image a), ready, and events delivered up to seq
    20 (a -> 2 at version 2). Returns (client, conn, region, cq_recorder)."""
    if durable:
        options.setdefault("durable_id", "app-1")
    client = make_client(**options)
    _, conn = await fake_server.connect(client)
    region = client.region("r", recorder)
    images = [("a", 1, 1), ("b", 1, 1), ("c", 1, 1)]
    await register_answered(conn, region.register_all_keys(durable=durable), images)
    cq_recorder = CqRecorder()
    await register_answered(
        conn,
        region.register_cq("big", "value > 0", cq_recorder, durable=durable),
        [("a", 1, 1)],
    )
    await client.ready_for_events()
    await conn.recv("ready")
    cq = [{"name": "big", "cq_op": "update"}]
    await conn.event("e20", 20, "a", "update", 2, 2, cq=cq)
    await conn.wait_ack(20)
    assert [name for name, _ in recorder.calls] == ["after_update"]
    assert len(cq_recorder.calls) == 1
    recorder.calls.clear()
    cq_recorder.calls.clear()
    return client, conn, region, cq_recorder


async def test_a_gap_resyncs_cache_and_listeners_then_live_events_go_on(
    fake_server, make_client, recorder
):
    gaps = []
    client, conn, region, cq_recorder = await primed(
        fake_server, make_client, recorder, on_gap=gaps.append
    )

    await conn.drop()
    conn2 = await fake_server.accept()
    await conn2.welcome(pending_events=0, gap=GAP)
    # The welcome says the queue overflowed: no replay covers the time
    # away, so every registration is sent again from the last seq applied,
    # its image told to the listeners.
    again = await conn2.recv("register_interest")
    await answer(conn2, again, [entry("b", 5, 5), entry("e", 9, 2)], since=20)
    again_cq = await conn2.recv("register_cq")
    await answer(conn2, again_cq, [left("a", 3), entry("b", 5, 5)], since=20)
    await conn2.recv("ready")
    await conn2.send({"type": "gap", **GAP})
    # The server's own resync: what the registrations brought is not told
    # twice (same versions); the rest is.
    await conn2.send(
        {
            "type": "image",
            "region": "r",
            "resync": True,
            "interest": 1,
            "entries": [entry("b", 5, 5), tombstone("c", 3), entry("d", 1, 1)],
        }
    )
    await conn2.send(
        {
            "type": "image",
            "region": "r",
            "resync": True,
            "cq": "big",
            "entries": [left("a", 3), entry("b", 5, 5), left("never", 4)],
        }
    )
    await conn2.send({"type": "marker", "replayed": 0, "resynced": 6, "regions": ["r"]})
    await conn2.event("e30", 30, "e", "update", 10, 3)
    calls = await recorder.wait_calls(6)

    assert (again["since"], again["all_keys"]) == (20, True)
    assert (again_cq["since"], again_cq["name"]) == (20, "big")
    assert client.welcome.gap == Gap(since=15, dropped=9, reason="overflow")
    assert gaps == [Gap(15, 9, "overflow")]
    assert [name for name, _ in calls] == [
        "after_update",
        "after_create",
        "after_destroy",
        "after_create",
        "after_region_live",
        "after_update",
    ]
    assert told(recorder) == [
        ("after_update", "b", 5, True),
        ("after_create", "e", 9, True),
        ("after_destroy", "c", None, True),
        ("after_create", "d", 1, True),
        ("after_update", "e", 10, False),
    ]
    resync = calls[0][1]
    assert (resync.id, resync.seq, resync.is_replay, resync.version) == (
        None,
        None,
        False,
        5,
    )
    assert resync.to_json_dict()["resync"] is True
    assert (await client.wait_for_marker(WAIT)).resynced == 6
    assert region.snapshot() == {"a": (2, 2), "b": (5, 5), "d": (1, 1), "e": (10, 3)}
    assert region.version_of("c") == 3
    cq_events = await cq_recorder.wait_calls(2)
    assert [(e.key, e.base_op, e.query_op, e.is_resync) for _, e in cq_events] == [
        ("a", "update", "destroy", True),
        ("b", "create", "create", True),
    ]
    assert region.cq_results("big") == {"b": (5, 5)}
    assert client.last_seq == region.last_seq == 30
    await conn2.wait_ack(30)


async def test_a_lost_queue_registers_again_with_since_and_applies_the_changes(
    fake_server, make_client, recorder
):
    client, conn, region, cq_recorder = await primed(fake_server, make_client, recorder)
    await register_answered(conn, region.register_keys(["z"], policy="none"))

    await conn.drop()
    conn2 = await fake_server.accept()
    await conn2.welcome(pending_events=-1)
    request = await conn2.recv("register_interest")
    # a: a stale entry (the cache holds version 2); b: changed; c: destroyed.
    await answer(
        conn2,
        request,
        [entry("a", "old", 2), entry("b", 4, 4), tombstone("c", 2)],
        since=20,
    )
    request_cq = await conn2.recv("register_cq")
    await answer(
        conn2,
        request_cq,
        [left("a", 3), entry("x", 7, 1), left("never", 2)],
        since=20,
    )
    request_none = await conn2.recv("register_interest")
    await answer(conn2, request_none, [])
    await conn2.recv("ready")
    # e20 again (a replay from before the loss): a duplicate, dropped.
    await conn2.event("e20", 20, "a", "update", 2, 2, replay=True)
    await conn2.event("e21", 21, "b", "update", 5, 5)
    calls = await recorder.wait_calls(3)

    assert request["since"] == request_cq["since"] == 20
    assert "since" not in request_none, "policy none has no image to recover with"
    assert request_none["keys"] == ["z"]
    assert told(recorder) == [
        ("after_update", "b", 4, True),
        ("after_destroy", "c", None, True),
        ("after_update", "b", 5, False),
    ]
    assert [e.id for _, e in calls] == [None, None, "e21"]
    assert client.duplicates_dropped == 1
    assert region.snapshot() == {"a": (2, 2), "b": (5, 5)}
    cq_events = await cq_recorder.wait_calls(2)
    assert [(e.key, e.base_op, e.query_op, e.is_resync) for _, e in cq_events] == [
        ("a", "update", "destroy", True),
        ("x", "create", "create", True),
    ]
    assert region.cq_results("big") == {"x": (7, 1)}


async def test_since_too_old_falls_back_to_a_full_image_that_prunes(
    fake_server, make_client, recorder
):
    errors = []
    _client, conn, region, cq_recorder = await primed(
        fake_server, make_client, recorder, on_error=errors.append
    )

    await conn.drop()
    conn2 = await fake_server.accept()
    await conn2.welcome(pending_events=-1)
    first = await conn2.recv("register_interest")
    await conn2.send(
        {
            "type": "error",
            "id": first["id"],
            "code": "since_too_old",
            "message": "pruned",
        }
    )
    second = await conn2.recv("register_interest")
    await answer(conn2, second, [entry("a", 2, 2), entry("b", 7, 4)])
    first_cq = await conn2.recv("register_cq")
    await conn2.send({"type": "error", "id": first_cq["id"], "code": "since_too_old"})
    second_cq = await conn2.recv("register_cq")
    await answer(conn2, second_cq, [entry("b", 7, 4)])
    await conn2.recv("ready")
    calls = await recorder.wait_calls(2)

    assert first["since"] == first_cq["since"] == 20
    assert "since" not in second
    assert "since" not in second_cq
    assert second["all_keys"] is True
    assert told(recorder) == [
        ("after_update", "b", 7, True),
        ("after_destroy", "c", None, True),
    ]
    assert calls[1][1].version == 1
    assert region.snapshot() == {"a": (2, 2), "b": (7, 4)}
    assert region.version_of("c") == 1, "c keeps a tombstone"
    cq_events = await cq_recorder.wait_calls(2)
    assert [(e.key, e.query_op, e.is_resync) for _, e in cq_events] == [
        ("b", "create", True),
        ("a", "destroy", True),
    ]
    assert region.cq_results("big") == {"b": (7, 4)}
    assert errors == [], "since_too_old is handled, not reported"


async def test_a_reply_without_since_back_was_a_full_image_and_prunes(
    fake_server, make_client, recorder
):
    _, conn, region, _ = await primed(fake_server, make_client, recorder)

    await conn.drop()
    conn2 = await fake_server.accept()
    await conn2.welcome(pending_events=-1)
    request = await conn2.recv("register_interest")
    assert request["since"] == 20
    # A server that ignored `since` sends every entry and does not say it back.
    await answer(conn2, request, [entry("a", 2, 2), entry("b", 1, 1)])
    await answer(conn2, await conn2.recv("register_cq"), [], since=20)
    await conn2.recv("ready")
    await recorder.wait_calls(1)

    assert told(recorder) == [("after_destroy", "c", None, True)]
    assert sorted(region.keys()) == ["a", "b"]


async def test_a_non_durable_client_back_after_a_drop_recovers_with_since(
    fake_server, make_client, recorder
):
    client, conn, region, cq_recorder = await primed(
        fake_server, make_client, recorder, durable=False
    )

    await conn.drop()
    conn2 = await fake_server.accept()
    await conn2.welcome(pending_events=-2)
    request = await conn2.recv("register_interest")
    await answer(conn2, request, [tombstone("a", 3), entry("f", 1, 1)], since=20)
    request_cq = await conn2.recv("register_cq")
    await answer(conn2, request_cq, [tombstone("a", 3)], since=20)
    await conn2.recv("ready")
    await recorder.wait_calls(2)

    assert client.durable_id is None
    assert request["since"] == request_cq["since"] == 20
    assert told(recorder) == [
        ("after_destroy", "a", None, True),
        ("after_create", "f", 1, True),
    ]
    assert sorted(region.keys()) == ["b", "c", "f"], "a since image prunes nothing"
    ((_, left_event),) = await cq_recorder.wait_calls(1)
    assert (left_event.base_op, left_event.query_op) == ("destroy", "destroy")
    assert region.cq_results("big") == {}


async def test_a_keys_policy_resync_forgets_stale_values_and_drops_destroyed_keys(
    fake_server, make_client, recorder
):
    client = make_client()
    _, conn = await fake_server.connect(client)
    region = client.region("r", recorder)

    async def script():
        request = await conn.recv("register_interest")
        await conn.answer_register(request, keys=["a", "b"])

    await register_answered_keys(region, script)
    await client.ready_for_events()
    await conn.event("e30", 30, "a", "update", "x", 5)
    await recorder.wait_calls(1)
    recorder.calls.clear()

    await conn.drop()
    conn2 = await fake_server.accept()
    await conn2.welcome(pending_events=-2)
    request = await conn2.recv("register_interest")
    await answer(conn2, request, ["a", "c"], since=30, field="keys", destroyed=["b"])
    await recorder.wait_calls(3)

    assert request["since"] == 30
    assert request["policy"] == "keys"
    assert told(recorder) == [
        ("after_update", "a", None, True),
        ("after_create", "c", None, True),
        ("after_destroy", "b", None, True),
    ]
    assert region.get_entry("a") == (None, 5)
    assert "b" not in region


async def register_answered_keys(region, script):
    """Register keys a, b, c with policy keys while `script` answers."""
    task = asyncio.ensure_future(region.register_keys(["a", "b", "c"], policy="keys"))
    await script()
    return await asyncio.wait_for(task, WAIT)


async def test_a_server_resync_entry_older_than_the_cache_changes_nothing(
    fake_server, make_client, recorder
):
    _client, conn, region, _ = await primed(fake_server, make_client, recorder)

    await conn.send({"type": "gap", **GAP})
    await conn.send(
        {
            "type": "image",
            "region": "r",
            "resync": True,
            "interest": 1,
            "entries": [entry("a", "stale", 2), tombstone("b", 1), entry("c", 3, 3)],
        }
    )
    for kind in ("register_interest", "register_cq"):
        await answer(conn, await conn.recv(kind), [], since=20)
    await conn.event("e31", 31, "b", "update", 2, 2)
    calls = await recorder.wait_calls(2)

    assert told(recorder) == [
        ("after_update", "c", 3, True),
        ("after_update", "b", 2, False),
    ]
    assert calls[1][1].is_resync is False
    assert region.snapshot() == {"a": (2, 2), "b": (2, 2), "c": (3, 3)}


async def test_an_error_other_than_since_too_old_reaches_on_error(
    fake_server, make_client, recorder
):
    errors = []
    reported = asyncio.Event()

    def on_error(error):
        errors.append(error)
        reported.set()

    _, conn, region, _ = await primed(
        fake_server, make_client, recorder, on_error=on_error
    )

    await conn.drop()
    conn2 = await fake_server.accept()
    await conn2.welcome(pending_events=-1)
    request = await conn2.recv("register_interest")
    await conn2.send({"type": "error", "id": request["id"], "code": "no_such_region"})
    await answer(conn2, await conn2.recv("register_cq"), [], since=20)
    await conn2.recv("ready")

    await asyncio.wait_for(reported.wait(), WAIT)
    assert errors[0].code == "no_such_region"
    assert not isinstance(errors[0], SinceTooOldError)
    assert sorted(region.keys()) == ["a", "b", "c"], "nothing pruned on an error"
