"""Acknowledgements reach every host of a queue: a batched relay from the
primary's sockets (``AckRelay``), healed by the acks the primary reports
with its queue sizes (``apply_reported_acks``)."""

import contextlib
import logging
import threading
import time
import uuid

from django.conf import settings
from django.db import close_old_connections

from clients import dispatch
from clients.models import DurableClient, QueueSizeReport
from queues import selectors as queue_selectors
from queues import services as queue_services

log = logging.getLogger(__name__)


def apply_reported_acks(node: str) -> int:
    """Apply the acks a primary reported to the copies this node holds.

    Heals a lost relay message: the primary's tick reports its
    ``acked_through`` with its queue sizes.
    """
    mine = queue_selectors.queue_acked_through()
    if not mine:
        return 0
    reports = QueueSizeReport.objects.filter(client_id__in=list(mine)).values_list(
        "client_id", "node", "acked_through", "client__primary"
    )
    acks = {
        pk: acked
        for pk, host, acked, primary in reports
        if host == primary != node and acked > mine.get(pk, 0)
    }
    return queue_services.queue_ack_many(acks) if acks else 0


class AckRelay:
    """Carry a primary's acknowledgements to the client's other hosts.

    Sockets only mark (client, up_to) and return; one daemon thread per
    process sends, every ``DURABLECACHE_ACK_RELAY_S``, one task per host
    with the highest ack of each client. A relay lost with the process is
    healed by the primary's size report (``apply_reported_acks``).
    """

    def __init__(self) -> None:
        self.pending: dict[uuid.UUID, int] = {}
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def add(self, client_id: uuid.UUID, up_to: int) -> None:
        with self.lock:
            if up_to > self.pending.get(client_id, 0):
                self.pending[client_id] = up_to
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(
                    target=self._run, name="ack-relay", daemon=True
                )
                self.thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(settings.DURABLECACHE_ACK_RELAY_S)
            with self.lock:
                acks, self.pending = self.pending, {}
            if not acks:
                continue
            try:
                self.flush(acks)
            except Exception as exc:  # the size reports heal it
                log.warning("ack relay failed: %s", exc)
            finally:
                with contextlib.suppress(Exception):
                    close_old_connections()

    @staticmethod
    def flush(acks: dict[uuid.UUID, int]) -> None:
        own = settings.DURABLECACHE_NODE_NAME
        per_host: dict[str, dict[str, int]] = {}
        rows = DurableClient.objects.filter(pk__in=list(acks)).values_list(
            "pk", "primary", "secondaries"
        )
        for pk, primary, secondaries in rows:
            for host in [primary, *secondaries]:
                if host and host != own:
                    per_host.setdefault(host, {})[pk.hex] = acks[pk]
        for host, batch in per_host.items():
            dispatch.ack_on(host, batch)


ack_relay = AckRelay()
