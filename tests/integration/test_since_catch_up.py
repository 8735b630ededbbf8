"""A client back after a drop catches up by key with ``since`` through a
real node (docs/protocol.md, "Catching up by key")."""

import asyncio

import pytest

from tests.integration.harness import create_region
from tests.integration.wsclient import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def put(live, region, key, value):
    status, body = live.rest(
        "PUT", f"/api/v1/regions/{region}/entries/{key}/", live.user, {"value": value}
    )
    assert status == 200, body


def test_a_client_back_after_a_drop_gets_only_what_changed(live):
    region = create_region(live, "since")
    put(live, region, "a", 1)
    put(live, region, "b", 1)

    async def scenario():
        async with RawClient(live.ws_url("node-1"), live.user) as ws:
            await ws.hello()
            await ws.register(region, all_keys=True)
            await ws.ready_and_replay()
            put(live, region, "a", 2)
            [event] = await ws.events(1)
            applied = event["seq"]
            await ws.drop()
        put(live, region, "b", 2)
        status, _ = live.rest(
            "DELETE", f"/api/v1/regions/{region}/entries/a/", live.user
        )
        assert status in (200, 204)
        put(live, region, "c", 1)
        async with RawClient(live.ws_url("node-1"), live.user) as ws:
            await ws.hello()
            await ws.send(
                type="register_interest", region=region, all_keys=True, since=applied
            )
            image = await ws.expect("image")
            reply = await ws.expect("interest_registered")
            return applied, image, reply

    applied, image, reply = asyncio.run(scenario())
    assert image["entries"] == [
        {"key": "b", "value": 2, "version": 2},
        {"key": "a", "version": 3, "destroyed": True},
        {"key": "c", "value": 1, "version": 1},
    ]
    assert (reply["count"], reply["since"]) == (3, applied)
