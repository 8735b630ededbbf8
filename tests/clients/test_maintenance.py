"""The periodic tick's steps, each idempotent."""

import threading
from datetime import timedelta

import pytest
from django.db import DatabaseError, connections
from django.utils import timezone

from cache import services as cache_services
from cache.models import Event
from clients import fanout, maintenance, services
from clients.models import DurableClient, QueueSizeReport
from queues import selectors as queue_selectors
from queues import services as queue_services
from tests.helpers import connected_client, node_row

pytestmark = pytest.mark.django_db(databases=["default", "node"])


def test_queue_sizes_are_reported_and_follow_changes(user, region):
    first, second = connected_client(user, "a"), connected_client(user, "b")
    maintenance.report_queue_sizes("node-1")
    assert dict(QueueSizeReport.objects.values_list("client_id", "size")) == {
        first.id: 0,
        second.id: 0,
    }
    cache_services.entry_put(region="prices", key="k", value=1)
    fanout.fanout_node("node-1")
    maintenance.report_queue_sizes("node-1")
    assert QueueSizeReport.objects.get(client=first).size == 1
    DurableClient.objects.filter(pk=second.pk).delete()
    maintenance.drop_orphans()
    maintenance.report_queue_sizes("node-1")
    assert list(QueueSizeReport.objects.values_list("client_id", flat=True)) == [
        first.id
    ]


def test_a_changed_report_is_rewritten_and_an_unchanged_one_left(user, region):
    changing, idle = connected_client(user, "changing"), connected_client(user, "idle")
    maintenance.report_queue_sizes("node-1")
    long_ago = timezone.now() - timedelta(hours=1)
    QueueSizeReport.objects.update(reported_at=long_ago)
    cache_services.entry_put(region="prices", key="k", value=1)
    fanout.fanout_node("node-1")
    head = queue_selectors.queue_head(client_id=idle.id)
    queue_services.queue_ack(client_id=idle.id, up_to=head)
    maintenance.report_queue_sizes("node-1")
    reports = {
        r.client_id: (r.size, r.acked_through, r.reported_at > long_ago)
        for r in QueueSizeReport.objects.all()
    }
    assert reports[changing.id] == (1, 0, True)  # one more event queued
    acked = queue_selectors.queue_size_and_acked()[idle.id]
    assert acked[0] == 0
    assert acked[1] > 0
    assert reports[idle.id] == (*acked, True)  # acked since the last report
    QueueSizeReport.objects.update(reported_at=long_ago)
    maintenance.report_queue_sizes("node-1")  # nothing changed: nothing written
    assert set(QueueSizeReport.objects.values_list("reported_at", flat=True)) == {
        long_ago
    }


def test_queues_of_clients_hosted_elsewhere_are_dropped(user, region):
    client = connected_client(user, "moved")
    DurableClient.objects.filter(pk=client.pk).update(primary="node-2")
    assert maintenance.drop_orphans() == 1
    assert queue_selectors.queue_size(client_id=client.id) == -2


class _Meanwhile:
    """Run ``step`` once at a chosen point of an orphan sweep, as a
    ``hello`` on another thread of the node would.

    ``before_clients``: just before the sweep reads the clients' rows
    (it has read which queues this node holds). Otherwise: at the sweep's
    first statement on the node store after that read (it has judged).
    """

    def __init__(self, step, *, before_clients):
        self.step, self.before_clients = step, before_clients
        self.clients_read = False
        self.result = None

    def _run(self):
        self.result = False  # the step's own statements do not trigger it
        self.result = self.step()

    def on_default(self, execute, sql, params, many, context):
        if "clients_durableclient" in sql and self.result is None:
            if self.before_clients:
                self._run()
            else:
                self.clients_read = True
        return execute(sql, params, many, context)

    def on_node(self, execute, sql, params, many, context):
        if self.clients_read and self.result is None:
            self._run()
        return execute(sql, params, many, context)

    def sweep(self):
        with (
            connections["default"].execute_wrapper(self.on_default),
            connections["node"].execute_wrapper(self.on_node),
        ):
            maintenance.drop_orphans()
        assert self.result, "the step did not run"
        return self.result


def test_a_queue_created_while_orphans_are_swept_is_kept(user, region):
    connected_client(user, "before")  # the sweep only runs when queues exist
    meanwhile = _Meanwhile(lambda: connected_client(user, "late"), before_clients=True)
    late = meanwhile.sweep()
    assert queue_selectors.queue_size(client_id=late.id) == 0


