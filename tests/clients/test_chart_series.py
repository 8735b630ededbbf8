"""The series behind the overview's charts: a node that took no samples for
a while (it was down) shows a gap, not a line across it, and the cluster's
write rate comes from every node's samples, so it goes on while any node
is up."""

from datetime import timedelta

import pytest
from django.utils import timezone

from clients import selectors
from clients.models import NodeSample
from clients.samples import SAMPLE_S

pytestmark = pytest.mark.django_db(databases=["default", "node"])

START = timezone.now() - timedelta(minutes=10)
STEP = timedelta(seconds=SAMPLE_S)


def at(step):
    """The time of the ``step``-th sampling round (fractions: in between)."""
    return START + step * STEP


def sample(node, step, *, head, delivered=0, queued=0):
    NodeSample.objects.create(
        node=node,
        at=at(step),
        log_head=head,
        delivered_total=delivered,
        queued_events=queued,
    )


@pytest.fixture
def node_1_down_for_a_while():
    """10 writes a sampling round; node-1 samples in rounds 0-2, is down in
    3-6 and samples again in 7-9; node-2 samples in every round, a little
    later than node-1."""
    for step in range(10):
        head = 10 * step
        if not 3 <= step <= 6:
            sample("node-1", step, head=head, delivered=5 * step, queued=step)
        sample("node-2", step + 0.2, head=head + 2, delivered=step, queued=1)


def test_a_node_down_for_a_while_shows_a_gap(node_1_down_for_a_while):
    series = selectors.node_series(minutes=30)["node-1"]

    assert [p["queued"] for p in series] == [0, 1, 2, None, 7, 8, 9]
    gap = series[3]
    assert gap == {"at": at(3).isoformat(), "queued": None, "in": None, "out": None}
    # No rate over the period it did not measure: the line starts again
    # from the second sample after the gap.
    assert [p["out"] for p in series] == [None, 1.0, 1.0, None, None, 1.0, 1.0]
    assert [p["in"] for p in series] == [None, 2.0, 2.0, None, None, 2.0, 2.0]


def test_the_write_rate_goes_on_while_a_node_is_down(node_1_down_for_a_while):
    points = selectors.cluster_series(minutes=30)

    # One point a sampling round, whichever node's sample comes first at
    # least most of a round after the last one: none missing.
    rounds = [0, 1, 2, 3.2, 4.2, 5.2, 6.2, 7.2, 8.2, 9.2]
    assert [p["at"] for p in points] == [at(r).isoformat() for r in rounds]
    rates = [p["in"] for p in points]
    assert rates[0] is None
    assert all(rate is not None and rate > 0 for rate in rates[1:])
    # 10 writes a round, measured across nodes too.
    assert sum(rates[1:]) * SAMPLE_S == pytest.approx(90, abs=0.5)


def test_the_write_rate_shows_a_gap_when_every_node_was_down():
    sample("node-1", 0, head=0)
    sample("node-1", 1, head=10)
    sample("node-2", 6, head=200)  # nothing sampled in rounds 2-5
    sample("node-2", 7, head=210)

    points = selectors.cluster_series(minutes=30)

    assert points == [
        {"at": at(0).isoformat(), "in": None},
        {"at": at(1).isoformat(), "in": 10 / SAMPLE_S},
        {"at": at(2).isoformat(), "in": None},
        {"at": at(6).isoformat(), "in": None},
        {"at": at(7).isoformat(), "in": 10 / SAMPLE_S},
    ]


def test_the_dashboard_serves_both_series(client, django_user_model):
    operator = django_user_model.objects.create_user("ops", is_staff=True)
    client.force_login(operator)
    sample("node-2", 0, head=0)

    data = client.get("/dashboard/nodes.json").json()

    assert set(data) == {"nodes", "cluster"}
    assert data["cluster"] == [{"at": at(0).isoformat(), "in": None}]
    assert list(data["nodes"]) == ["node-2"]
