"""durablecache.server: one setting turns the tuning off; a patch whose
target is missing leaves the stock behaviour and says so."""

import logging

from autobahn.websocket import protocol
from django.core.handlers.asgi import ASGIHandler
from twisted.internet import tcp

from durablecache import env, server
from durablecache.server import pooled_http


def test_tuning_off_installs_no_patch(settings, monkeypatch):
    settings.DURABLECACHE_SERVER_TUNING = False
    write = tcp.Connection.write
    monkeypatch.setattr(protocol, "Utf8Validator", protocol.Utf8Validator)
    validator = protocol.Utf8Validator
    assert server.tune_websocket_server() == []
    assert tcp.Connection.write is write
    assert protocol.Utf8Validator is validator


def test_tuning_off_serves_http_with_djangos_handler(settings):
    settings.DURABLECACHE_SERVER_TUNING = False
    handler = server.http_handler()
    assert type(handler) is ASGIHandler


def test_tuning_on_serves_http_with_the_pooled_handler(settings):
    settings.DURABLECACHE_SERVER_TUNING = True
    assert isinstance(server.http_handler(), pooled_http.PooledASGIHandler)


def test_tuning_off_keeps_djangos_sqlite_backend(tmp_path):
    path = str(tmp_path / "x.sqlite3")
    assert env.database_config("", sqlite_default_path=path, tuned=False)["ENGINE"] == (
        "django.db.backends.sqlite3"
    )
    assert (
        env.database_config("", sqlite_default_path=path)["ENGINE"]
        == "durablecache.server.sqlite3"
    )


def test_a_patch_whose_target_is_missing_is_left_off(settings, monkeypatch, caplog):
    settings.DURABLECACHE_SERVER_TUNING = True
    monkeypatch.setattr(
        server,
        "_REQUIRES",
        dict(
            server._REQUIRES,
            autobahn_unmask=[("autobahn.websocket.protocol", ("no_such_thing",))],
        ),
    )
    validator = protocol.Utf8Validator
    with caplog.at_level(logging.WARNING, logger="durablecache.server"):
        applied = server.tune_websocket_server()
    assert "autobahn_unmask" not in applied
    assert protocol.Utf8Validator is validator
    assert "autobahn.websocket.protocol:no_such_thing" in caplog.text


def test_every_patch_finds_its_targets_in_the_pinned_packages():
    assert {name: server._missing(req) for name, req in server._REQUIRES.items()} == {
        name: [] for name in server._REQUIRES
    }
