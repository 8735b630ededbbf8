"""Durable clients, their interests and the ids whose queues were lost.

Cluster database (alias ``default``).
"""

import uuid

from django.conf import settings
from django.db import models


class Conflate(models.TextChoices):
    SERVER = "server"
    TRUE = "true"
    FALSE = "false"


def default_max_queued() -> int:
    """A client's ``max_queued`` until a ``hello`` gives one (a client a
    REST pre-registration created, say)."""
    return int(settings.DURABLECACHE_DEFAULT_MAX_QUEUED)


class DurableClient(models.Model):
    """A subscriber; durable when ``durable_id`` is set.

    A non-durable client has a row too (``durable_id`` null) so its interests
    and queue can hang off it; the row goes when its socket does.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    durable_id = models.CharField(max_length=128, unique=True, null=True, blank=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    timeout = models.PositiveIntegerField(default=300)
    redundancy = models.IntegerField(default=0)
    conflate = models.CharField(max_length=8, choices=Conflate, default=Conflate.SERVER)
    is_connected = models.BooleanField(default=False)
    node = models.CharField(max_length=128, blank=True, default="")
    # The id of the socket that holds the client (``NODE!TAG.hex``, made by
    # the consumer): a late disconnect of an older socket must not release
    # a newer one.
    socket_id = models.CharField(max_length=255, blank=True, default="")
    primary = models.CharField(max_length=128, blank=True, default="")
    secondaries = models.JSONField(default=list, blank=True)
    # Secondaries whose copy is still being filled (a subset of
    # ``secondaries``); only a complete copy can be promoted to primary.
    syncing = models.JSONField(default=list, blank=True)
    # At most this many events queued; one more overflows the queue.
    max_queued = models.PositiveIntegerField(default=default_max_queued)
    # The queue's gap (docs/protocol.md, "Bounded queues"): recorded once,
    # here, by the first host whose append would pass ``max_queued``; every
    # host's fan-out reads it with the client's interests and queues
    # nothing while it stands. ``gap_since`` null: no gap.
    gap_since = models.BigIntegerField(null=True, blank=True)
    gap_dropped = models.BigIntegerField(default=0)
    gap_reason = models.CharField(max_length=16, blank=True, default="")
    # Events at or below this log seq are never queued: the log head when
    # the last resync began (what it covers); 0 before any.
    queue_floor = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    connected_at = models.DateTimeField(null=True, blank=True)
    disconnected_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["durable_id"]
        indexes = [models.Index(fields=["is_connected", "expires_at"])]

    def __str__(self) -> str:
        return self.durable_id or f"non-durable {self.id.hex[:8]}"

    @property
    def is_durable(self) -> bool:
        return self.durable_id is not None

    @property
    def group_name(self) -> str:
        return f"queue.{self.id.hex}"

    @property
    def gap(self) -> dict[str, object] | None:
        """The standing gap as the protocol shows it, or None."""
        if self.gap_since is None:
            return None
        return {
            "since": self.gap_since,
            "dropped": self.gap_dropped,
            "reason": self.gap_reason,
        }

    @property
    def hosts(self) -> list[str]:
        return [h for h in [self.primary, *self.secondaries] if h]

    @property
    def complete_secondaries(self) -> list[str]:
        return [h for h in self.secondaries if h not in self.syncing]


class InterestKind(models.TextChoices):
    KEY = "key"
    REGEX = "regex"
    ALL_KEYS = "all_keys"


class Policy(models.TextChoices):
    KEYS_VALUES = "keys_values"
    KEYS = "keys"
    NONE = "none"


class Interest(models.Model):
    """One selector of one client in one region (a key list is one row a key)."""

    client = models.ForeignKey(
        DurableClient, on_delete=models.CASCADE, related_name="interests"
    )
    region = models.CharField(max_length=128)
    kind = models.CharField(max_length=8, choices=InterestKind)
    # The key for KEY, the pattern for REGEX, empty for ALL_KEYS.
    selector = models.CharField(max_length=1024, blank=True, default="")
    is_durable = models.BooleanField(default=False)
    policy = models.CharField(max_length=12, choices=Policy, default=Policy.KEYS_VALUES)
    # Events with seq <= since_seq were written before the interest existed.
    since_seq = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["client", "region", "kind", "selector"],
                name="interest_unique_selector",
            )
        ]
        indexes = [models.Index(fields=["region", "kind", "selector"])]

    def __str__(self) -> str:
        return f"{self.client} {self.region} {self.kind} {self.selector}"


class EndedInterest(models.Model):
    """An interest removed (a socket's end dropped its non-durable ones, or
    the client unregistered it), kept while some host of the client's queue
    may still fan out the events written before: every host queues the
    events with ``since_seq < seq <= until_seq`` whenever it gets to them,
    so a host whose fan-out lagged the removal holds what the others hold.
    Deleted once every node that may fan them out has (the tick, with the
    event log's prune)."""

    client = models.ForeignKey(
        DurableClient, on_delete=models.CASCADE, related_name="+"
    )
    region = models.CharField(max_length=128)
    kind = models.CharField(max_length=8, choices=InterestKind)
    selector = models.CharField(max_length=1024, blank=True, default="")
    since_seq = models.BigIntegerField()
    # The log head when the interest was removed: later events are not its.
    until_seq = models.BigIntegerField()

    class Meta:
        indexes = [
            models.Index(fields=["region"], name="ended_interest_region"),
            models.Index(fields=["until_seq"], name="ended_interest_until"),
        ]

    def __str__(self) -> str:
        return f"{self.client} {self.region} {self.kind} {self.selector} (ended)"


class ContinuousQuery(models.Model):
    """A client's named continuous query over one region (docs/cq.md,
    docs/protocol.md): the fan-out judges every event of the region after
    ``since_seq`` against it and names it in the event's ``cq`` list."""

    client = models.ForeignKey(
        DurableClient, on_delete=models.CASCADE, related_name="cqs"
    )
    name = models.CharField(max_length=128)
    region = models.CharField(max_length=128)
    query = models.TextField()
    # The query's canonical form: a second registration of the name is
    # idempotent when region, canonical text and durability agree.
    canonical = models.TextField()
    is_durable = models.BooleanField(default=False)
    # Events with seq <= since_seq were written before the CQ existed.
    since_seq = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "continuous query"
        verbose_name_plural = "continuous queries"
        constraints = [
            models.UniqueConstraint(fields=["client", "name"], name="cq_unique_name")
        ]
        indexes = [models.Index(fields=["region"], name="cq_region")]

    def __str__(self) -> str:
        return f"{self.client} {self.name} on {self.region}"


class EndedCq(models.Model):
    """A non-durable CQ ended by its socket's end (keepalive or a drop):
    the events written before the end stay its on every host, as an
    ``EndedInterest``'s do, so a host whose fan-out lagged names it in
    the same events as the others. A CQ closed (``close_cq``, REST, an
    operator, a region's destroy) leaves no row: no frame names it
    again. Deleted with the event log's prune, as ended interests are."""

    client = models.ForeignKey(
        DurableClient, on_delete=models.CASCADE, related_name="+"
    )
    name = models.CharField(max_length=128)
    region = models.CharField(max_length=128)
    query = models.TextField()
    since_seq = models.BigIntegerField()
    until_seq = models.BigIntegerField()

    class Meta:
        indexes = [
            models.Index(fields=["region"], name="ended_cq_region"),
            models.Index(fields=["until_seq"], name="ended_cq_until"),
        ]

    def __str__(self) -> str:
        return f"{self.client} {self.name} on {self.region} (ended)"

    @classmethod
    def end(cls, rows: list["ContinuousQuery"], *, until: int) -> int:
        """End these locked CQ rows at log seq ``until``: each that judged
        an event before it is kept through ``until``, so every host names it
        in the same events; the rows go. The number ended."""
        EndedCq.objects.bulk_create(
            EndedCq(
                client_id=row.client_id,
                name=row.name,
                region=row.region,
                query=row.query,
                since_seq=row.since_seq,
                until_seq=until,
            )
            for row in rows
            if row.since_seq < until
        )
        pks = [row.pk for row in rows]
        return ContinuousQuery.objects.filter(pk__in=pks).delete()[0]


class ClosedCq(models.Model):
    """A closed CQ still to be taken out of the client's queue on one host
    (``clients.services.cqs.cq_forget_here``): written with the close for
    every host, deleted once that host's forget ran. A host whose forget
    task was lost runs it before it serves the queue (``hello``), copies
    it, or at its next tick, so the drain is never lost with the task."""

    client = models.ForeignKey(
        DurableClient, on_delete=models.CASCADE, related_name="+"
    )
    name = models.CharField(max_length=128)
    node = models.CharField(max_length=128)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["client", "name", "node"], name="closed_cq_unique"
            )
        ]
        indexes = [models.Index(fields=["node"], name="closed_cq_node")]

    def __str__(self) -> str:
        return f"{self.client} {self.name} on {self.node} (closed)"


