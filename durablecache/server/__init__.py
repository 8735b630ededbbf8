"""Server tuning: the runtime patches of Daphne's stack, in one room.

Each piece is named for what it changes, and each records its reason in a
decision record under ``docs/decisions/``:

* ``autobahn_unmask``: small incoming frames unmasked and checked without
  cffi (0003);
* ``autobahn_frame_logging``: no debug arguments built per frame (0004);
* ``twisted_eager_writes``: a websocket frame written at once (0005);
* ``gc_freeze``: the start-up heap out of the collector's way (0006);
* ``pooled_http``: one thread hop per HTTP request (0007);
* ``sqlite3``: SQLite writers queued on a lock per file (0008).

``DURABLECACHE_SERVER_TUNING=false`` turns every piece off: stock Daphne,
Django's ``ASGIHandler`` and Django's SQLite backend. Each patch checks at
start-up that the attributes it replaces exist; when one does not (a
newer release of the patched package), it logs a warning and leaves the
stock behaviour in place.
"""

import importlib
import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings

log = logging.getLogger(__name__)

# (module, attributes the patch relies on) for each websocket-stack patch.
_REQUIRES: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "autobahn_frame_logging": [
        ("autobahn.websocket.protocol", ("hltype", "hlval")),
        ("autobahn.twisted.websocket", ("hltype", "hlval")),
    ],
    "twisted_eager_writes": [
        (
            "twisted.internet.tcp",
            ("Connection.write", "Connection.writeSomeData", "Connection.TLS"),
        ),
    ],
    "autobahn_unmask": [
        ("autobahn.websocket.protocol", ("create_xor_masker", "Utf8Validator")),
    ],
}


def enabled() -> bool:
    """Whether the tuning is on (``DURABLECACHE_SERVER_TUNING``)."""
    return bool(getattr(settings, "DURABLECACHE_SERVER_TUNING", True))


def _missing(requires: list[tuple[str, tuple[str, ...]]]) -> list[str]:
    """The ``module:attribute`` names of ``requires`` that do not exist."""
    missing = []
    for module_name, attributes in requires:
        try:
            module: Any = importlib.import_module(module_name)
        except ImportError:
            missing.append(module_name)
            continue
        for dotted in attributes:
            target = module
            for part in dotted.split("."):
                if not hasattr(target, part):
                    missing.append(f"{module_name}:{dotted}")
                    break
                target = getattr(target, part)
    return missing


def _apply(name: str, install: Callable[[], object]) -> bool:
    missing = _missing(_REQUIRES[name])
    if missing:
        log.warning(
            "server tuning %s left off: %s not found (stock behaviour kept)",
            name,
            ", ".join(missing),
        )
        return False
    install()
    return True


def tune_websocket_server() -> list[str]:
    """Install the websocket-stack patches (idempotent); return their names."""
    if not enabled():
        return []
    from durablecache.server import (
        autobahn_frame_logging,
        autobahn_unmask,
        twisted_eager_writes,
    )

    pieces: dict[str, Callable[[], object]] = {
        "autobahn_frame_logging": autobahn_frame_logging.quiet_frame_logging,
        "twisted_eager_writes": twisted_eager_writes.eager_websocket_writes,
        "autobahn_unmask": autobahn_unmask.small_frames_without_cffi,
    }
    return [name for name, install in pieces.items() if _apply(name, install)]


def http_handler() -> Any:
    """The ASGI application for HTTP: the pooled handler, or Django's."""
    if enabled():
        from durablecache.server.pooled_http import PooledASGIHandler

        return PooledASGIHandler()
    from django.core.handlers.asgi import ASGIHandler

    return ASGIHandler()


def freeze_startup_heap() -> None:
    """Freeze what the process loaded at start (``gc_freeze``), when on."""
    if enabled():
        from durablecache.server import gc_freeze

        gc_freeze.freeze_startup_heap()
