"""Hostile keys through the real ASGI application: a key is written as
itself or refused with 400, never read as another key (docs/protocol.md,
"Selectors and limits" and "Hostile input").

Paths are given raw, as they travel on the wire, and the scope is built
the way Daphne builds it (``path`` is the raw path percent-decoded).
"""

import json
from typing import Any
from urllib.parse import unquote

import pytest
from asgiref.testing import ApplicationCommunicator
from channels.db import database_sync_to_async

from cache import selectors, services
from cache.models import Entry

BASE = "/api/v1/regions/paths"
pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "node"])


async def call(
    token: str, method: str, raw_path: str, body: Any = None
) -> tuple[int, Any]:
    """Send one request to ``durablecache.asgi.application``; return
    (status, decoded JSON body or the raw bytes)."""
    from durablecache.asgi import application

    raw = raw_path.encode("latin-1")
    data = b"" if body is None else json.dumps(body).encode()
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": method,
        "path": unquote(raw_path),
        "raw_path": raw,
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"authorization", f"Token {token}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode()),
        ],
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 5000),
    }
    app = ApplicationCommunicator(application, scope)
    await app.send_input({"type": "http.request", "body": data})
    start = await app.receive_output(timeout=10)
    content = b""
    while True:
        message = await app.receive_output(timeout=10)
        content += message.get("body", b"")
        if not message.get("more_body"):
            break
    try:
        return start["status"], json.loads(content)
    except ValueError:
        return start["status"], content


def live_keys() -> list[str]:
    return sorted(
        Entry.objects.filter(region__name="paths", is_destroyed=False).values_list(
            "key", flat=True
        )
    )


@pytest.fixture
async def paths_region():
    await database_sync_to_async(services.region_create)(name="paths")
    await database_sync_to_async(services.entry_put)(region="paths", key="/", value=0)


def assert_refused(status: int, body: Any) -> None:
    assert status == 400, body
    assert body["error"]["code"] == "bad_field", body
    assert body["error"]["message"], body


# A literal U+001F in the path (percent-encoded in either case, with and
# without a %2F beside it) is the internal stand-in for an encoded slash.
UNIT_SEPARATOR_KEYS = ["%1F", "%1f", "a%1Fb", "a%2Fb%1Fc", "%1F%2F"]


@pytest.mark.parametrize("segment", UNIT_SEPARATOR_KEYS)
async def test_a_key_holding_u001f_is_refused_by_every_door(
    token, paths_region, segment
):
    url = f"{BASE}/entries/{segment}/"
    before = await database_sync_to_async(live_keys)()
    assert_refused(*await call(token, "PUT", url, {"value": 1}))
    assert_refused(*await call(token, "GET", url))
    assert_refused(*await call(token, "DELETE", url))
    assert_refused(*await call(token, "POST", f"{url}invalidate/"))
    assert await database_sync_to_async(live_keys)() == before
    entry = await database_sync_to_async(selectors.entry_get)(region="paths", key="/")
    assert (entry.value, entry.version) == (0, 1)  # "/" untouched


async def test_a_raw_u001f_byte_in_the_path_is_refused(token, paths_region):
    assert_refused(*await call(token, "PUT", f"{BASE}/entries/\x1f/", {"value": 1}))
    assert await database_sync_to_async(live_keys)() == ["/"]


async def test_a_putall_key_holding_u001f_is_refused_and_writes_nothing(
    token, paths_region
):
    body = {"entries": {"fine": 1, "\x1f": 2}}
    assert_refused(*await call(token, "POST", f"{BASE}/putall/", body))
    assert await database_sync_to_async(live_keys)() == ["/"]


async def test_u001f_outside_a_key_is_not_a_slash_either(token, paths_region):
    # A region name cannot hold it: 404, as for any name no region can have.
    status, body = await call(token, "GET", "/api/v1/regions/pa%1Fths/entries/")
    assert status == 404, body
    assert body["error"]["code"] == "no_such_region"


@pytest.mark.parametrize(
    ("segment", "key"),
    [("%2F", "/"), ("a%2Fb", "a/b"), ("%252F", "%2F"), ("%251F", "%1F")],
)
async def test_slashes_and_percents_still_round_trip(token, paths_region, segment, key):
    url = f"{BASE}/entries/{segment}/"
    status, body = await call(token, "PUT", url, {"value": 7})
    assert (status, body["key"]) == (200, key), body
    status, body = await call(token, "GET", url)
    assert (status, body["key"], body["value"]) == (200, key, 7), body


# Percent-escapes that are not UTF-8 (a lone byte, an overlong "/") were
# read as U+FFFD: the key "\ufffd" that "%EF%BF%BD" names.
NOT_UTF8_KEYS = ["%FF", "a%FFb", "%C0%AF", "%ED%A0%80", "%E2%82"]


@pytest.mark.parametrize("segment", NOT_UTF8_KEYS)
async def test_a_key_that_is_not_utf8_is_refused_by_every_door(
    token, paths_region, segment
):
    url = f"{BASE}/entries/{segment}/"
    for method, path in [
        ("PUT", url),
        ("GET", url),
        ("DELETE", url),
        ("POST", f"{url}invalidate/"),
    ]:
        status, body = await call(token, method, path, {"value": 1})
        assert status == 400, (method, body)
        assert body["error"]["code"] == "bad_field", body
    assert await database_sync_to_async(live_keys)() == ["/"]


async def test_the_replacement_character_itself_is_a_key(token, paths_region):
    status, body = await call(token, "PUT", f"{BASE}/entries/%EF%BF%BD/", {"value": 1})
    assert (status, body["key"]) == (200, "\ufffd"), body
