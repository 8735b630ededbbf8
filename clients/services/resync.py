"""The resync after a gap: a client whose queue overflowed gets, after
``ready``, the entries changed after the gap's ``since`` instead of the
events it missed (docs/protocol.md, "Bounded queues, gaps and resync").

``client_resync_start`` clears the gap under the client row's lock, with
the event log locked as a write would (as ``interest_register`` reads its
``since_seq``): the log head ``H`` read there is the client's
``queue_floor``. Every host's fan-out queues the client's events above
``H`` again and none at or below it; the images, read after that commit,
hold every change through ``H`` (and perhaps later ones, which come
again as events: their version says so). The rows a host still holds at
or below ``H`` are acked through it: here at once, on the other hosts by
the ack relay (and the primary's size reports), so no host, promoted
later, replays an event from before the resync.
"""

import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from cache import services as cache_services
from clients.matching import Selector
from clients.models import ContinuousQuery, DurableClient, Interest, InterestKind
from clients.replication import ack_relay
from clients.services.interests import clients_lock
from queues import services as queue_services


@dataclass(frozen=True)
class ResyncTarget:
    """One image of a resync: an interest (a key list is one row per key:
    the keys of one region go together, named by their first row's id) or
    a CQ."""

    region: str
    interest: int | None = None
    selector: Selector | None = None
    cq: str | None = None
    query: str | None = None


@dataclass
class Resync:
    """A resync begun: the gap it answers, the floor the queue restarted
    at, and what to send images for."""

    since: int
    dropped: int
    reason: str
    floor: int
    targets: list[ResyncTarget] = field(default_factory=list)

    @property
    def gap(self) -> dict[str, Any]:
        return {"since": self.since, "dropped": self.dropped, "reason": self.reason}


def client_resync_start(*, client_id: uuid.UUID) -> Resync | None:
    """Clear the client's gap and restart its queue at the log head; return
    what the resync must send (None: no gap stands). Run by the socket's
    ``ready`` on the client's primary, before its delivery starts.

    Without a gap, one read of the row and no lock: the event log is
    locked (as a write locks it) only for a resync. A gap recorded after
    that read is the delivering socket's (``delivery_checks``)."""
    if not DurableClient.objects.filter(pk=client_id, gap_since__isnull=False).exists():
        return None
    with transaction.atomic():
        clients_lock([client_id])
        head = cache_services.event_log_head_locked()
        client = DurableClient.objects.filter(pk=client_id).first()
        if client is None or client.gap_since is None:
            return None
        resync = Resync(
            since=client.gap_since,
            dropped=client.gap_dropped,
            reason=client.gap_reason,
            floor=head,
            targets=_targets(client_id),
        )
        DurableClient.objects.filter(pk=client_id).update(
            gap_since=None, gap_dropped=0, gap_reason="", queue_floor=head
        )
    # What the hosts still hold is covered by the images: acked through
    # the floor here now, on the other hosts by the relay.
    queue_services.queue_ack(client_id=client_id, up_to=head)
    ack_relay.add(client_id, head)
    return resync


def _targets(client_id: uuid.UUID) -> list[ResyncTarget]:
    targets: list[ResyncTarget] = []
    keys: dict[str, tuple[int, list[str]]] = {}
    for pk, region, kind, value in (
        Interest.objects.filter(client_id=client_id)
        .order_by("id")
        .values_list("pk", "region", "kind", "selector")
    ):
        if kind == InterestKind.KEY:
            keys.setdefault(region, (pk, []))[1].append(value)
            continue
        values = (value,) if kind == InterestKind.REGEX else ("",)
        targets.append(ResyncTarget(region, pk, Selector(kind, values)))
    for region, (pk, listed) in keys.items():
        selector = Selector(InterestKind.KEY, tuple(listed))
        targets.append(ResyncTarget(region, pk, selector))
    targets.sort(key=lambda t: t.interest or 0)
    for name, region, query in (
        ContinuousQuery.objects.filter(client_id=client_id)
        .order_by("name")
        .values_list("name", "region", "query")
    ):
        targets.append(ResyncTarget(region, cq=name, query=query))
    return targets