class LostQueue(models.Model):
    """A durable id whose queue was lost (expired or all hosts died).

    Its next ``hello`` is answered ``pending_events: -1`` and removes the row.
    """

    durable_id = models.CharField(max_length=128, unique=True)
    # Only the owner of the lost queue is told about it (-1); anyone else
    # taking the free id starts fresh (-2).
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", null=True
    )
    reason = models.CharField(max_length=32)
    lost_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.durable_id} ({self.reason})"


class QueueSizeReport(models.Model):
    """How many events one host holds for one client, as last reported."""

    client = models.ForeignKey(
        DurableClient, on_delete=models.CASCADE, related_name="size_reports"
    )
    node = models.CharField(max_length=128)
    size = models.BigIntegerField(default=0)
    # The host's acknowledged-through seq: a primary's report heals a lost
    # ack relay to its secondaries.
    acked_through = models.BigIntegerField(default=0)
    reported_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["client", "node"], name="report_unique")
        ]

    def __str__(self) -> str:
        return f"{self.client_id}@{self.node}: {self.size}"


class HistoryKind(models.TextChoices):
    CONNECTED = "connected"
    DISCONNECTED = "disconnected"
    CLOSED = "closed"
    DELETED = "deleted"
    EXPIRED = "expired"
    FAILOVER = "failover"
    LOST = "lost"


