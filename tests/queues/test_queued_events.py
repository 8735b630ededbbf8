"""Each event once per node: queue rows name it, the tick prunes it once
no queue does, and a store migrated from rows that carried it keeps it."""

import json
import uuid
from datetime import timedelta

import pytest
from django.db import connections, transaction
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from cache.models import Event
from cache.selectors import LoggedEvent
from queues import selectors as queue_selectors
from queues import services as queue_services
from queues.models import FanoutCursor, QueuedEvent, QueueEntry, QueueState
from queues.services import events as events_module
from queues.services.events import events_store
from tests.helpers import queued_rows

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "node"])

NODE = "node-1"


def event(seq, value=None):
    return Event(
        seq=seq,
        event_id=f"ev{seq:06d}",
        region="prices",
        key=f"k{seq}",
        op="create",
        value={"n": seq} if value is None else value,
        version=seq,
        conflate=False,
        ts=timezone.now() - timedelta(seconds=1000 - seq),
    )


def queues(n):
    ids = [uuid.uuid4() for _ in range(n)]
    for pk in ids:
        queue_services.queue_ensure(client_id=pk, durable_id=None, conflate="false")
    return ids


def append(appends):
    with transaction.atomic(using="node"):
        FanoutCursor.objects.get_or_create(node=NODE)
        queue_services.queue_append_many(
            {pk: [LoggedEvent.of(event(s)) for s in got] for pk, got in appends.items()}
        )


def test_an_event_for_many_queues_is_stored_once_and_each_reads_it():
    ids = queues(3)
    append({pk: [1, 2] for pk in ids})
    assert sorted(QueuedEvent.objects.values_list("seq", flat=True)) == [1, 2]
    assert QueueEntry.objects.count() == 6
    for pk in ids:
        got = queue_selectors.queue_events_after(client_id=pk, after=0, limit=10)
        assert [(e["seq"], e["id"], e["value_json"]) for e in got] == [
            (1, "ev000001", '{"n": 1}'),
            (2, "ev000002", '{"n": 2}'),
        ]


def test_an_event_is_pruned_only_once_no_queue_names_it():
    first, second = queues(2)
    append({first: [1, 2, 3], second: [2]})
    queue_services.queue_ack(client_id=first, up_to=2)
    # Event 1 no queue names now; 2 the second queue still does.
    assert queue_services.queued_events_prune(NODE, force=True) == 1
    assert sorted(QueuedEvent.objects.values_list("seq", flat=True)) == [2, 3]
    queue_services.queue_ack(client_id=second, up_to=2)
    queue_services.queue_drop(client_id=first)
    assert queue_services.queued_events_prune(NODE, force=True) == 2
    assert not QueuedEvent.objects.exists()


def test_a_pass_stores_its_events_even_if_one_is_here_already():
    (pk,) = queues(1)
    # Not a state the fan-out leaves (its events are after its cursor, and
    # a copy's pages stop at it), but one it must not be stuck on.
    connection = connections["node"]
    held = event(2, value={"n": "kept"})
    field = QueuedEvent._meta.get_field("ts")
    with transaction.atomic(using="node"):
        events_store(
            connection,
            [
                [2, held.event_id, "prices", "k2", "create", '{"n": "kept"}', 2,
                 field.get_db_prep_save(held.ts, connection)],
            ],
        )  # fmt: skip
    append({pk: [1, 2, 3]})
    assert [(r.seq, r.value) for r in queued_rows(pk)] == [
        (1, {"n": 1}),
        (2, {"n": "kept"}),
        (3, {"n": 3}),
    ]


