"""A delivery round's statements on the node store are the same for one
socket as for twenty: a read round is one statement, an ack round a fixed
list of them.

The hot statements are SQL (docs/decisions/0010-hot-statements-in-sql.md);
one per socket would show here.
"""

import uuid

import pytest
from django.db import connections, transaction
from django.utils import timezone

from cache.selectors import LoggedEvent
from queues import selectors as queue_selectors
from queues import services as queue_services
from queues.models import QueueState

# transaction=True: the ack round commits as in production (no savepoint).
pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "node"])

SOCKETS = [1, 5, 20]
EVENTS = 6

# What each statement of an ack round that marks what it reads is, in
# order. SQLite's BEGIN IMMEDIATE is not in the log: the project's backend
# (durablecache.server.sqlite3) issues it on the raw connection. An
# executemany is one entry ("N times: ...").
ACK_ROUND = {
    "sqlite": [
        "SELECT the heads in client id order (the whole database is locked)",
        "SELECT the events of each ack's range, counted per ack",
        "DELETE each ack's rows that end in its range (one executemany)",
        "SELECT the marked sockets' rows again (read)",
        "UPDATE the heads (one executemany)",
        "COMMIT",
    ],
    "postgresql": [
        "BEGIN",
        "SET LOCAL synchronous_commit TO OFF (commit_unflushed)",
        "SELECT the heads in client id order FOR UPDATE",
        "DELETE every ack's rows, cut the spans across, count its events",
        "SELECT the marked sockets' rows again (read)",
        "UPDATE the heads FROM unnest(...)",
        "COMMIT",
    ],
}


def _queues(count: int) -> list[uuid.UUID]:
    """``count`` queues of ``EVENTS`` updates that may conflate (mode
    "true"), so that a round reading them marks them delivered."""
    now = timezone.now()
    events = [
        LoggedEvent(seq, f"ev{seq}", "prices", f"k{seq}", "update", "1", 1, True, now)
        for seq in range(1, EVENTS + 1)
    ]
    client_ids = [uuid.uuid4() for _ in range(count)]
    for client_id in client_ids:
        queue_services.queue_ensure(
            client_id=client_id, durable_id=None, conflate="true"
        )
    with transaction.atomic(using="node"):
        queue_services.queue_append_many(dict.fromkeys(client_ids, events))
    return client_ids


@pytest.mark.parametrize("sockets", SOCKETS)
def test_a_read_round_is_one_statement(sockets, django_assert_num_queries):
    reads = [(pk, 0, 10, None) for pk in _queues(sockets)]
    with django_assert_num_queries(1, connection=connections["node"]):
        found = queue_selectors.queue_reads_after_many(reads)
    assert [(len(events), conflates) for events, conflates in found] == [
        (EVENTS, True)
    ] * sockets


def test_a_read_round_takes_one_statement_per_reads_per_statement(
    monkeypatch, django_assert_num_queries
):
    monkeypatch.setattr(queue_selectors, "READS_PER_STATEMENT", 2)
    reads = [(pk, 0, 10, None) for pk in _queues(5)]
    with django_assert_num_queries(3, connection=connections["node"]):
        found = queue_selectors.queue_reads_after_many(reads)
    assert [len(events) for events, _ in found] == [EVENTS] * 5


@pytest.mark.parametrize("sockets", SOCKETS)
def test_an_ack_round_that_marks_is_a_fixed_list_of_statements(
    sockets, django_assert_num_queries
):
    client_ids = _queues(sockets)
    reads = [(pk, 2, 10, None) for pk in client_ids]

    def read():  # as sockets.delivery_rounds reads again, the heads locked
        found = queue_selectors.queue_events_after_many(reads)
        return {
            pk: events[-1]["seq"] for pk, events in zip(client_ids, found, strict=True)
        }

    statements = ACK_ROUND[connections["node"].vendor]
    with django_assert_num_queries(len(statements), connection=connections["node"]):
        dropped = queue_services.queue_ack_and_mark_many(
            acks=[(pk, 2) for pk in client_ids], marking=client_ids, read=read
        )
    assert dropped == [2] * sockets
    heads = QueueState.objects.filter(pk__in=client_ids)
    assert {(h.acked_through, h.delivered_through, h.size) for h in heads} == {
        (2, EVENTS, EVENTS - 2)
    }
