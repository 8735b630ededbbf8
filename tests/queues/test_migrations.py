"""Node-store migrations that change rows, run on a store holding some."""

import uuid

import pytest
from django.db import connections
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from queues.models import QueueEntry

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "node"])

BEFORE = [("queues", "0002_queue_copies")]
AFTER = [("queues", "0003_entry_conflates")]


def _migrate(targets):
    executor = MigrationExecutor(connections["node"])
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor.loader.project_state(targets).apps


@pytest.fixture
def store_at_0002():
    """The node store at 0002; migrated to the latest again afterwards."""
    apps = _migrate(BEFORE)
    yield apps
    _migrate(MigrationExecutor(connections["node"]).loader.graph.leaf_nodes("queues"))


def test_0003_counts_the_queued_updates_of_conflating_modes_as_conflating(
    store_at_0002,
):
    state_model = store_at_0002.get_model("queues", "QueueState")
    entry_model = store_at_0002.get_model("queues", "QueueEntry")
    queues = {}
    for mode in ("true", "false", "server"):
        state = state_model.objects.create(client_id=uuid.uuid4(), conflate=mode)
        queues[mode] = state.client_id
        for seq, op in enumerate(("create", "update", "destroy"), start=1):
            entry_model.objects.create(
                queue=state,
                seq=seq,
                event_id=uuid.uuid4().hex,
                region="r",
                key="k",
                op=op,
                value=None,
                version=seq,
                ts=timezone.now(),
            )
    _migrate(AFTER)

    def flags(mode):
        return list(
            QueueEntry.objects.filter(queue_id=queues[mode])
            .order_by("seq")
            .values_list("op", "conflates")
        )

    # An update may conflate unless its queue never does; in mode "server"
    # the region decides, which the store does not hold: counted as may.
    assert flags("true") == [("create", False), ("update", True), ("destroy", False)]
    assert flags("server") == flags("true")
    assert flags("false") == [
        ("create", False),
        ("update", False),
        ("destroy", False),
    ]


def _indexes_on_queue_alone():
    connection = connections["node"]
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(
            cursor, QueueEntry._meta.db_table
        )
    return [
        name
        for name, info in constraints.items()
        if info["index"] and not info["unique"] and info["columns"] == ["queue_id"]
    ]


def test_0004_drops_the_index_on_queue_alone_and_its_reverse_makes_it_again():
    # The latest store: only the unique (queue, seq) index leads with queue.
    assert _indexes_on_queue_alone() == []
    try:
        _migrate([("queues", "0003_entry_conflates")])
        assert len(_indexes_on_queue_alone()) == 1
    finally:  # back to the latest store, whatever follows 0004
        _migrate(
            MigrationExecutor(connections["node"]).loader.graph.leaf_nodes("queues")
        )
    assert _indexes_on_queue_alone() == []
