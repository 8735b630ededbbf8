"""Placement of redundant queues in the cluster database: membership,
failover, top-up, repair, copies, reported acks, and hello across nodes.

Other nodes are ``Node`` rows; their workers are stood in for by recording
the task senders of ``clients.dispatch``.
"""

import uuid
from collections import Counter
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from cache.models import Event, Node
from cache.selectors import LoggedEvent
from clients import placement, replication, selectors, services
from clients.exceptions import ClientConnectedError, NodeDrainingError
from clients.maintenance import report_queue_sizes
from clients.models import ClientHistory, DurableClient, QueueSizeReport
from clients.placement import DOWN, DRAINING, UP, Membership
from clients.replication import handover
from queues import selectors as queue_selectors
from queues import services as queue_services
from queues.models import FanoutCursor, QueueState
from tests.clients.conftest import recorder
from tests.helpers import hello, node_row

pytestmark = pytest.mark.django_db(databases=["default", "node"])

HERE = "node-1"


def nodes(*, up=(), draining=(), down=()):
    """Save Node rows; return the membership they make."""
    for name in up:
        node_row(name, url=f"http://{name}.test:8000")
    for name in draining:
        node_row(name, draining=True)
    for name in down:
        node_row(name, down=True)
    return Membership.read()


def members(*, up=(), draining=(), down=()):
    """A membership from unsaved rows (no database)."""
    rows = {n: node_row(n, save=False) for n in up}
    rows.update({n: node_row(n, draining=True, save=False) for n in draining})
    rows.update({n: node_row(n, down=True, save=False) for n in down})
    return Membership(rows=rows)


def durable(primary, secondaries=(), syncing=(), redundancy=0):
    return DurableClient(
        durable_id="d1",
        primary=primary,
        secondaries=list(secondaries),
        syncing=list(syncing),
        redundancy=redundancy,
    )


def stored(user, durable_id="d1", **fields):
    return DurableClient.objects.create(durable_id=durable_id, owner=user, **fields)


def hosts_of(client):
    client.refresh_from_db()
    return client.primary, client.secondaries, client.syncing


def fill_queue(client_id, seqs, *, durable_id="d1"):
    queue_services.queue_ensure(
        client_id=client_id, durable_id=durable_id, conflate="false"
    )
    events = [
        Event(
            seq=s,
            event_id=f"ev{s}",
            region="prices",
            key=f"k{s}",
            op="create",
            value=s,
            version=1,
            ts=timezone.now(),
        )
        for s in seqs
    ]
    with transaction.atomic(using="node"):
        queue_services.queue_append_many(
            {client_id: [LoggedEvent.of(e) for e in events]}
        )


@pytest.fixture
def page_requests(monkeypatch):
    return recorder(monkeypatch, "copy_out_on")


@pytest.fixture
def probed(monkeypatch):
    """Control the peer probe of hello; records the URLs probed."""
    state = SimpleNamespace(refuses=True, urls=[])

    def probe(url):
        state.urls.append(url)
        return state.refuses

    monkeypatch.setattr("clients.services.hello.refuses_connections", probe)
    return state


# Membership ---------------------------------------------------------------


def test_state_is_up_draining_or_down_by_heartbeat_and_flag():
    m = members(up=["a"], draining=["b"], down=["c"])
    m.rows["d"] = node_row("d", down=True, draining=True, save=False)
    assert [m.state(n) for n in "abcd"] == [UP, DRAINING, DOWN, DOWN]
    # No row: down, unless it is this node before its first heartbeat.
    assert m.state("zz") == DOWN
    m.assume_up.add("zz")
    assert m.state("zz") == UP


def test_state_horizon_is_the_node_timeout(settings):
    settings.DURABLECACHE_NODE_TIMEOUT_S = 30
    now = timezone.now()
    fresh, stale = node_row("fresh", save=False), node_row("stale", save=False)
    fresh.last_heartbeat = now - timedelta(seconds=20)
    stale.last_heartbeat = now - timedelta(seconds=40)
    m = Membership(rows={"fresh": fresh, "stale": stale})
    assert (m.state("fresh"), m.state("stale")) == (UP, DOWN)
    settings.DURABLECACHE_NODE_TIMEOUT_S = 60
    assert m.state("stale") == UP


