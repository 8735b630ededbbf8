"""Rows of the node store: the subscription queues this node hosts.

A node reads and writes only its own store; a copy on another host is
filled by tasks (``clients.replication``). An event is stored once per
node (``QueuedEvent``) and each queue that holds it has a narrow row
naming it by seq (``QueueEntry``): a region with many subscribers costs a
small row per subscriber, not a copy of the value; and one row stands
for a run of a queue's plain events (``QueueEntry.through``), so a
region with many subscribers costs a row per subscriber per fan-out
pass, not per event. A field added to
either must be added to the fan-out's rows (``queues.services.append``,
columns in field order), ``queues.selectors``' reads and
``entry_to_event``, and the copy format (``queues.selectors.entry_to_copy``
and ``queues.services.copies``).
"""

from django.db import models


class QueueState(models.Model):
    """The head of one client's queue on this node."""

    client_id = models.UUIDField(primary_key=True)
    durable_id = models.CharField(max_length=128, null=True, blank=True)
    conflate = models.CharField(max_length=8, default="server")
    # Highest seq appended; a queue entry's seq is its event's log seq.
    last_seq = models.BigIntegerField(default=0)
    acked_through = models.BigIntegerField(default=0)
    # Highest seq sent on the current session; updates after it conflate.
    delivered_through = models.BigIntegerField(default=0)
    size = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    # A copy being filled from another host (a new secondary) is not synced
    # until every entry through ``copy_upto`` arrived; events after
    # ``copy_upto`` come from this node's own fan-out.
    is_synced = models.BooleanField(default=True)
    copy_upto = models.BigIntegerField(default=0)
    copy_after = models.BigIntegerField(default=0)
    copy_source = models.CharField(max_length=128, blank=True, default="")
    copy_requested_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.durable_id or self.client_id} ({self.size})"


class QueuedEvent(models.Model):
    """An event that at least one queue of this node holds, stored once.

    Kept while a ``QueueEntry`` names its seq: the tick deletes the ones
    no queue names any more (``queues.services.events.queued_events_prune``),
    under the fan-out cursor's lock, which every writer of entries holds.
    """

    seq = models.BigIntegerField(primary_key=True)
    event_id = models.CharField(max_length=32)
    region = models.CharField(max_length=128)
    key = models.CharField(max_length=512, null=True)
    op = models.CharField(max_length=16)
    value = models.JSONField(null=True)
    version = models.BigIntegerField(null=True)
    ts = models.DateTimeField()

    def __str__(self) -> str:
        return f"#{self.seq} {self.op} {self.region}/{self.key}"


class QueueEntry(models.Model):
    """One queue's hold on the events (``QueuedEvent``) with seqs from
    ``seq`` through ``through``: one event (``through`` = ``seq``), or a
    run of plain events (a span).

    A span holds every event of the cluster log in its range: the fan-out
    makes one of events it read one after another in one pass, all of
    them appended to the queue, none that may conflate nor names a CQ
    (``queues.services.append``). So every event this node stores with a
    seq in the range is the queue's, and a read takes them all (``v.seq
    BETWEEN e.seq AND e.through``). An ack cuts a span's front
    (``queues.services.spans``); nothing else removes one event from it:
    conflation, a closed CQ's forget and a copy's conflation remove rows
    that may conflate or name a CQ, which a span never is. A change of
    the queue's mode splits its spans into rows of one event first.

    ``region``, ``key`` and ``op`` repeat the event's: the queue's own
    rules look rows up by them (conflation by key, a mode change's
    reclassification of updates, a closed CQ's forget). A span's ``op`` is
    ``SPAN`` (its region and key are its first event's), so that no such
    lookup takes it for one of its events, even once an ack has cut it
    down to one; ``spans_split`` makes rows of its events again."""

    # The ``op`` of a row that holds a run of events (a span).
    SPAN = "span"

    # No index of its own: the unique (queue, seq) one serves every lookup
    # by queue, and a second one would cost each event a page write per
    # queue it is appended to (migration 0004). No constraint in the
    # database either: its check per row inserted (a lookup of the head
    # and, on PostgreSQL, a row lock) cost as much as the row itself
    # (docs/decisions/0029-events-stored-once-per-node.md). Every writer
    # of rows holds the head's lock (the fan-out's ``_lock_heads``, a
    # copy's page, a drop), so no row outlives its head.
    queue = models.ForeignKey(
        QueueState,
        on_delete=models.CASCADE,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    seq = models.BigIntegerField()
    region = models.CharField(max_length=128)
    key = models.CharField(max_length=512, null=True)
    op = models.CharField(max_length=16)
    # Whether a later update of the key may remove this row while it is
    # undelivered (an update, in the queue's conflation mode; set when it
    # is queued). Only such rows are marked delivered when read, and only
    # they are in the index conflation looks them up by.
    conflates = models.BooleanField(default=False)
    # The client's continuous queries this event moves, as the event
    # frame's ``cq``: JSON text of [{name, cq_op}] sorted by name, null
    # when none does. Judged once, by the fan-out that queued the row, and
    # copied with it, so every host and every replay carries the same list.
    cq = models.JSONField(null=True)
    # The last seq the row holds: its own for one event, past it for a span.
    through = models.BigIntegerField()

    class Meta:
        verbose_name_plural = "queue entries"
        constraints = [
            models.UniqueConstraint(fields=["queue", "seq"], name="queue_entry_seq")
        ]
        indexes = [
            models.Index(
                fields=["queue", "region", "key"],
                condition=models.Q(conflates=True),
                name="queue_entry_conflates",
            )
        ]

    def __str__(self) -> str:
        if self.through != self.seq:
            return f"{self.queue_id}#{self.seq}-{self.through}"
        return f"{self.queue_id}#{self.seq} {self.op}"


class FanoutCursor(models.Model):
    """How far this node has read the cluster event log (one row)."""

    node = models.CharField(max_length=128, primary_key=True)
    fanout_through = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.node} at {self.fanout_through}"
