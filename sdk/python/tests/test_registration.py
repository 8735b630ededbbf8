"""Registering interests and CQs: frames, image chunks, errors."""

import pytest

from durablecache_client import DurableCacheError, Written

pytestmark = pytest.mark.asyncio


async def test_register_keys_fills_cache_from_image_chunks_and_returns_count(
    fake_server, make_client, run
):
    client = make_client(durable_id="app-1")
    _, conn = await fake_server.connect(client)
    region = client.region("r")
    entries = [(f"k{i}", {"n": i}, i + 1) for i in range(5)]

    async def script():
        request = await conn.recv("register_interest")
        assert request["region"] == "r"
        assert request["keys"] == ["k0", "k1", "k2", "k3", "k4"]
        assert request["durable"] is True
        assert request["policy"] == "keys_values"
        await conn.answer_register(request, entries, chunk=2)  # 3 chunks

    count = await run(
        region.register_keys([f"k{i}" for i in range(5)], durable=True), script
    )

    assert count == 5
    assert region.snapshot() == {k: (v, n) for k, v, n in entries}
    assert region.get("k3") == {"n": 3}
    assert region.get_entry("k4") == ({"n": 4}, 5)
    assert "k0" in region
    assert len(region) == 5


async def test_register_regex_and_all_keys_send_their_selectors(
    fake_server, make_client, run
):
    client = make_client()
    _, conn = await fake_server.connect(client)
    region = client.region("r")
    seen = []

    async def script():
        request = await conn.recv("register_interest")
        seen.append(request)
        await conn.answer_register(request, [("user:1", "a", 1)])

    assert await run(region.register_regex(r"user:\d+", policy="keys"), script) == 1
    assert await run(region.register_all_keys(), script) == 1

    assert seen[0]["regex"] == r"user:\d+"
    assert seen[0]["policy"] == "keys"
    assert "keys" not in seen[0]
    assert seen[1]["all_keys"] is True
    assert seen[1]["durable"] is False


async def test_keys_policy_image_records_keys_without_values(
    fake_server, make_client, run
):
    client = make_client()
    _, conn = await fake_server.connect(client)
    region = client.region("r")

    async def script():
        request = await conn.recv("register_interest")
        await conn.answer_register(request, keys=["a", "b"])

    assert await run(region.register_all_keys(policy="keys"), script) == 2
    assert sorted(region.keys()) == ["a", "b"]
    assert region.get("a") is None


async def test_error_frame_for_the_request_raises_durable_cache_error(
    fake_server, make_client, run
):
    client = make_client()
    _, conn = await fake_server.connect(client)
    region = client.region("r")

    async def script():
        request = await conn.recv("register_interest")
        await conn.send(
            {
                "type": "error",
                "id": request["id"],
                "code": "bad_regex",
                "message": "unbalanced parenthesis",
            }
        )

    with pytest.raises(DurableCacheError) as info:
        await run(region.register_regex("(oops"), script)

    assert info.value.code == "bad_regex"
    assert info.value.message == "unbalanced parenthesis"
    assert client.connected  # an error frame leaves the socket open


async def test_unregister_sends_the_same_selector(fake_server, make_client, run):
    client = make_client()
    _, conn = await fake_server.connect(client)
    region = client.region("r")

    async def script():
        request = await conn.recv("unregister_interest")
        assert request["region"] == "r"
        assert request["keys"] == ["a", "b"]
        await conn.send({"type": "interest_unregistered", "id": request["id"]})

    assert await run(region.unregister_keys(["a", "b"]), script) is None


async def test_register_before_connect_is_refused(make_client):
    client = make_client()

    with pytest.raises(DurableCacheError) as info:
        await client.region("r").register_keys(["a"])
    assert info.value.code == "not_connected"


async def test_put_sends_the_frame_and_returns_what_was_written(
    fake_server, make_client, run
):
    client = make_client()
    _, conn = await fake_server.connect(client)
    region = client.region("r")

    async def script():
        request = await conn.recv("put")
        assert (request["region"], request["key"], request["value"]) == (
            "r",
            "k",
            {"n": 1},
        )
        await conn.send(
            {
                "type": "written",
                "id": request["id"],
                "region": "r",
                "key": "k",
                "op": "create",
                "version": 1,
                "event_id": "e1",
            }
        )

    written = await run(region.put("k", {"n": 1}), script)
    assert written == Written(
        region="r", key="k", op="create", version=1, event_id="e1"
    )
    assert "k" not in region  # the cache changes when the event comes back


async def test_a_refused_put_raises_the_servers_error(fake_server, make_client, run):
    client = make_client()
    _, conn = await fake_server.connect(client)

    async def script():
        request = await conn.recv("put")
        await conn.send(
            {
                "type": "error",
                "id": request["id"],
                "code": "no_such_region",
                "message": "region 'nope' does not exist",
            }
        )

    with pytest.raises(DurableCacheError) as raised:
        await run(client.region("nope").put("k", 1), script)
    assert raised.value.code == "no_such_region"