def test_suspects_are_down_and_up_lists_only_up_nodes():
    m = members(up=["n3", "n1"], draining=["n2"], down=["n4", "n5"])
    m.assume_up.update({"n0", "n4"})
    # Assumed up: without a row, and whatever its heartbeat (the node
    # running this code is alive, however late its own heartbeat).
    assert m.up() == ["n0", "n1", "n3", "n4"]
    m.suspects.update({"n1", "n0"})
    assert m.state("n1") == DOWN
    assert m.state("n0") == DOWN
    assert m.state("n5") == DOWN
    assert m.up() == ["n3", "n4"]


def test_the_node_reading_here_is_up_whatever_its_heartbeat():
    nodes(up=["node-2"], draining=[], down=[HERE])
    assert placement.Membership.read().state(HERE) == DOWN
    assert placement.Membership.read_here().state(HERE) == UP
    Node.objects.filter(name=HERE).update(is_draining=True)
    assert placement.Membership.read_here().state(HERE) == DRAINING


def test_read_takes_every_node_row():
    nodes(up=["node-2"], draining=["node-3"], down=["node-4"])
    m = Membership.read()
    assert set(m.rows) == {"node-2", "node-3", "node-4"}
    assert (m.state("node-2"), m.state("node-3"), m.state("node-4")) == (
        UP,
        DRAINING,
        DOWN,
    )
    assert m.state(HERE) == DOWN  # no row and not assumed


# fail_over ----------------------------------------------------------------


def test_fail_over_with_primary_up_drops_secondaries_not_up():
    client = durable(
        "p", ["s-down", "s-up", "s-drain", "s-sync"], syncing=["s-down", "s-sync"]
    )
    m = members(up=["p", "s-up", "s-sync"], draining=["s-drain"], down=["s-down"])
    assert placement.fail_over(client, m) is True
    assert client.primary == "p"
    assert client.secondaries == ["s-up", "s-sync"]
    assert client.syncing == ["s-sync"]


def test_fail_over_promotes_the_first_complete_up_secondary():
    client = durable(
        "p", ["s-sync", "s-down", "s-a", "s-b"], syncing=["s-sync"], redundancy=3
    )
    m = members(up=["s-sync", "s-a", "s-b"], down=["p", "s-down"])
    assert placement.fail_over(client, m) is True
    assert client.primary == "s-a"
    assert client.secondaries == ["s-sync", "s-b"]
    assert client.syncing == ["s-sync"]


def test_fail_over_promotes_away_from_a_draining_primary():
    client = durable("p", ["s"])
    assert placement.fail_over(client, members(up=["s"], draining=["p"])) is True
    assert (client.primary, client.secondaries) == ("s", [])


def test_fail_over_never_promotes_a_copy_being_filled():
    client = durable("p", ["s-sync", "s-down"], syncing=["s-sync"])
    m = members(up=["s-sync"], down=["p", "s-down"])
    assert placement.fail_over(client, m) is False
    assert client.primary == "p"
    assert client.secondaries == ["s-sync", "s-down"]
    assert client.syncing == ["s-sync"]


def test_fail_over_without_any_secondary_up_changes_nothing():
    client = durable("p", ["s"])
    assert placement.fail_over(client, members(down=["p", "s"])) is False
    assert (client.primary, client.secondaries, client.syncing) == ("p", ["s"], [])


# top_up -------------------------------------------------------------------


def test_top_up_picks_the_least_loaded_up_nodes_and_lists_them_syncing():
    client = durable("n1", redundancy=2)
    m = members(up=["n1", "n2", "n3", "n4"], down=["n0"])
    load = Counter({"n2": 5, "n3": 1, "n4": 1, "n0": 0})
    assert placement.top_up(client, m, lambda: load) == ["n3", "n4"]
    assert client.secondaries == ["n3", "n4"]
    assert client.syncing == ["n3", "n4"]
    assert load == Counter({"n2": 5, "n3": 2, "n4": 2, "n0": 0})


