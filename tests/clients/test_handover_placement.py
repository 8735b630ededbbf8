"""Graceful stops (SIGTERM) and the placement of a queue whose hosts are
stopping: the queue reaches an up node, and a copy arriving in pages
conflates as the copy's own fan-out would. Each test's docstring names
the contract and the sequence that would break it.

Other nodes are ``Node`` rows; their workers are stood in for by recording
the task senders of ``clients.dispatch`` (as tests/clients/test_replication.py).
"""

from types import SimpleNamespace

import pytest
from django.db import transaction
from django.utils import timezone

from cache.models import Event
from cache.selectors import LoggedEvent
from clients import replication
from clients.exceptions import NodeDrainingError
from clients.replication import handover
from queues import selectors as queue_selectors
from queues import services as queue_services
from queues.models import FanoutCursor
from tests.clients.test_replication import (
    HERE,
    hello,
    hosts_of,
    nodes,
    stored,
)
from tests.helpers import queued_seqs

pytestmark = pytest.mark.django_db(databases=["default", "node"])


@pytest.fixture
def rounds(monkeypatch):
    """A clock for ``node_handover``: each handover round is one second."""
    clock = SimpleNamespace(now=0.0)

    def sleep(_s):
        clock.now += 1.0

    monkeypatch.setattr(
        handover,
        "time",
        SimpleNamespace(monotonic=lambda: clock.now, sleep=sleep),
    )
    return clock


def test_two_nodes_stopped_together_hand_a_shared_queue_to_the_node_left_up(
    user, adopted, rounds, django_capture_on_commit_callbacks
):
    """Contract (operations.md "Graceful handover"): SIGTERM hands
    every queue the node hosts to another node; queues stay behind only when
    no other node is up (or Redis is away, or a copy is too long). Stopping
    two of three nodes at once (a scale-down) must therefore move a
    redundancy-1 queue hosted on those two to the third, which is up all
    along.

    Under a draining primary ``fail_over`` keeps only the up secondaries.
    Were the draining secondary still counted by ``top_up``, no copy would
    ever start on node-3: both stopping nodes would keep the queue until
    their deadline and exit with it, and the client's next ``hello`` on
    node-3 would be told ``-1``: every queued event lost.
    """
    nodes(draining=[HERE, "node-2"], up=["node-3"])
    client = stored(user, primary=HERE, secondaries=["node-2"], redundancy=1)

    with django_capture_on_commit_callbacks(execute=True):
        left = replication.node_handover(node=HERE, deadline=10.0)

    primary, secondaries, _ = hosts_of(client)
    assert "node-3" in (primary, *secondaries), (
        "no copy was placed on node-3, the only node up; the handover kept "
        f"{left} queue(s) and the hosts stayed {hosts_of(client)}"
    )
    assert [target for target, *_ in adopted] == ["node-3"]


def test_stopping_the_node_with_the_only_complete_copy_of_a_dead_primary_hands_it_over(
    user, adopted, rounds, django_capture_on_commit_callbacks
):
    """Contract: a redundancy-1 queue survives the loss of one host, and a
    graceful stop loses nothing (it hands what it hosts to the nodes that
    stay up). Here the primary (node-3) has crashed and the node holding the
    queue's only complete copy (this node) is then stopped gracefully while
    node-2 is up: the copy must go to node-2.

    ``fail_over`` promotes the draining complete copy, whose handover then
    moves the queue on. Left unpromoted, nothing would copy it anywhere
    (``top_up`` is only reached for an up or draining primary, and
    ``copy_source`` refuses a draining secondary), so the handover would
    spin until its deadline and the node exit with the last copy of the
    queue.
    """
    nodes(draining=[HERE], up=["node-2"], down=["node-3"])
    client = stored(user, primary="node-3", secondaries=[HERE], redundancy=1)

    with django_capture_on_commit_callbacks(execute=True):
        left = replication.node_handover(node=HERE, deadline=10.0)

    primary, secondaries, _ = hosts_of(client)
    assert "node-2" in (primary, *secondaries), (
        f"no copy was placed on node-2; the handover kept {left} queue(s) "
        f"and the hosts stayed {hosts_of(client)}"
    )
    assert [target for target, *_ in adopted] == ["node-2"]


