"""The event frames this process's sockets send, added to the node's row.

The dashboard's "out" rate is the difference between two samples of
``Node.delivered_total`` (clients.samples); each Daphne process adds its
count every ``FLUSH_S`` from a thread of its own, so a frame costs a lock
and an addition, not a statement.
"""

import contextlib
import threading
import time

from django.db import close_old_connections
from django.db.models import F

from cache.models import Node

FLUSH_S = 2.0


class DeliveryCounter:
    """Frames sent by this process's sockets, flushed to the node's row."""

    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def add(self, node: str, n: int) -> None:
        with self.lock:
            self.count += n
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(
                    target=self._run, args=(node,), name="delivery-counter", daemon=True
                )
                self.thread.start()

    def _run(self, node: str) -> None:
        while True:
            time.sleep(FLUSH_S)
            with self.lock:
                count, self.count = self.count, 0
            if not count:
                continue
            try:
                Node.objects.filter(name=node).update(
                    delivered_total=F("delivered_total") + count
                )
            except Exception:  # a chart is not worth a retry storm
                with self.lock:
                    self.count += count
            finally:
                with contextlib.suppress(Exception):
                    close_old_connections()


counter = DeliveryCounter()