def test_top_up_asks_for_the_load_only_when_it_adds_a_secondary():
    def no_load():
        raise AssertionError("the load was asked for")

    satisfied = durable("n1", ["n2"], redundancy=1)
    assert placement.top_up(satisfied, members(up=["n1", "n2", "n3"]), no_load) == []
    assert placement.top_up(durable("n1"), members(up=["n1", "n2"]), no_load) == []


def test_top_up_keeps_existing_secondaries_and_adds_only_the_shortfall():
    client = durable("n1", ["n2"], redundancy=2)
    m = members(up=["n1", "n2", "n3", "n4"])
    assert placement.top_up(client, m, lambda: Counter({"n3": 2})) == ["n4"]
    assert client.secondaries == ["n2", "n4"]
    assert client.syncing == ["n4"]


def test_top_up_redundancy_minus_one_means_every_other_up_node():
    client = durable("n1", redundancy=-1)
    m = members(up=["n1", "n2", "n3"], draining=["n4"], down=["n5"])
    assert placement.top_up(client, m, Counter) == ["n2", "n3"]
    assert client.secondaries == ["n2", "n3"]


def test_top_up_adds_no_more_than_the_free_up_nodes():
    client = durable("n1", redundancy=3)
    m = members(up=["n1", "n2"])
    assert placement.top_up(client, m, Counter) == ["n2"]
    assert client.secondaries == ["n2"]


def test_top_up_trims_extra_secondaries_copies_being_filled_first():
    client = durable("n1", ["n2", "n3", "n4"], syncing=["n3"], redundancy=1)
    m = members(up=["n1", "n2", "n3", "n4"])
    assert placement.top_up(client, m, Counter) == []
    # n3 (still filling) goes first, then the last complete one.
    assert client.secondaries == ["n2"]
    assert client.syncing == []


def test_top_up_at_least_overrides_a_lower_redundancy():
    client = durable("n1", redundancy=0)
    m = members(up=["n1", "n2", "n3"])
    assert placement.top_up(client, m, lambda: Counter({"n2": 1}), at_least=1) == ["n3"]
    assert (client.secondaries, client.syncing) == (["n3"], ["n3"])


def test_top_up_gives_a_non_durable_client_no_secondary():
    client = durable("n1", redundancy=2)
    client.durable_id = None
    assert placement.top_up(client, members(up=["n1", "n2"]), Counter) == []
    assert client.secondaries == []


# fix_placement ------------------------------------------------------------


def test_fix_placement_saves_nothing_when_nothing_changes(
    user, adopted, django_capture_on_commit_callbacks
):
    m = nodes(up=[HERE, "node-2"])
    client = stored(user, primary=HERE, secondaries=["node-2"], redundancy=1)
    with (
        CaptureQueriesContext(connection) as queries,
        django_capture_on_commit_callbacks(execute=True) as callbacks,
    ):
        assert replication.fix_placement(client.pk, m, Counter()) is True
    updates = [q["sql"] for q in queries if q["sql"].startswith("UPDATE")]
    assert updates == []
    assert callbacks == []
    assert adopted == []


def test_fix_placement_promotes_tops_up_and_copies_from_the_new_primary(
    user, adopted, django_capture_on_commit_callbacks
):
    m = nodes(up=[HERE, "node-3"], down=["node-2"])
    client = stored(user, primary="node-2", secondaries=["node-3"], redundancy=1)
    with django_capture_on_commit_callbacks(execute=True):
        assert replication.fix_placement(client.pk, m, Counter()) is True
        assert adopted == []  # not before commit
    assert hosts_of(client) == ("node-3", [HERE], [HERE])
    assert adopted == [(HERE, client.pk, "node-3")]
    (failover,) = ClientHistory.objects.filter(durable_id="d1", kind="failover")
    assert failover.detail == "primary node-2 -> node-3"


