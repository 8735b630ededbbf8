"""The node's HTTP handler (durablecache.server.pooled_http.PooledASGIHandler)."""

import json
import threading

import pytest
from asgiref.testing import ApplicationCommunicator
from channels.db import database_sync_to_async
from django.core import signals
from django.db import connections
from rest_framework.authtoken.models import Token

from cache import services
from common import threads
from durablecache.server.pooled_http import PooledASGIHandler

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "node"])


def _scope(method: str, path: str, headers: list[tuple[bytes, bytes]] = ()) -> dict:
    return {
        "type": "http",
        "http_version": "1.1",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), *headers],
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 5000),
    }


async def _call(app, scope, body: bytes = b"") -> tuple[int, dict, bytes]:
    comm = ApplicationCommunicator(app, scope)
    await comm.send_input({"type": "http.request", "body": body})
    start = await comm.receive_output(timeout=10)
    content = b""
    while True:
        message = await comm.receive_output(timeout=10)
        content += message.get("body", b"")
        if not message.get("more_body"):
            break
    await comm.wait(timeout=10)
    return start["status"], dict(start["headers"]), content


@pytest.fixture
def token(django_user_model):
    user = django_user_model.objects.create_user("op", password="x", is_staff=True)
    return Token.objects.create(user=user).key


@pytest.fixture
def handler():
    app = PooledASGIHandler(threads=1)
    yield app
    # The pool thread's connections, or PostgreSQL cannot drop the test db.
    app.pool.submit(connections.close_all).result()
    app.pool.shutdown(wait=True)


async def test_views_run_on_the_pool_and_keep_their_database_connection(
    handler, token, monkeypatch
):
    # Test settings turn persistent connections off (tests/settings.py).
    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 60)
    await database_sync_to_async(services.region_create)(name="r")
    auth = [(b"authorization", f"Token {token}".encode())]
    seen = []

    def record(**_):
        seen.append(threading.current_thread().name)

    signals.request_started.connect(record)
    try:
        status, _, body = await _call(handler, _scope("GET", "/api/v1/regions/", auth))
        assert status == 200, body
        assert [r["name"] for r in json.loads(body)["results"]] == ["r"]

        def connection_of_pool_thread():
            return connections["default"].connection

        first = handler.pool.submit(connection_of_pool_thread).result()
        status, _, _ = await _call(handler, _scope("GET", "/api/v1/regions/", auth))
        assert status == 200
        second = handler.pool.submit(connection_of_pool_thread).result()
    finally:
        signals.request_started.disconnect(record)
    assert first is not None
    assert first is second
    assert len(seen) == 2
    assert all(name.startswith("http") for name in seen)


async def test_a_busy_thread_skips_the_health_check_an_idle_one_runs_it(
    handler, token, monkeypatch
):
    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", None)
    monkeypatch.setitem(connections.settings["default"], "CONN_HEALTH_CHECKS", True)
    checks = []
    wrapper = type(connections["default"])
    real = wrapper.is_usable

    def is_usable(self):
        if self.alias == "default":
            checks.append(threading.current_thread().name)
        return real(self)

    monkeypatch.setattr(wrapper, "is_usable", is_usable)
    auth = [(b"authorization", f"Token {token}".encode())]
    scope = _scope("GET", "/api/v1/regions/", auth)
    # The first request opens the thread's connection (new: healthy); the
    # second, right after, reuses it without a check.
    for _ in range(2):
        status, _, body = await _call(handler, scope)
        assert status == 200, body
    assert checks == []
    # A thread idle longer than IDLE_CHECK_S checks before its statement.
    monkeypatch.setattr(threads, "IDLE_CHECK_S", -1.0)
    status, _, body = await _call(handler, scope)
    assert status == 200, body
    assert len(checks) == 1
    assert checks[0].startswith("http")


async def test_a_write_through_the_handler_is_committed(handler, token):
    await database_sync_to_async(services.region_create)(name="w")
    body = b'{"value": {"n": 1}}'
    headers = [
        (b"authorization", f"Token {token}".encode()),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    scope = _scope("PUT", "/api/v1/regions/w/entries/k/", headers)
    status, _, content = await _call(handler, scope, body)
    assert status == 200, content
    from cache import selectors

    entry = await database_sync_to_async(selectors.entry_get)(region="w", key="k")
    assert entry.value == {"n": 1}


async def test_each_request_is_started_and_finished_once(handler):
    counts = {"started": 0, "finished": 0}

    def started(**_):
        counts["started"] += 1

    def finished(**_):
        counts["finished"] += 1

    signals.request_started.connect(started)
    signals.request_finished.connect(finished)
    try:
        for _ in range(3):
            status, _, body = await _call(handler, _scope("GET", "/healthz/"))
            assert status == 200
            assert json.loads(body)["status"] == "ok"
    finally:
        signals.request_started.disconnect(started)
        signals.request_finished.disconnect(finished)
    assert counts == {"started": 3, "finished": 3}


async def test_a_streamed_static_file_arrives_whole(handler):
    finished = []

    def record(**_):
        finished.append(threading.current_thread().name)

    signals.request_finished.connect(record)
    try:
        status, headers, body = await _call(
            handler, _scope("GET", "/static/admin/css/base.css")
        )
    finally:
        signals.request_finished.disconnect(record)
    assert status == 200
    assert int(headers[b"Content-Length"]) == len(body) > 1000
    assert b".module" in body  # the admin stylesheet itself
    assert len(finished) == 1
    assert finished[0].startswith("http")


async def test_a_body_over_the_limit_is_413_json(handler, settings):
    body = b"x" * 2048
    settings.DURABLECACHE_MAX_BODY_BYTES = 1024
    headers = [(b"content-length", str(len(body)).encode())]
    scope = _scope("PUT", "/api/v1/regions/r/entries/k/", headers)
    status, _, content = await _call(handler, scope, body)
    assert status == 413
    assert json.loads(content)["error"]["code"] == "too_large"


async def test_a_client_gone_before_its_body_gets_no_answer(handler):
    started = []

    def record(**_):
        started.append(1)

    signals.request_started.connect(record)
    try:
        comm = ApplicationCommunicator(handler, _scope("PUT", "/healthz/"))
        await comm.send_input({"type": "http.request", "body": b"{", "more_body": True})
        await comm.send_input({"type": "http.disconnect"})
        await comm.wait(timeout=10)
        assert await comm.receive_nothing()
    finally:
        signals.request_started.disconnect(record)
    assert started == []
    # The same handler still serves the next request.
    signals.request_started.connect(record)
    try:
        status, _, _ = await _call(handler, _scope("GET", "/healthz/"))
    finally:
        signals.request_started.disconnect(record)
    assert status == 200
    assert started == [1]


def test_the_handler_refuses_other_protocols(handler):
    import asyncio

    with pytest.raises(ValueError, match="HTTP only"):
        asyncio.run(handler({"type": "websocket"}, None, None))
