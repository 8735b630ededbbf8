"""Regions, entries, the cluster event log and node membership.

All of these live in the cluster database (alias ``default``).
"""

from django.db import models


class Region(models.Model):
    name = models.CharField(max_length=128, unique=True)
    conflate_events = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    # The highest log position a ``since`` catch-up cannot answer from: the
    # seq of the newest tombstone pruned here, at least the log head when
    # the region was created (what its name held before is not known). A
    # ``since`` below it is ``since_too_old`` (docs/protocol.md).
    tombstones_pruned_through = models.BigIntegerField(default=0)
    # The highest version of a tombstone pruned here: a key without a row
    # starts above it, so a key re-created after its tombstone went keeps
    # growing its versions.
    pruned_version = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Entry(models.Model):
    """One key of a region; a destroyed key keeps its row (its tombstone)
    for at least ``DURABLECACHE_TOMBSTONE_KEEP_S``, so versions go on and a
    ``since`` catch-up can say the key went."""

    # No index of its own: the (region, key) and (region, seq, id) indexes
    # lead with it, and every write updates each index of the row.
    region = models.ForeignKey(
        Region, on_delete=models.CASCADE, related_name="entries", db_index=False
    )
    key = models.CharField(max_length=512)
    value = models.JSONField(null=True)
    version = models.BigIntegerField(default=0)
    is_destroyed = models.BooleanField(default=False)
    updated_at = models.DateTimeField()
    # The seq of the event of the key's last change, written by the
    # statement that writes the row (0: last changed before entries kept
    # it). A ``since`` image reads "changed after seq S" by the index
    # below, a page at a time.
    seq = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["region", "key"], name="entry_region_key")
        ]
        indexes = [
            # (seq, id): many rows share a region_clear's seq, so pages go
            # on from the last (seq, id) read.
            models.Index(fields=["region", "seq", "id"], name="entry_region_seq"),
            # The tombstones by age, for their pruning (only destroyed rows
            # are in it).
            models.Index(
                fields=["updated_at"],
                condition=models.Q(is_destroyed=True),
                name="entry_tombstone_age",
            ),
        ]
        verbose_name_plural = "entries"

    def __str__(self) -> str:
        return f"{self.region_id}:{self.key}"


class Op(models.TextChoices):
    CREATE = "create"
    UPDATE = "update"
    DESTROY = "destroy"
    INVALIDATE = "invalidate"
    REGION_CLEAR = "region_clear"
    REGION_DESTROY = "region_destroy"


class EventLog(models.Model):
    """The single counter row that hands out event sequence numbers.

    Every write locks this row first (lock order: event log, then entries),
    so event ``seq`` order is commit order and a cursor reading
    ``seq > n`` can never skip an event that commits late.
    """

    last_seq = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"event log at {self.last_seq}"


class Event(models.Model):
    """One change, durable once the write that made it has committed.

    Persisted and shipped to node stores: a new field must be added to
    ``cache.events.event_to_dict`` and to queues' QueueEntry.
    """

    seq = models.BigIntegerField(primary_key=True)
    # Cluster-unique by construction (a uuid4's 122 random bits), not by an
    # index: nothing looks an event up by its id, and a unique index on a
    # random string costs every append a write at a random place in it.
    event_id = models.CharField(max_length=32)
    region = models.CharField(max_length=128)
    key = models.CharField(max_length=512, null=True)
    op = models.CharField(max_length=16, choices=Op)
    value = models.JSONField(null=True)
    version = models.BigIntegerField(null=True)
    conflate = models.BooleanField(default=False)
    ts = models.DateTimeField()
    # The entry's value just before this change: null when the key had no
    # row, was destroyed or held null. Continuous queries judge an entry's
    # membership before and after a change from the event alone, so every
    # host of a queue names the same CQs for it, however far behind its
    # fan-out is (docs/decisions/0023-prior-value-in-the-event-log.md).
    prior_value = models.JSONField(null=True)

    class Meta:
        ordering = ["seq"]

    def __str__(self) -> str:
        return f"{self.event_id} {self.op} {self.region}:{self.key}"


class Node(models.Model):
    """A member of the cluster; up while its heartbeat is fresh."""

    name = models.CharField(max_length=128, unique=True)
    url = models.CharField(max_length=255)
    started_at = models.DateTimeField()
    last_heartbeat = models.DateTimeField()
    is_draining = models.BooleanField(default=False)
    # Highest event seq this node has fanned out into its store; the event
    # log is pruned below the smallest of the nodes that still need it
    # (clients.maintenance.prune_event_log).
    fanout_through = models.BigIntegerField(default=0)
    # Monotonic totals of this node, added to by each of its processes
    # every few seconds (cache.counters), read by /metrics: event frames
    # its sockets sent (also the dashboard's delivery rate), events its
    # sockets' acks removed, failovers and expiries it carried out, and
    # rows its fan-out queued that name a CQ.
    delivered_total = models.BigIntegerField(default=0)
    acked_total = models.BigIntegerField(default=0)
    failovers_total = models.BigIntegerField(default=0)
    expiries_total = models.BigIntegerField(default=0)
    cq_events_total = models.BigIntegerField(default=0)
    overflows_total = models.BigIntegerField(default=0)
    dropped_events_total = models.BigIntegerField(default=0)
    resynced_entries_total = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