def test_fix_placement_without_a_complete_copy_up_keeps_the_row(
    user, adopted, django_capture_on_commit_callbacks
):
    m = nodes(up=[HERE, "node-3"], down=["node-2"])
    client = stored(
        user,
        primary="node-2",
        secondaries=["node-3"],
        syncing=["node-3"],
        redundancy=2,
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert replication.fix_placement(client.pk, m, Counter()) is False
    assert hosts_of(client) == ("node-2", ["node-3"], ["node-3"])
    assert adopted == []


def test_fix_placement_gives_a_draining_primary_one_copy_to_hand_over_to(
    user, adopted, django_capture_on_commit_callbacks
):
    m = nodes(up=["node-2", "node-3"], draining=[HERE])
    client = stored(user, primary=HERE, redundancy=0)
    load = Counter({"node-2": 3})
    with django_capture_on_commit_callbacks(execute=True):
        has_primary = replication.fix_placement(client.pk, m, load)
    assert has_primary is False
    assert hosts_of(client) == (HERE, ["node-3"], ["node-3"])
    # The copy is filled from the draining primary, which still serves it.
    assert adopted == [("node-3", client.pk, HERE)]


def test_another_nodes_repair_keeps_the_copy_a_draining_primary_hands_to(
    user, adopted, django_capture_on_commit_callbacks
):
    # Any node's tick runs placement_repair while a node drains: it must not
    # trim the one copy the handover needs (redundancy 0 or not).
    nodes(up=["node-2", "node-3"], draining=[HERE])
    client = stored(user, primary=HERE, redundancy=0)
    with django_capture_on_commit_callbacks(execute=True):
        replication.fix_placement(client.pk, placement.Membership.read(), Counter())
    placed = hosts_of(client)
    assert placed[1] == placed[2]
    assert len(placed[1]) == 1
    with django_capture_on_commit_callbacks(execute=True):
        replication.placement_repair()
    assert hosts_of(client) == placed


def test_fix_placement_ignores_missing_and_non_durable_clients(user):
    m = nodes(up=[HERE, "node-2"])
    other = DurableClient.objects.create(owner=user, primary=HERE, redundancy=1)
    assert replication.fix_placement(uuid.uuid4(), m, Counter()) is False
    assert replication.fix_placement(other.pk, m, Counter()) is False
    assert hosts_of(other) == (HERE, [], [])


# placement_repair ---------------------------------------------------------


def test_placement_repair_fails_over_and_spreads_new_copies(
    user, adopted, django_capture_on_commit_callbacks
):
    nodes(up=[HERE, "node-2", "node-4"], down=["node-3"])
    a = stored(user, "a", primary=HERE, redundancy=1)
    b = stored(user, "b", primary=HERE, redundancy=1)
    c = stored(user, "c", primary=HERE, redundancy=0)
    d = stored(user, "d", primary="node-3", secondaries=["node-2"])
    e = stored(user, "e", primary="node-2", secondaries=["node-3", "node-4"])
    lost = stored(
        user, "f", primary="node-3", secondaries=["node-4"], syncing=["node-4"]
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert replication.placement_repair() == 5
    assert hosts_of(a) == (HERE, ["node-2"], ["node-2"])
    assert hosts_of(b) == (HERE, ["node-4"], ["node-4"])
    assert hosts_of(c) == (HERE, [], [])
    assert hosts_of(d) == ("node-2", [], [])
    assert hosts_of(e) == ("node-2", [], [])  # redundancy 0: no new copy
    assert hosts_of(lost) == ("node-3", ["node-4"], ["node-4"])
    assert adopted == [("node-2", a.pk, HERE), ("node-4", b.pk, HERE)]
    # Idempotent: only the client with no host up is looked at again.
    with django_capture_on_commit_callbacks(execute=True):
        assert replication.placement_repair() == 1
    assert len(adopted) == 2


def test_placement_repair_uses_reported_load(
    user, adopted, django_capture_on_commit_callbacks
):
    nodes(up=[HERE, "node-2", "node-3"])
    busy = [stored(user, f"busy{i}", primary="node-2") for i in range(2)]
    for client in busy:
        QueueSizeReport.objects.create(client=client, node="node-2")
    client = stored(user, "new", primary=HERE, redundancy=1)
    with django_capture_on_commit_callbacks(execute=True):
        assert replication.placement_repair() == 1
    assert hosts_of(client) == (HERE, ["node-3"], ["node-3"])
    assert selectors.hosted_load() == Counter({"node-2": 2})


def test_placement_repair_takes_the_node_running_it_for_up(user):
    # Its own heartbeat ran late (a busy cluster database, a paused VM):
    # it is alive all the same, and its complete copy is promoted.
    nodes(down=[HERE, "node-2"])
    client = stored(user, primary="node-2", secondaries=[HERE])
    assert replication.placement_repair() == 1
    assert hosts_of(client)[0] == HERE


# copies -------------------------------------------------------------------


def test_copy_finished_unlists_only_that_node_from_syncing(user):
    client = stored(
        user,
        primary=HERE,
        secondaries=["node-2", "node-3"],
        syncing=["node-2", "node-3"],
    )
    replication.copy_finished(client_id=client.pk, node="node-2")
    assert hosts_of(client) == (HERE, ["node-2", "node-3"], ["node-3"])
    replication.copy_finished(client_id=client.pk, node="node-9")
    replication.copy_finished(client_id=uuid.uuid4(), node="node-3")
    assert hosts_of(client) == (HERE, ["node-2", "node-3"], ["node-3"])


def test_copy_source_is_the_primary_while_it_serves_else_a_complete_secondary():
    client = durable("p", ["s-sync", "s-down", "s-ok", "target"], syncing=["s-sync"])
    up = ["s-sync", "s-ok", "target"]
    assert placement.copy_source(client, members(up=["p", *up]), "target") == "p"
    m = members(up=up, draining=["p"], down=["s-down"])
    assert placement.copy_source(client, m, "target") == "p"
    m = members(up=up, down=["p", "s-down"])
    assert placement.copy_source(client, m, "target") == "s-ok"
    # Never the target itself, nor a copy still being filled.
    assert placement.copy_source(client, m, "s-ok") == "target"
    lone = durable("p", ["s-sync", "target"], syncing=["s-sync"])
    assert placement.copy_source(lone, m, "target") is None


def test_adopt_creates_the_copy_and_asks_the_source_for_the_first_page(
    user, page_requests
):
    FanoutCursor.objects.create(node=HERE, fanout_through=17)
    client = stored(
        user, primary="node-2", secondaries=[HERE], syncing=[HERE], conflate="true"
    )
    replication.adopt(client_id=client.pk, node=HERE, source="node-2")
    state = QueueState.objects.get(pk=client.pk)
    assert (state.is_synced, state.copy_upto, state.durable_id) == (False, 17, "d1")
    assert state.conflate == "true"
    assert page_requests == [("node-2", client.pk, HERE, 0, 17)]


def test_adopt_of_a_complete_copy_reports_it_finished(user, page_requests):
    client = stored(user, primary="node-2", secondaries=[HERE], syncing=[HERE])
    fill_queue(client.pk, [1])
    replication.adopt(client_id=client.pk, node=HERE, source="node-2")
    assert hosts_of(client) == ("node-2", [HERE], [])
    assert page_requests == []


def test_adopt_on_a_node_no_longer_listed_does_nothing(user, page_requests):
    client = stored(user, primary="node-2", secondaries=["node-3"])
    replication.adopt(client_id=client.pk, node=HERE, source="node-2")
    replication.adopt(client_id=uuid.uuid4(), node=HERE, source="node-2")
    assert not QueueState.objects.exists()
    assert page_requests == []


def test_copy_out_pages_by_the_copy_page_setting(user, settings):
    settings.DURABLECACHE_COPY_PAGE = 2
    FanoutCursor.objects.create(node=HERE, fanout_through=50)
    client = stored(user, primary=HERE)
    fill_queue(client.pk, [5, 6, 7])
    page = replication.copy_out(
        client_id=client.pk, node=HERE, target="node-2", after=0, upto=40
    )
    assert [e["seq"] for e in page["entries"]] == [5, 6]
    assert (page["next_after"], page["done"], page["upto"]) == (6, False, 40)
    assert (
        replication.copy_out(
            client_id=uuid.uuid4(), node=HERE, target="node-2", after=0, upto=40
        )
        is None
    )


def test_copy_in_asks_for_the_next_page_then_reports_the_copy_complete(
    user, page_requests
):
    FanoutCursor.objects.create(node=HERE, fanout_through=9)
    client = stored(user, primary="node-2", secondaries=[HERE], syncing=[HERE])
    replication.adopt(client_id=client.pk, node=HERE, source="node-2")
    ts = timezone.now().isoformat()

    def entry(seq):
        return {
            "seq": seq,
            "event_id": f"ev{seq}",
            "region": "prices",
            "key": "k",
            "op": "update",
            "value": seq,
            "version": seq,
            "ts": ts,
        }

    first = {
        "durable_id": "d1",
        "conflate": "server",
        "acked_through": 0,
        "entries": [entry(3), entry(4)],
        "next_after": 4,
        "done": False,
        "upto": 9,
    }
    replication.copy_in(client_id=client.pk, node=HERE, source="node-2", page=first)
    assert page_requests[-1] == ("node-2", client.pk, HERE, 4, 9)
    assert hosts_of(client)[2] == [HERE]
    last = {**first, "entries": [entry(8)], "next_after": 9, "done": True}
    replication.copy_in(client_id=client.pk, node=HERE, source="node-2", page=last)
    assert hosts_of(client) == ("node-2", [HERE], [])
    assert len(page_requests) == 2
    assert queue_selectors.queue_size(client_id=client.pk) == 3


# acks ---------------------------------------------------------------------


def test_secondary_applies_the_acks_its_primary_reported(user):
    mine = stored(user, "mine", primary="node-2", secondaries=[HERE, "node-3"])
    led = stored(user, "led", primary=HERE, secondaries=["node-2"])
    behind = stored(user, "behind", primary="node-2", secondaries=[HERE])
    fill_queue(mine.pk, [1, 2, 3, 4, 5, 6], durable_id="mine")
    fill_queue(led.pk, [1, 2, 3], durable_id="led")
    fill_queue(behind.pk, [1, 2, 3], durable_id="behind")
    queue_services.queue_ack(client_id=behind.pk, up_to=2)
    QueueSizeReport.objects.create(client=mine, node="node-2", acked_through=4)
    # Another secondary's report is not the primary's word.
    QueueSizeReport.objects.create(client=mine, node="node-3", acked_through=6)
    # Where this node is primary, its own acks are the truth.
    QueueSizeReport.objects.create(client=led, node="node-2", acked_through=3)
    # A report behind what this copy has acked changes nothing.
    QueueSizeReport.objects.create(client=behind, node="node-2", acked_through=1)
    assert replication.apply_reported_acks(HERE) == 4
    acked = queue_selectors.queue_acked_through()
    assert acked == {mine.pk: 4, led.pk: 0, behind.pk: 2}
    assert queue_selectors.queue_size(client_id=mine.pk) == 2
    assert queue_selectors.queue_size(client_id=led.pk) == 3
    assert replication.apply_reported_acks(HERE) == 0


def test_apply_reported_acks_without_queues_here_is_zero(user):
    client = stored(user, primary="node-2", secondaries=[HERE])
    QueueSizeReport.objects.create(client=client, node="node-2", acked_through=4)
    assert replication.apply_reported_acks(HERE) == 0


def test_size_reports_carry_acked_through(user):
    client = stored(user, primary=HERE)
    fill_queue(client.pk, [1, 2, 3])
    queue_services.queue_ack(client_id=client.pk, up_to=2)
    report_queue_sizes(HERE)
    report = QueueSizeReport.objects.get(client=client, node=HERE)
    assert (report.size, report.acked_through) == (1, 2)
    queue_services.queue_ack(client_id=client.pk, up_to=3)
    report_queue_sizes(HERE)
    report.refresh_from_db()
    assert (report.size, report.acked_through) == (0, 3)


def test_ack_relay_sends_each_other_host_the_highest_ack(user, monkeypatch):
    sent = recorder(monkeypatch, "ack_on")
    one = stored(user, "one", primary=HERE, secondaries=["node-2", "node-3"])
    two = stored(user, "two", primary=HERE, secondaries=["node-3"])
    replication.AckRelay.flush({one.pk: 7, two.pk: 4, uuid.uuid4(): 1})
    assert sorted(sent) == [
        ("node-2", {one.pk.hex: 7}),
        ("node-3", {one.pk.hex: 7, two.pk.hex: 4}),
    ]


# handover -----------------------------------------------------------------


def test_handover_copies_then_promotes_and_leaves_nothing_here(
    user, adopted, monkeypatch
):
    nodes(draining=[HERE], up=["node-2"])
    client = stored(user, primary=HERE, redundancy=0)
    gone = stored(user, "gone", primary="node-2", secondaries=[HERE])
    monkeypatch.setattr(
        handover,
        "time",
        SimpleNamespace(monotonic=lambda: 0.0, sleep=lambda s: None),
    )
    rounds = []

    def heartbeat():
        assert len(rounds) < 10, "handover does not converge"
        rounds.append(hosts_of(client))
        if len(rounds) == 2:  # the copy started in round 1 has arrived
            replication.copy_finished(client_id=client.pk, node="node-2")

    left = replication.node_handover(node=HERE, deadline=1.0, heartbeat=heartbeat)
    assert left == 0
    assert rounds[:2] == [(HERE, [], []), (HERE, ["node-2"], ["node-2"])]
    assert hosts_of(client) == ("node-2", [], [])
    assert hosts_of(gone) == ("node-2", [], [])


def test_handover_past_its_deadline_keeps_the_queues(user):
    nodes(draining=[HERE], up=["node-2"])
    client = stored(user, primary=HERE)
    assert replication.node_handover(node=HERE, deadline=0.0) == 1
    assert hosts_of(client) == (HERE, [], [])


# hello across nodes -------------------------------------------------------


def test_new_client_with_redundancy_gets_a_syncing_secondary_and_a_copy(user, adopted):
    nodes(up=[HERE, "node-2", "node-3"])
    other = stored(user, "other", primary="node-2")
    QueueSizeReport.objects.create(client=other, node="node-2")
    result = hello(user, redundancy=1)
    assert result.pending_events == -2
    assert result.redirect_url is None
    assert hosts_of(result.client) == (HERE, ["node-3"], ["node-3"])
    assert adopted == [("node-3", result.client.pk, HERE)]
    assert queue_selectors.queue_size(client_id=result.client.pk) == 0


def test_hello_before_this_node_heartbeats_still_places_copies(user, adopted):
    nodes(up=["node-2"])
    result = hello(user, redundancy=-1)
    assert hosts_of(result.client) == (HERE, ["node-2"], ["node-2"])
    assert adopted == [("node-2", result.client.pk, HERE)]


def test_returning_client_is_redirected_to_its_promoted_secondary(user, adopted):
    nodes(up=[HERE, "node-3"], down=["node-2"])
    client = stored(user, primary="node-2", secondaries=["node-3"], redundancy=1)
    result = hello(user, redundancy=1)
    assert result.client is None
    assert result.redirect_url == "ws://node-3.test:8000/ws/v1/subscribe"
    assert hosts_of(client) == ("node-3", [], [])
    assert adopted == []


def test_returning_client_fails_over_to_the_copy_on_this_node(user, adopted):
    nodes(up=[HERE], down=["node-2"])
    client = stored(user, primary="node-2", secondaries=[HERE])
    fill_queue(client.pk, [4, 9])
    result = hello(user)
    assert result.pending_events == 2
    assert hosts_of(client) == (HERE, [], [])
    assert result.client.node == HERE
    assert result.client.is_connected is True


def test_client_whose_every_host_is_down_is_told_minus_one_and_rehomed(
    user, adopted, dropped, django_capture_on_commit_callbacks
):
    nodes(up=[HERE], down=["node-2", "node-3"])
    client = stored(
        user,
        primary="node-2",
        secondaries=["node-3", HERE],
        syncing=[HERE],
        redundancy=1,
    )
    fill_queue(client.pk, [1, 2])  # an incomplete copy here: not the queue
    with django_capture_on_commit_callbacks(execute=True):
        result = hello(user, redundancy=1)
    assert result.pending_events == -1
    assert result.redirect_url is None
    assert hosts_of(client) == (HERE, [], [])
    assert sorted(dropped) == [("node-2", client.pk), ("node-3", client.pk)]
    assert queue_selectors.queue_size(client_id=client.pk) == 0


def test_primary_whose_store_lost_the_queue_hands_it_to_a_complete_copy(user):
    # This node is the primary but its store is new (no queue): a complete
    # secondary takes over instead of the client being told -1.
    nodes(up=[HERE, "node-2"])
    client = stored(user, primary=HERE, secondaries=["node-2"], redundancy=1)
    result = hello(user, redundancy=1)
    assert result.redirect_url == "ws://node-2.test:8000/ws/v1/subscribe"
    assert hosts_of(client) == ("node-2", [], [])


def test_primary_whose_store_lost_the_queue_without_a_copy_says_minus_one(
    user, dropped, django_capture_on_commit_callbacks
):
    nodes(up=[HERE, "node-2", "node-3"])
    client = stored(
        user,
        primary=HERE,
        secondaries=["node-2"],
        syncing=["node-2"],
        redundancy=1,
    )
    with django_capture_on_commit_callbacks(execute=True):
        result = hello(user, redundancy=1)
    assert result.pending_events == -1
    # The copy being filled from the lost queue is dropped; a new one placed.
    assert ("node-2", client.pk) in dropped
    primary, secondaries, syncing = hosts_of(client)
    assert primary == HERE
    assert secondaries == syncing
    assert len(secondaries) == 1


def test_hello_on_a_draining_node_is_refused(user):
    nodes(draining=[HERE], up=["node-2"])
    with pytest.raises(NodeDrainingError):
        hello(user)
    assert not DurableClient.objects.exists()


def test_client_of_a_draining_primary_without_a_complete_copy_waits(user):
    nodes(up=[HERE, "node-3"], draining=["node-2"])
    client = stored(
        user,
        primary="node-2",
        secondaries=["node-3"],
        syncing=["node-3"],
        redundancy=1,
    )
    with pytest.raises(NodeDrainingError):
        hello(user, redundancy=1)
    assert hosts_of(client) == ("node-2", ["node-3"], ["node-3"])
    assert not QueueState.objects.exists()


def _connected_on_node_2(user):
    return stored(
        user,
        primary="node-2",
        node="node-2",
        is_connected=True,
        socket_id="old",
        connected_at=timezone.now(),
    )


def test_connected_client_on_a_peer_that_refuses_connections_is_taken_over(
    user, probed, dropped
):
    nodes(up=[HERE, "node-2"])
    client = _connected_on_node_2(user)
    result = hello(user)
    assert probed.urls == ["http://node-2.test:8000"]
    assert result.pending_events == -1
    assert hosts_of(client)[0] == HERE
    assert result.client.socket_id == "ch-1"


def test_connected_client_on_a_live_peer_is_refused_4409(user, probed):
    probed.refuses = False
    nodes(up=[HERE, "node-2"])
    client = _connected_on_node_2(user)
    with pytest.raises(ClientConnectedError):
        hello(user)
    assert probed.urls == ["http://node-2.test:8000"]
    assert hosts_of(client)[0] == "node-2"


def test_peer_probe_can_be_switched_off(user, probed, settings):
    settings.DURABLECACHE_PROBE_PEERS = False
    nodes(up=[HERE, "node-2"])
    _connected_on_node_2(user)
    with pytest.raises(ClientConnectedError):
        hello(user)
    assert probed.urls == []


def test_connection_on_a_restarted_node_is_not_live(user):
    m = nodes(up=["node-2"])
    client = _connected_on_node_2(user)
    assert placement.connection_is_live(client, m) is True
    client.connected_at = m.rows["node-2"].started_at - timedelta(seconds=1)
    assert placement.connection_is_live(client, m) is False
    m.suspects.add("node-2")
    client.connected_at = timezone.now()
    assert placement.connection_is_live(client, m) is False


def test_clients_of_dead_nodes_are_disconnected_from_their_last_heartbeat(user):
    nodes(down=["node-2"], draining=["node-3"])
    dead = stored(
        user, "dead", primary="node-2", node="node-2", is_connected=True, timeout=60
    )
    drained = stored(
        user, "drained", primary="node-3", node="node-3", is_connected=True
    )
    passing = DurableClient.objects.create(owner=user, node="node-2", is_connected=True)
    assert services.clients_of_dead_nodes_disconnect() == 2
    dead.refresh_from_db()
    beat = Node.objects.get(name="node-2").last_heartbeat
    assert dead.is_connected is False
    assert dead.disconnected_at == beat
    assert dead.expires_at == beat + timedelta(seconds=60)
    assert DurableClient.objects.get(pk=drained.pk).is_connected is True
    assert not DurableClient.objects.filter(pk=passing.pk).exists()
