"""autobahn's per-frame debug arguments are not formatted unless debug is on."""

import pytest
import txaio
from autobahn.twisted import websocket
from autobahn.websocket import protocol

from durablecache.server import autobahn_frame_logging as frame_logging


@pytest.fixture
def helpers(monkeypatch):
    """Both autobahn modules' helpers, restored after the test."""
    for module in (protocol, websocket):
        monkeypatch.setattr(module, "hltype", module.hltype)
        monkeypatch.setattr(module, "hlval", module.hlval)


@pytest.mark.parametrize("module", [protocol, websocket], ids=["sends", "reads"])
def test_helpers_are_swapped_when_not_debugging(helpers, monkeypatch, module):
    monkeypatch.setattr(txaio, "get_global_log_level", lambda: "info")
    assert frame_logging.quiet_frame_logging() is True
    assert module.hlval(42) == 42
    assert module.hltype(test_helpers_are_swapped_when_not_debugging).endswith(
        "test_helpers_are_swapped_when_not_debugging"
    )


def test_helpers_stay_when_debugging(helpers, monkeypatch):
    originals = (protocol.hltype, websocket.hltype)
    monkeypatch.setattr(txaio, "get_global_log_level", lambda: "debug")
    assert frame_logging.quiet_frame_logging() is False
    assert (protocol.hltype, websocket.hltype) == originals