def test_a_hello_meanwhile_is_told_to_retry_not_that_the_queue_is_lost(
    user, adopted, dropped, settings, django_capture_on_commit_callbacks
):
    """Contract (protocol.md §0, §6): with redundancy >= 1 a client whose
    primary died gets its queue back from a complete secondary, not ``-1``;
    a ``hello`` that comes while its queue is still being handed over is
    closed with 4503 ("retry"), never told the queue is lost.

    Here the primary (node-3) crashed and the only complete copy is on
    node-2, which is draining (SIGTERM, still heartbeating and serving copy
    pages). ``fail_over`` promotes that draining complete copy. Were it
    ignored, the primary would stay ``DOWN`` (not ``DRAINING``), so
    ``client_hello`` would declare the queue lost (``-1``) and drop the
    copy on node-2: every queued event lost although a complete copy is
    alive.
    """
    settings.DURABLECACHE_PROBE_PEERS = False
    nodes(up=[HERE], draining=["node-2"], down=["node-3"])
    client = stored(user, primary="node-3", secondaries=["node-2"], redundancy=1)

    with django_capture_on_commit_callbacks(execute=True):
        try:
            result = hello(user, redundancy=1)
        except NodeDrainingError:
            return  # 4503: retry while the copy is handed over -- correct
    assert ("node-2", client.pk) not in dropped
    assert result.pending_events != -1, (
        f"queue declared lost; copies dropped on {sorted(h for h, _ in dropped)}; "
        f"hosts now {hosts_of(client)}"
    )


def _event(seq, key, op, version):
    return LoggedEvent.of(
        Event(
            seq=seq,
            event_id=f"ev{seq}",
            region="prices",
            key=key,
            op=op,
            value=version,
            version=version,
            ts=timezone.now(),
            conflate=True,
        )
    )


def test_a_copied_update_the_copys_fanout_superseded_is_conflated(user):
    """Contract (docs/protocol.md, "Delivery rules"): events of one key
    reach a client in version
    order, and every host of a queue holds the same events (an ``ack up_to``
    names the same rows everywhere). A copy made for a handover (or any new
    secondary) is the source's entries through ``copy_upto`` plus what the
    copy's own fan-out appends after it.

    Sequence (client conflating, offline or not yet reading K): the source
    P holds K create v1 (seq 90) and K update v2 (seq 95); the new host T
    adopts with ``copy_upto`` 100 and P builds page 1 with v2 in it. K
    update v3 (seq 105) is written: P's fan-out conflates v2 away, T's
    fan-out appends v3 (nothing of K to conflate yet: the page is still in
    flight). Then ``queue_copy_in`` stores the page's v2 on T, below v3.

    ``queue_copy_in`` conflates the copied v2 away (``_conflate_copied``),
    so T holds P's [90, 105]. Were T to hold [90, 95, 105], the client
    served by P would get v1, v3 and, if its socket ends before its ack of
    105 reaches T (P crashes, or the handover's 4503 outruns the ack
    relay), T would replay v2 -- an id the client never saw, so the
    library passes it on -- after v3: K's versions would reach the
    listener as 1, 3, 2.
    """
    source = stored(user, "src", primary="node-2")
    copy = stored(user, "dst", primary="node-2", secondaries=[HERE])
    queue_services.queue_ensure(client_id=source.pk, durable_id="src", conflate="true")
    with transaction.atomic(using="node"):
        queue_services.queue_append_many(
            {source.pk: [_event(90, "K", "create", 1), _event(95, "K", "update", 2)]}
        )
    FanoutCursor.objects.update_or_create(node=HERE, defaults={"fanout_through": 100})
    state = queue_services.queue_adopt(
        client_id=copy.pk, durable_id="dst", conflate="true", node=HERE, source="x"
    )
    assert state.copy_upto == 100
    page = queue_selectors.queue_copy_page(
        client_id=source.pk, after=0, upto=100, limit=2000
    )
    page["upto"] = 100
    assert [e["seq"] for e in page["entries"]] == [90, 95]

    v3 = _event(105, "K", "update", 3)
    with transaction.atomic(using="node"):  # each host's own fan-out of v3
        queue_services.queue_append_many({source.pk: [v3], copy.pk: [v3]})
    assert queued_seqs(source.pk) == [90, 105]  # the source conflated v2 away

    assert queue_services.queue_copy_in(client_id=copy.pk, page=page) is True
    assert queued_seqs(copy.pk) == queued_seqs(source.pk), (
        "the copy holds K v2 under K v3: replayed after v3 to a client "
        "that got v3 from the source"
    )
