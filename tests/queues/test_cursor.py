"""Where a node's fan-out cursor starts when its node starts."""

import uuid

import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext

from queues import selectors, services
from queues.models import FanoutCursor

pytestmark = pytest.mark.django_db(databases=["default", "node"])
NODE = "node-1"


def test_a_new_store_starts_at_the_log_head():
    assert services.cursor_init(node=NODE, head=42, oldest=1) == 0
    assert selectors.fanout_cursor(node=NODE) == 42


def test_a_store_that_read_up_to_the_oldest_event_keeps_its_queues():
    FanoutCursor.objects.create(node=NODE, fanout_through=9)
    queue = uuid.uuid4()
    services.queue_ensure(client_id=queue, durable_id="d1", conflate="server")
    assert services.cursor_init(node=NODE, head=50, oldest=10) == 0
    assert selectors.fanout_cursor(node=NODE) == 9
    assert selectors.queue_client_ids() == [queue]


def test_a_store_left_behind_by_pruning_drops_its_stale_copies_and_jumps():
    # Events 10..? were pruned past this store's cursor (5): it was down and
    # hosted nothing meanwhile, so whatever it holds is stale.
    FanoutCursor.objects.create(node=NODE, fanout_through=5)
    for durable_id in ("a", "b"):
        services.queue_ensure(
            client_id=uuid.uuid4(), durable_id=durable_id, conflate="server"
        )
    assert services.cursor_init(node=NODE, head=50, oldest=11) == 2
    assert selectors.fanout_cursor(node=NODE) == 50
    assert selectors.queue_client_ids() == []


def test_an_empty_log_at_the_cursor_is_no_gap():
    FanoutCursor.objects.create(node=NODE, fanout_through=80)
    queue = uuid.uuid4()
    services.queue_ensure(client_id=queue, durable_id="d1", conflate="server")
    assert services.cursor_init(node=NODE, head=80, oldest=None) == 0
    assert selectors.fanout_cursor(node=NODE) == 80
    assert selectors.queue_client_ids() == [queue]


def test_a_log_emptied_past_the_cursor_is_a_gap():
    # Events 4..80 were written and all pruned while this store was away:
    # its copies missed them, however empty the log is by now.
    FanoutCursor.objects.create(node=NODE, fanout_through=3)
    services.queue_ensure(client_id=uuid.uuid4(), durable_id="d1", conflate="server")
    assert services.cursor_init(node=NODE, head=80, oldest=None) == 1
    assert selectors.fanout_cursor(node=NODE) == 80
    assert selectors.queue_client_ids() == []


def test_a_store_that_hosts_no_queue_starts_at_the_log_head():
    # Like a new store: the events it missed concern no one here, and
    # reading them all would only delay its first useful fan-out.
    FanoutCursor.objects.create(node=NODE, fanout_through=3)
    assert services.cursor_init(node=NODE, head=80, oldest=1) == 0
    assert selectors.fanout_cursor(node=NODE) == 80


def test_the_flushed_cursor_is_the_cursor_and_zero_before_there_is_one():
    assert services.cursor_flushed(NODE) == 0
    assert not FanoutCursor.objects.filter(node=NODE).exists()  # not made here
    services.cursor_init(node=NODE, head=7, oldest=None)
    with transaction.atomic(using="node"):
        services.cursor_move(NODE, 12)
    assert services.cursor_flushed(NODE) == 12
    assert selectors.fanout_cursor(node=NODE) == 12


@pytest.mark.django_db(transaction=True, databases=["default", "node"])
def test_unflushed_commits_are_asked_for_on_postgresql_only():
    # transaction=True: the atomic block below is a transaction of its own,
    # not a savepoint in the test's, so SET LOCAL ends with it.
    connection = connections["node"]
    with transaction.atomic(using="node"):
        with CaptureQueriesContext(connection) as said:
            services.commit_unflushed(connection)
        if connection.vendor != "postgresql":
            assert len(said) == 0  # SQLite's WAL does not flush per commit anyway
            return
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            assert cursor.fetchone()[0] == "off"
    with connection.cursor() as cursor:  # SET LOCAL: this transaction only
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"
