"""A REST pre-registration racing a first ``hello`` for the same new id.

Each test stops one side on its own thread right after its client row
commits (a hook on the cluster connection's commit), runs the other side
to the end, then lets the first go on: the exact interleaving, no sleeps.
"""

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connections

from cache import selectors as cache_selectors
from cache import services as cache_services
from clients import fanout, maintenance, services
from clients import selectors as client_selectors
from clients.exceptions import ClientOwnedError
from clients.matching import parse_selector
from queues import selectors as queue_selectors
from queues import services as queue_services
from tests.helpers import hello, queued_seqs

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "node"])

WAIT_S = 10  # upper bound of every wait; a passing test never reaches it


class PausedAfterRowCommit:
    """Run ``work`` on a thread that stops right after its first commit on
    the cluster database (its client row's), until ``go``."""

    def __init__(self, monkeypatch: Any, work: Callable[[], Any]) -> None:
        self.work = work
        self.committed, self.released = threading.Event(), threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run)
        wrapper_class = type(connections["default"])
        real_commit = wrapper_class.commit
        paused = self

        def commit(connection: Any) -> None:
            real_commit(connection)
            if (
                threading.current_thread() is paused.thread
                and connection.alias == "default"
                and not paused.committed.is_set()
            ):
                paused.committed.set()
                assert paused.released.wait(WAIT_S), "never let go"

        monkeypatch.setattr(wrapper_class, "commit", commit)

    def _run(self) -> None:
        try:
            self.result = self.work()
        except BaseException as exc:  # handed to the test's thread
            self.error = exc
        finally:
            connections.close_all()

    def __enter__(self) -> "PausedAfterRowCommit":
        self.thread.start()
        assert self.committed.wait(WAIT_S), "the row never committed"
        return self

    def __exit__(self, *exc: Any) -> None:
        self.released.set()
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive()
        if self.error is not None and exc[0] is None:
            raise self.error


def preregister(user: Any, durable_id: str) -> None:
    """What ``POST clients/{id}/interests/`` does (its view's two calls)."""
    client = services.client_ensure_offline(user=user, durable_id=durable_id)
    services.interest_register(
        client=client,
        region="prices",
        selector=parse_selector({"keys": ["k"]}),
        is_durable=True,
        policy="keys_values",
    )


def write_and_fan_out() -> int:
    cache_services.entry_put(region="prices", key="k", value=1)
    fanout.fanout_node("node-1")
    return cache_selectors.event_log_head()


def test_a_write_between_a_first_hello_and_its_queue_is_queued(
    user, region, monkeypatch
):
    # hello commits the new client's row; before it goes on, a backend
    # pre-registers interest for the id and a write is fanned out.
    with PausedAfterRowCommit(
        monkeypatch, lambda: hello(user, "race", "sock-1")
    ) as first:
        preregister(user, "race")
        seq = write_and_fan_out()
    assert first.result.pending_events == -2  # a new id: no queue was lost
    assert queued_seqs(first.result.client.id) == [seq]


def test_a_first_hello_during_a_preregistration_is_not_told_lost(
    user, region, monkeypatch
):
    # The pre-registration commits the new client's row; before it goes
    # on, the owner's first hello comes: nothing was ever lost.
    with PausedAfterRowCommit(monkeypatch, lambda: preregister(user, "race")):
        result = hello(user, "race", "sock-1")
    assert result.pending_events in (-2, 0), result
    seq = write_and_fan_out()
    assert queued_seqs(result.client.id) == [seq]


def test_the_orphan_sweep_keeps_a_queue_whose_row_is_about_to_commit(
    user, region, monkeypatch
):
    # A queue is created just before its client row commits: a sweep that
    # finds the queue and no row must wait for the row, not drop the queue.
    # The sweep runs on its own thread while the creating transaction is
    # open. Its first read of the rows is told "no row", which is what a
    # SQLite file (WAL) or PostgreSQL shows it then; the tests' in-memory
    # database refuses that read instead (its table is locked).
    real_hosted_here = maintenance._hosted_here
    real_drop = queue_services.queue_drop_orphans
    # Set once the sweep reads the rows again, or (without that) has judged.
    reached = threading.Event()
    swept: list[int] = []

    def hosted_here(client_ids, node, *, after_writers=False):
        if not after_writers:
            return set()
        reached.set()
        return real_hosted_here(client_ids, node, after_writers=True)

    def drop_orphans(**kwargs: Any) -> int:
        try:
            return real_drop(**kwargs)
        finally:
            reached.set()

    def sweep() -> None:
        try:
            swept.append(maintenance.drop_orphans())
        finally:
            connections.close_all()

    sweeping = threading.Thread(target=sweep)
    real_ensure = queue_services.queue_ensure

    def ensure_then_sweep(**kwargs: Any) -> Any:
        state = real_ensure(**kwargs)
        if not sweeping.is_alive() and not swept:
            sweeping.start()
            assert reached.wait(WAIT_S), "the sweep never came to the rows"
        return state  # the row commits now, while the sweep waits for it

    monkeypatch.setattr(maintenance, "_hosted_here", hosted_here)
    monkeypatch.setattr(queue_services, "queue_drop_orphans", drop_orphans)
    monkeypatch.setattr(queue_services, "queue_ensure", ensure_then_sweep)
    services.client_ensure_offline(user=user, durable_id="late")
    sweeping.join(WAIT_S)
    assert swept == [0]
    client = client_selectors.client_visible_to(user=user, durable_id="late")
    assert queue_selectors.queue_size(client_id=client.id) == 0


def test_the_orphan_sweep_still_drops_a_queue_whose_client_is_gone(user, region):
    client = services.client_ensure_offline(user=user, durable_id="gone")
    client.delete()  # its queue's drop lost, say
    assert maintenance.drop_orphans() == 1
    assert queue_selectors.queue_size(client_id=client.id) == -2


def _looked_up_before_the_insert(monkeypatch: Any) -> list[str]:
    """Make this hello's first look-up of its id miss, as when another door
    inserts the row after the look-up and before this hello's insert (on
    PostgreSQL the look-up of a missing row locks nothing). The later
    look-ups see the row."""
    from clients.services import hello as hello_module

    real = hello_module._client_locked
    calls: list[str] = []

    def lookup(durable_id: str) -> Any:
        calls.append(durable_id)
        return None if len(calls) == 1 else real(durable_id)

    monkeypatch.setattr(hello_module, "_client_locked", lookup)
    return calls


def test_a_first_hello_whose_insert_meets_a_preregistered_row_takes_it(
    user, monkeypatch
):
    created = services.client_ensure_offline(user=user, durable_id="race")
    calls = _looked_up_before_the_insert(monkeypatch)
    result = hello(user, "race")
    assert calls == ["race", "race"]
    assert result.client.pk == created.pk
    assert result.client.is_connected


def test_a_first_hello_whose_insert_meets_another_users_row_is_refused(
    user, other_user, monkeypatch
):
    services.client_ensure_offline(user=other_user, durable_id="race")
    _looked_up_before_the_insert(monkeypatch)
    with pytest.raises(ClientOwnedError):
        hello(user, "race")
