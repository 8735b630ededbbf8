"""Statement helpers every node-store service shares: table names, the
queue head's primary key as the driver takes it, and commits that need
not wait for their flush."""

import uuid
from typing import Any

from django.db import connections

from common import sql
from queues.models import QueueState
from queues.routers import NODE_STORE

STATE_PK = QueueState._meta.get_field("client_id")


def table(model: Any) -> str:
    return sql.table(model, connections[NODE_STORE])


def state_pk(client_id: uuid.UUID, connection: Any) -> Any:
    """A queue head's primary key (its client's id) as the driver takes it."""
    return sql.uuid_param(client_id, connection)


def commit_unflushed(connection: Any) -> None:
    """Let this node-store transaction's commit return before PostgreSQL has
    flushed it to its WAL (``SET LOCAL synchronous_commit TO OFF``).

    Only for what the node can lose without losing an event, and only a
    crash of the PostgreSQL server loses it (a node's processes dying after
    the commit returned lose nothing): the last few ``wal_writer_delay``s
    of such commits, never a part of one. That is the fan-out's appends
    and the cursor that moves with them (the appends are made again from
    the event log, which keeps events at least ``EVENT_RETENTION``), and
    the delivery rounds' acks and marks (an ack lost sends its events
    again, which clients drop by id). A commit that waits for its flush
    costs its round the disk's flush time, and a node's delivery rounds
    and fan-outs queue behind one another. SQLite's WAL with
    ``synchronous=NORMAL`` does not flush per commit either.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")