def test_a_queue_started_afresh_while_orphans_are_swept_is_kept(user, region):
    """The sweep judged a stale queue (its client is hosted elsewhere); a
    hello meanwhile dropped it and started the client afresh here: the new
    queue is not the one judged."""
    client = connected_client(user, "afresh")
    DurableClient.objects.filter(pk=client.pk).update(primary="node-2")

    def start_afresh():
        queue_services.queue_drop(client_id=client.id)
        DurableClient.objects.filter(pk=client.pk).update(primary="node-1")
        queue_services.queue_ensure(
            client_id=client.id, durable_id="afresh", conflate="server"
        )
        return client

    _Meanwhile(start_afresh, before_clients=False).sweep()
    assert queue_selectors.queue_size(client_id=client.id) == 0


def test_tick_runs_every_step(user, region):
    node = cache_services.node_register(name="node-1", url="http://127.0.0.1:1")
    client = connected_client(user, "ticked")
    _, event = cache_services.entry_put(region="prices", key="k", value=1)
    maintenance.tick("node-1")
    assert queue_selectors.queue_size(client_id=client.id) == 1
    assert QueueSizeReport.objects.get(client=client).size == 1
    # The cursor is published once a tick (it bounds event-log pruning).
    node.refresh_from_db()
    assert node.fanout_through == event.seq


def test_prune_is_held_back_by_live_nodes_and_dead_hosts_only(user, region):
    for i in range(6):
        cache_services.entry_put(region="prices", key=f"k{i}", value=i)
    Event.objects.update(ts=timezone.now() - timedelta(hours=1))
    node_row("node-1", fanout_through=5)
    node_row("node-old", age_s=3600, fanout_through=1)
    node_row("node-host", age_s=3600, fanout_through=3)
    DurableClient.objects.create(
        durable_id="kept", owner=user, primary="node-1", secondaries=["node-host"]
    )
    # The dead node that still hosts a copy holds the log at 3; the retired
    # one (hosting nothing) does not hold it at 1.
    assert maintenance.prune_event_log() == 3
    assert list(Event.objects.values_list("seq", flat=True)) == [4, 5, 6]
    DurableClient.objects.filter(durable_id="kept").update(secondaries=[])
    assert maintenance.prune_event_log() == 2


def test_prune_stops_at_the_first_event_within_the_retention(user, region):
    for i in range(6):
        cache_services.entry_put(region="prices", key=f"k{i}", value=i)
    old = timezone.now() - timedelta(hours=1)
    Event.objects.filter(seq__lte=3).update(ts=old)
    node_row("node-1", fanout_through=6)
    assert maintenance.prune_event_log() == 3
    assert list(Event.objects.values_list("seq", flat=True)) == [4, 5, 6]
    assert maintenance.prune_event_log() == 0  # the oldest left is recent


def test_prune_goes_chunk_by_chunk_from_the_oldest(user, region, monkeypatch):
    monkeypatch.setattr(maintenance, "PRUNE_CHUNK", 2)
    monkeypatch.setattr(maintenance, "PRUNE_CHUNKS", 2)
    for i in range(7):
        cache_services.entry_put(region="prices", key=f"k{i}", value=i)
    Event.objects.update(ts=timezone.now() - timedelta(hours=1))
    node_row("node-1", fanout_through=6)  # the 7th is not fanned out yet
    assert maintenance.prune_event_log() == 4  # two chunks of two a tick
    assert list(Event.objects.values_list("seq", flat=True)) == [5, 6, 7]
    assert maintenance.prune_event_log() == 2  # held back at 6
    assert list(Event.objects.values_list("seq", flat=True)) == [7]
    assert maintenance.prune_event_log() == 0


def test_a_tick_that_may_not_judge_takes_no_node_for_dead(user):
    # Right after this node's own database outage every heartbeat looks
    # stale: such a tick must not disconnect clients or fail queues over.
    node_row("node-1", fanout_through=0)
    node_row("node-2", age_s=3600, fanout_through=0)
    client = DurableClient.objects.create(
        durable_id="on-2",
        owner=user,
        timeout=86400,  # node-2's last heartbeat is an hour old
        is_connected=True,
        node="node-2",
        primary="node-2",
        secondaries=["node-1"],
        redundancy=1,
    )
    queue_services.queue_ensure(
        client_id=client.id, durable_id="on-2", conflate="server"
    )
    maintenance.tick("node-1", judge=False)
    client.refresh_from_db()
    assert (client.is_connected, client.primary) == (True, "node-2")
    maintenance.tick("node-1", judge=True)
    client.refresh_from_db()
    assert (client.is_connected, client.primary) == (False, "node-1")


