"""One synchronous Redis client per process and purpose.

A client made before a fork must not be used after it (both processes
would share its sockets), so each slot remembers the pid that made its
client and a forked process makes its own. Short timeouts: the callers
(the fan-out's doorbell, the wake-up publish) have a fallback and must
not hang a commit or a fan-out pass on a Redis that went away.
"""

import os
from typing import Any

import redis


def new_slot() -> dict[str, Any]:
    """An empty slot for ``client``: a module keeps one per purpose."""
    return {"pid": 0, "client": None}


def client(slot: dict[str, Any], url: str) -> Any:
    """This process's client of ``slot`` for ``url``."""
    if slot["pid"] != os.getpid():
        slot["client"] = redis.Redis.from_url(
            url, socket_timeout=1, socket_connect_timeout=1
        )
        slot["pid"] = os.getpid()
    return slot["client"]
