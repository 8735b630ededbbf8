"""autobahn's per-frame debug arguments are not formatted unless debug is on."""

import txaio
from autobahn.websocket import protocol

from durablecache import frame_logging


def test_helpers_are_swapped_when_not_debugging(monkeypatch):
    monkeypatch.setattr(protocol, "hltype", protocol.hltype)
    monkeypatch.setattr(protocol, "hlval", protocol.hlval)
    monkeypatch.setattr(txaio, "get_global_log_level", lambda: "info")
    assert frame_logging.quiet_frame_logging() is True
    assert protocol.hlval(42) == 42
    assert protocol.hltype(test_helpers_are_swapped_when_not_debugging).endswith(
        "test_helpers_are_swapped_when_not_debugging"
    )


def test_helpers_stay_when_debugging(monkeypatch):
    original = protocol.hltype
    monkeypatch.setattr(protocol, "hltype", original)
    monkeypatch.setattr(txaio, "get_global_log_level", lambda: "debug")
    assert frame_logging.quiet_frame_logging() is False
    assert protocol.hltype is original