@pytest.mark.django_db(transaction=True, databases=["default", "node"])
def test_a_client_deleted_while_its_first_report_is_written_fails_nothing(
    user, region, monkeypatch
):
    # A close with keepalive false deletes a client while the tick reports
    # its queue for the first time: the delete waits for the report (the
    # client row is locked), then takes the report with it.
    client = connected_client(user, "leaving")
    real_bulk_create = QueueSizeReport.objects.bulk_create
    deleter: list[threading.Thread] = []

    def bulk_create_racing_a_delete(objs, **kwargs):
        def delete():
            services.client_close(
                client_id=client.id, socket_id="leaving", keepalive=False
            )
            connections.close_all()

        thread = threading.Thread(target=delete)
        thread.start()
        deleter.append(thread)
        thread.join(0.3)  # the delete waits for this transaction
        assert thread.is_alive()
        return real_bulk_create(objs, **kwargs)

    monkeypatch.setattr(
        QueueSizeReport.objects, "bulk_create", bulk_create_racing_a_delete
    )
    maintenance.report_queue_sizes("node-1")  # no IntegrityError
    deleter[0].join(10)
    assert not deleter[0].is_alive()
    assert not DurableClient.objects.filter(pk=client.pk).exists()
    assert not QueueSizeReport.objects.filter(client_id=client.pk).exists()


def test_the_tables_are_looked_at_for_vacuum_once_per_period(monkeypatch):
    looked: list[str] = []

    def node_store():
        looked.append("node store")
        return ["queues_queueentry"]

    def cluster(connection, models):
        looked.append("cluster")
        raise DatabaseError("must be owner of table cache_event")

    monkeypatch.setattr(maintenance.queue_services, "node_store_vacuum", node_store)
    monkeypatch.setattr(maintenance.sql, "vacuum_bloated", cluster)
    monkeypatch.setattr(maintenance, "_vacuum", {"checked": float("-inf")})
    # A vacuum refused is logged; the others still run.
    assert maintenance.vacuum_churned() == ["queues_queueentry"]
    assert looked == ["node store", "cluster"]
    assert maintenance.vacuum_churned() == []  # within VACUUM_CHECK_S
    assert looked == ["node store", "cluster"]
    maintenance._vacuum["checked"] -= maintenance.VACUUM_CHECK_S
    maintenance.vacuum_churned()
    assert looked == ["node store", "cluster"] * 2


def test_a_tick_inside_a_transaction_vacuums_nothing(monkeypatch):
    # The test's transaction stands for any caller's: a vacuum cannot run
    # in one, so the tick leaves it (the worker's ticks have none).
    monkeypatch.setattr(maintenance, "_vacuum", {"checked": float("-inf")})
    assert maintenance.vacuum_churned() == []


# Each step of the tick, by where the tick calls it from.
_EVERY_TICK = [
    (fanout, "fanout_node"),
    (maintenance, "report_fanout_cursor"),
    (services, "clients_of_dead_nodes_disconnect"),
    (maintenance.replication, "placement_repair"),
    (services, "clients_expire"),
    (maintenance, "report_queue_sizes"),
]
_CHORE_STEPS = [
    (maintenance.replication, "copies_resume"),
    (services, "cqs_forget_pending"),
    (maintenance.replication, "apply_reported_acks"),
    (maintenance, "drop_orphans"),
    (maintenance.queue_services, "queued_events_prune"),
    (maintenance, "prune_event_log"),
    (maintenance.cache_services, "tombstones_prune"),
    (maintenance.samples, "sample"),
    (maintenance.history, "history_prune"),
    (maintenance, "vacuum_churned"),
]


@pytest.fixture
def steps(monkeypatch):
    """Every step of the tick replaced by a counter of its calls."""
    calls: dict[str, int] = {}

    def counting(name):
        def step(*args, **kwargs):
            calls[name] = calls.get(name, 0) + 1

        return step

    for owner, name in _EVERY_TICK + _CHORE_STEPS:
        monkeypatch.setattr(owner, name, counting(name))
    return calls


def test_each_turn_runs_one_group_of_chores_and_a_round_runs_each_once(steps):
    turns = len(maintenance.CHORES)
    assert turns > 1
    for turn in range(turns):
        before = dict(steps)
        maintenance.tick("node-1", judge=True, turn=turn)
        ran = {name for name in steps if steps[name] != before.get(name, 0)}
        chores_ran = ran & {name for _, name in _CHORE_STEPS}
        assert chores_ran, f"turn {turn} ran no chore"
        assert len(chores_ran) < len(_CHORE_STEPS)
    assert {name: steps.get(name) for _, name in _EVERY_TICK} == {
        name: turns for _, name in _EVERY_TICK
    }
    assert {name: steps.get(name) for _, name in _CHORE_STEPS} == {
        name: 1 for _, name in _CHORE_STEPS
    }


def test_a_tick_without_a_turn_runs_every_chore(steps):
    maintenance.tick("node-1", judge=False)
    assert {name: steps.get(name) for _, name in _CHORE_STEPS} == {
        name: 1 for _, name in _CHORE_STEPS
    }
    # Not judging: nobody is taken for dead.
    assert "clients_of_dead_nodes_disconnect" not in steps
    assert "placement_repair" not in steps
