"""What every log line of a node carries besides its message.

``durable_id`` is the durable client the current code handles: set by a
socket once its ``hello`` names one and by a REST request on
``clients/{id}/…``, for the rest of that socket's task (and the threads it
calls into) or that request. ``ContextFilter`` puts it, and the node's
name, on each record, where ``DURABLECACHE_LOG_FORMAT=json`` writes them
(docs/operations.md#logs).
"""

import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar

from django.conf import settings

durable_id: ContextVar[str | None] = ContextVar("durable_id", default=None)


@contextlib.contextmanager
def handling(client: str | None) -> Iterator[None]:
    """Log as handling the durable client ``client`` within the block."""
    token = durable_id.set(client)
    try:
        yield
    finally:
        durable_id.reset(token)


class ContextFilter(logging.Filter):
    """Adds ``node`` to every record, and ``durable_id`` where there is one."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.node = settings.DURABLECACHE_NODE_NAME
        client = durable_id.get()
        if client is not None:
            record.durable_id = client
        return True
