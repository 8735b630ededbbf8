"""Stop autobahn formatting a debug line's arguments for every frame sent.

Daphne's websocket layer (autobahn) calls ``self.log.debug(..., func=
hltype(self.sendData), peer=hlval(self.peer), ...)`` for each frame it
writes, and ``hltype(self.dataReceived)`` for each read from a socket: the
arguments are built (``hltype`` inspects the method and styles it with
click) before the logger drops the line, a few percent of Daphne's CPU on
replay and fan-out (docs/decisions/0004-autobahn-frame-logging.md). Unless
debug logging is on, the two helpers in autobahn's websocket modules are
swapped for plain ones; only the text of debug lines that are never
emitted changes.
"""

from typing import Any


def _plain_type(obj: Any) -> str:
    return getattr(obj, "__qualname__", type(obj).__name__)


def _plain_value(val: Any, color: str = "white", bold: bool = True) -> Any:
    return val


def quiet_frame_logging() -> bool:
    """Swap the helpers unless autobahn logs at debug level; return whether
    they were swapped."""
    import txaio
    from autobahn.twisted import websocket
    from autobahn.websocket import protocol

    try:
        level = txaio.get_global_log_level()  # type: ignore[attr-defined]
    except RuntimeError:  # no framework chosen yet: nothing logs at debug
        level = "info"
    if level in ("debug", "trace"):
        return False
    for module in (protocol, websocket):
        module.hltype = _plain_type  # type: ignore[attr-defined]
        module.hlval = _plain_value  # type: ignore[attr-defined]
    return True
