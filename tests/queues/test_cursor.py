"""Where a node's fan-out cursor starts when its node starts."""

import uuid

import pytest

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


def test_an_empty_log_never_counts_as_a_gap():
    FanoutCursor.objects.create(node=NODE, fanout_through=3)
    assert services.cursor_init(node=NODE, head=80, oldest=None) == 0
    assert selectors.fanout_cursor(node=NODE) == 3