class ClientHistory(models.Model):
    """What happened to a durable id: connects, disconnects, failovers, end.

    Keyed by ``durable_id`` (not a foreign key) so it outlives the client
    it tells about; pruned after ``HISTORY_RETENTION`` by the tick.
    """

    durable_id = models.CharField(max_length=128)
    kind = models.CharField(max_length=16, choices=HistoryKind)
    node = models.CharField(max_length=128, blank=True, default="")
    detail = models.CharField(max_length=255, blank=True, default="")
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "client history"
        indexes = [
            models.Index(fields=["durable_id", "at"]),
            models.Index(fields=["at"]),
        ]

    def __str__(self) -> str:
        return f"{self.durable_id} {self.kind} at {self.at:%Y-%m-%d %H:%M:%S}"


class NodeSample(models.Model):
    """One node's counters at one moment, for the dashboard's charts."""

    node = models.CharField(max_length=128)
    at = models.DateTimeField()
    queued_events = models.BigIntegerField(default=0)
    hosted_queues = models.IntegerField(default=0)
    # Cluster event-log head (events in) and this node's frames sent to
    # sockets so far (events out); rates are differences between samples.
    log_head = models.BigIntegerField(default=0)
    delivered_total = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["at"]
        indexes = [models.Index(fields=["node", "at"]), models.Index(fields=["at"])]

    def __str__(self) -> str:
        return f"{self.node} at {self.at:%H:%M:%S}: {self.queued_events}"


class ClientSample(models.Model):
    """One durable client's queue depth on its primary at one moment."""

    durable_id = models.CharField(max_length=128)
    node = models.CharField(max_length=128)
    at = models.DateTimeField()
    size = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["at"]
        indexes = [
            models.Index(fields=["durable_id", "at"]),
            models.Index(fields=["at"]),
        ]

    def __str__(self) -> str:
        return f"{self.durable_id}@{self.node} at {self.at:%H:%M:%S}: {self.size}"