def test_a_copy_page_stores_the_events_it_names_that_are_not_here():
    (other,) = queues(1)
    append({other: [5]})
    FanoutCursor.objects.update_or_create(node=NODE, defaults={"fanout_through": 9})
    copy = queue_services.queue_adopt(
        client_id=uuid.uuid4(), durable_id="c", conflate="false", node=NODE, source="x"
    )
    entries = [
        {
            "seq": s,
            "event_id": f"ev{s:06d}",
            "region": "prices",
            "key": f"k{s}",
            "op": "create",
            "value": {"n": s},
            "version": s,
            "ts": timezone.now().isoformat(),
            "conflates": False,
        }
        for s in (5, 7)
    ]
    page = {
        "durable_id": "c",
        "conflate": "false",
        "acked_through": 0,
        "entries": entries,
        "next_after": 9,
        "done": True,
    }
    assert queue_services.queue_copy_in(client_id=copy.pk, page=page) is True
    assert sorted(QueuedEvent.objects.values_list("seq", flat=True)) == [5, 7]
    assert [(r.seq, r.value) for r in queued_rows(copy.pk)] == [
        (5, {"n": 5}),
        (7, {"n": 7}),
    ]
    assert QueueState.objects.get(pk=copy.pk).size == 2


def _migrate(targets):
    executor = MigrationExecutor(connections["node"])
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor.loader.project_state(targets).apps


def test_0006_moves_each_queued_event_into_one_row_and_keeps_the_queue_rows():
    apps = _migrate([("queues", "0005_entry_cq")])
    try:
        state_model = apps.get_model("queues", "QueueState")
        entry_model = apps.get_model("queues", "QueueEntry")
        when = timezone.now()
        for n in range(2):
            state = state_model.objects.create(client_id=uuid.uuid4())
            for seq in (1, 2):
                entry_model.objects.create(
                    queue=state,
                    seq=seq,
                    event_id=f"ev{seq}",
                    region="r",
                    key=f"k{seq}",
                    op="update",
                    value={"n": seq},
                    version=seq,
                    ts=when,
                    conflates=n == 0,
                    cq=None if n == 0 else [{"name": "c", "cq_op": "update"}],
                )
        _migrate([("queues", "0006_queued_events")])
        assert list(
            QueuedEvent.objects.order_by("seq").values_list(
                "seq", "event_id", "key", "op", "value", "version"
            )
        ) == [
            (1, "ev1", "k1", "update", {"n": 1}, 1),
            (2, "ev2", "k2", "update", {"n": 2}, 2),
        ]
        assert QueuedEvent.objects.get(seq=1).ts == when
        assert sorted(QueueEntry.objects.values_list("seq", "conflates")) == [
            (1, False), (1, True), (2, False), (2, True),
        ]  # fmt: skip
    finally:
        QueueEntry.objects.all().delete()
        QueuedEvent.objects.all().delete()
        QueueState.objects.all().delete()
        _migrate(
            MigrationExecutor(connections["node"]).loader.graph.leaf_nodes("queues")
        )


@pytest.mark.parametrize(
    ("count", "new"),
    [
        (1, False),
        (events_module.VALUES_MAX_EVENTS, False),  # rows of one VALUES list
        (events_module.VALUES_MAX_EVENTS + 1, False),  # one array per column
        (events_module.COPY_MIN_EVENTS + 1, True),  # a COPY
    ],
)
def test_events_are_stored_alike_whichever_statement_carries_them(count, new):
    """Values that need quoting or escaping, JSON null and SQL NULL come
    back as they went in, and storing the same events again changes
    nothing, by rows, arrays or COPY alike."""
    connection = connections["node"]
    field = QueuedEvent._meta.get_field("ts")
    ts = field.get_db_prep_save(timezone.now(), connection)
    values = ['{"s": "it\'s \\\\ \\"q\\" é ✓"}', "null", None, '{"n": [1, 2]}']
    rows = [
        [s, f"ev{s:06d}", "prices", f"k'{s}", "update", values[s % len(values)], s, ts]
        for s in range(1, count + 1)
    ]
    with transaction.atomic(using="node"):
        events_store(connection, rows, new=new)
    with transaction.atomic(using="node"):
        events_store(connection, rows)  # all here already: ignored
    stored = QueuedEvent.objects.order_by("seq")
    assert stored.count() == count
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT seq, event_id, key, value FROM queues_queuedevent ORDER BY seq"
        )
        got = cursor.fetchall()
    for seq, event_id, key, value in got:
        assert (event_id, key) == (f"ev{seq:06d}", f"k'{seq}")
        sent = values[seq % len(values)]
        if sent is None:
            assert value is None, seq
        else:
            read = value if not isinstance(value, str) else json.loads(value)
            assert read == json.loads(sent), seq
