"""The one after-commit hook through which a write reaches the queues.

The cache domain sits at the bottom of the import arrows: it does not know
who consumes its events. ``clients`` registers a callback at app start
(ClientsConfig.ready); every committed write calls it with the highest
event seq it produced. See ARCHITECTURE.md, "Life of a write".
"""

from collections.abc import Callable

from django.conf import settings
from django.db import transaction

from common import trace

_listeners: list[Callable[[int], None]] = []


def on_events_committed(callback: Callable[[int], None]) -> None:
    """Register ``callback(last_seq)`` to run after each committed write."""
    if callback not in _listeners:
        _listeners.append(callback)


def events_written(last_seq: int) -> None:
    """Schedule the listeners to run once the current transaction commits."""

    def fire() -> None:
        trace.mark("committed", settings.DURABLECACHE_NODE_NAME, 0, last_seq)
        for callback in list(_listeners):
            callback(last_seq)

    transaction.on_commit(fire)
