"""The delivery read batcher: many sockets' reads in one database trip."""

import asyncio
import json
import uuid
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.db import connections, transaction
from django.utils import timezone

from cache.models import Event
from cache.selectors import LoggedEvent
from clients import services
from clients.models import DurableClient
from queues import selectors as queue_selectors
from queues import services as queue_services
from queues.models import QueueEntry, QueueState
from sockets import delivery_rounds
from tests.helpers import queue_row

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "node"])


def _queue(n_events: int, *, conflates: bool = False) -> uuid.UUID:
    """A queue of ``n_events`` creates, or of updates that may conflate."""
    client_id = uuid.uuid4()
    state = QueueState.objects.create(
        client_id=client_id, conflate="true" if conflates else "false"
    )
    for seq in range(1, n_events + 1):
        queue_row(
            state,
            seq,
            region="r",
            key=f"k{seq}",
            op="update" if conflates else "create",
            value={"n": seq},
            conflates=conflates,
        )
    state.last_seq = state.size = n_events
    state.save()
    return client_id


def _counted_rounds(monkeypatch, part: int) -> list[int]:
    """Record, per round, the length of ``_run_round``'s argument ``part``
    (0 asks, 1 acks, 2 releases)."""
    rounds: list[int] = []
    real = delivery_rounds._run_round

    def counting(*args):
        rounds.append(len(args[part]))
        return real(*args)

    monkeypatch.setattr(delivery_rounds, "_run_round", counting)
    return rounds


def _counted_transactions(monkeypatch) -> list[tuple[list[Any], list[Any]]]:
    """Record each ``queue_ack_and_mark_many`` as (sorted acks, marking)."""
    transactions: list[tuple[list[Any], list[Any]]] = []
    real = delivery_rounds.queue_services.queue_ack_and_mark_many

    def counting(*, acks, marking=(), **kwargs):
        transactions.append((sorted(acks), sorted(marking)))
        return real(acks=acks, marking=marking, **kwargs)

    monkeypatch.setattr(
        delivery_rounds.queue_services, "queue_ack_and_mark_many", counting
    )
    return transactions


@pytest.mark.parametrize("conflates", [True, False])
async def test_asks_that_arrive_together_share_one_round(monkeypatch, conflates):
    ids = [
        await database_sync_to_async(_queue)(3, conflates=conflates) for _ in range(5)
    ]
    rounds = _counted_rounds(monkeypatch, 0)
    transactions = _counted_transactions(monkeypatch)
    batcher = delivery_rounds.ReadBatcher()
    results = await asyncio.gather(
        *(batcher.next_batch(client_id=pk, sent_through=1, limit=10) for pk in ids)
    )
    assert rounds == [5]
    for rows in results:
        assert [row["seq"] for row in rows] == [2, 3]
        assert json.loads(rows[0]["value_json"]) == {"n": 2}
        assert rows[0]["ts"].endswith(("Z", "+00:00"))
    delivered = await database_sync_to_async(
        lambda: sorted(
            QueueState.objects.filter(pk__in=ids).values_list(
                "delivered_through", flat=True
            )
        )
    )()
    if conflates:
        # What a round reads is marked delivered in its transaction, before
        # the rows reach their sockets: no fan-out pass can conflate them.
        assert delivered == [3] * 5
        assert transactions == [([], sorted(ids))]
    else:
        # Rows that cannot conflate need no mark: no transaction, no lock.
        assert delivered == [0] * 5
        assert transactions == []


# Statements of one read round on the node store, by vendor: the reads
# alone, and with the marks of reads that may conflate (a transaction:
# PostgreSQL's BEGIN, SET LOCAL and COMMIT are seen, SQLite's BEGIN is not).
READ_ROUND_STATEMENTS = {
    "sqlite": {False: 1, True: 5},
    "postgresql": {False: 1, True: 7},
}


def _asks(ids: list[uuid.UUID], sent_through: int) -> list[dict[str, Any]]:
    return [
        {"client_id": pk, "sent_through": sent_through, "limit": 10, "through": None}
        for pk in ids
    ]


@pytest.mark.parametrize("conflates", [False, True], ids=["reads", "marks"])
@pytest.mark.parametrize("sockets", [1, 3, 10])
def test_a_read_round_takes_the_same_statements_for_any_number_of_sockets(
    sockets, conflates, django_assert_num_queries
):
    ids = [_queue(3, conflates=conflates) for _ in range(sockets)]
    node = connections["node"]
    with (
        django_assert_num_queries(
            READ_ROUND_STATEMENTS[node.vendor][conflates], connection=node
        ),
        django_assert_num_queries(0, connection=connections["default"]),
    ):
        results, _, _ = delivery_rounds._run_round(_asks(ids, 1), [], [])
    assert [[row["seq"] for row in rows] for _, rows in results] == [[2, 3]] * sockets


@pytest.mark.parametrize("sockets", [1, 3, 10])
def test_a_rounds_acks_share_one_transaction(sockets, django_assert_num_queries):
    ids = [_queue(3) for _ in range(sockets)]
    node = connections["node"]
    # Constant in the number of sockets on both vendors: one statement
    # deletes every ack's entries (PostgreSQL), one counting read and one
    # executemany of the deletes (SQLite).
    expected = {"postgresql": 7, "sqlite": 6}[node.vendor]
    with django_assert_num_queries(expected, connection=node):
        _, acked, _ = delivery_rounds._run_round(
            _asks(ids, 2), [(pk, 2) for pk in ids], []
        )
    assert acked == (True, [2] * sockets)


async def test_a_mark_already_recorded_is_not_written_again():
    pk = await database_sync_to_async(_queue)(4, conflates=True)
    await database_sync_to_async(QueueState.objects.filter(pk=pk).update)(
        delivered_through=3
    )
    batcher = delivery_rounds.ReadBatcher()
    rows = await batcher.next_batch(client_id=pk, sent_through=2, limit=1, through=3)
    assert [row["seq"] for row in rows] == [3]
    state = await database_sync_to_async(QueueState.objects.get)(pk=pk)
    assert state.delivered_through == 3  # never moves back


def _reads_fail_when(monkeypatch, fails) -> None:
    """Make ``queue_reads_after_many`` raise for the reads ``fails`` picks."""
    real = delivery_rounds.queue_selectors.queue_reads_after_many

    def reading(reads_, shared=None):
        if fails(reads_):
            raise RuntimeError("the reads failed")
        return real(reads_, shared)

    monkeypatch.setattr(
        delivery_rounds.queue_selectors, "queue_reads_after_many", reading
    )


async def test_one_failing_read_fails_only_its_socket(monkeypatch):
    good = await database_sync_to_async(_queue)(2)
    bad = uuid.uuid4()
    # The round's statement fails, then bad's own.
    _reads_fail_when(monkeypatch, lambda reads_: any(r[0] == bad for r in reads_))
    batcher = delivery_rounds.ReadBatcher()
    ok, failed = await asyncio.gather(
        batcher.next_batch(client_id=good, sent_through=0, limit=5),
        batcher.next_batch(client_id=bad, sent_through=0, limit=5),
        return_exceptions=True,
    )
    assert [row["seq"] for row in ok] == [1, 2]
    assert isinstance(failed, RuntimeError)
    # The batcher goes on serving.
    again = await batcher.next_batch(client_id=good, sent_through=2, limit=5)
    assert again == []


async def test_a_read_on_its_own_after_a_failed_round_is_marked_too(monkeypatch):
    pk = await database_sync_to_async(_queue)(2, conflates=True)
    plain = await database_sync_to_async(_queue)(2)
    _reads_fail_when(monkeypatch, lambda reads_: len(reads_) > 1)  # the round's
    batcher = delivery_rounds.ReadBatcher()
    rows, other = await asyncio.gather(
        batcher.next_batch(client_id=pk, sent_through=0, limit=5),
        batcher.next_batch(client_id=plain, sent_through=0, limit=5),
    )
    assert [row["seq"] for row in rows] == [1, 2]
    assert [row["seq"] for row in other] == [1, 2]

    def delivered(client_id):
        return QueueState.objects.get(pk=client_id).delivered_through

    # What may conflate was marked before it reached its socket; the rest
    # needs no mark.
    assert await database_sync_to_async(delivered)(pk) == 2
    assert await database_sync_to_async(delivered)(plain) == 0


async def test_a_socket_that_stops_waiting_does_not_stop_the_round():
    ids = [await database_sync_to_async(_queue)(1) for _ in range(2)]
    batcher = delivery_rounds.ReadBatcher()
    gone = asyncio.ensure_future(
        batcher.next_batch(client_id=ids[0], sent_through=0, limit=5)
    )
    stays = asyncio.ensure_future(
        batcher.next_batch(client_id=ids[1], sent_through=0, limit=5)
    )
    await asyncio.sleep(0)
    gone.cancel()
    rows = await asyncio.wait_for(stays, 10)
    assert [row["seq"] for row in rows] == [1]
    assert gone.cancelled()


async def test_acks_and_reads_that_arrive_together_share_one_transaction(
    monkeypatch,
):
    ids = [
        await database_sync_to_async(_queue)(4, conflates=conflates)
        for conflates in (False, False, True)
    ]
    transactions = _counted_transactions(monkeypatch)
    batcher = delivery_rounds.ReadBatcher()
    dropped, _, rows = await asyncio.gather(
        batcher.ack(client_id=ids[0], up_to=2),
        batcher.ack(client_id=ids[1], up_to=4),
        batcher.next_batch(client_id=ids[2], sent_through=3, limit=5),
    )
    assert len(transactions) == 1
    assert transactions[0] == (sorted([(ids[0], 2), (ids[1], 4)]), [ids[2]])
    assert dropped == 2
    assert [row["seq"] for row in rows] == [4]

    def state(pk):
        s = QueueState.objects.get(pk=pk)
        left = list(
            QueueEntry.objects.filter(queue_id=pk)
            .order_by("seq")
            .values_list("seq", flat=True)
        )
        return s.acked_through, s.delivered_through, s.size, left

    assert await database_sync_to_async(state)(ids[0]) == (2, 2, 2, [3, 4])
    assert await database_sync_to_async(state)(ids[1]) == (4, 4, 0, [])
    # ids[2] was sent through 3 and read 4 in the round: delivered through 4.
    assert await database_sync_to_async(state)(ids[2]) == (0, 4, 4, [1, 2, 3, 4])


async def test_a_read_that_may_conflate_is_read_again_under_the_lock(monkeypatch):
    # Between a round's first read (no lock) and its transaction a fan-out
    # pass queues a newer update of the key, which removes the one read
    # (it was not marked yet): the socket gets what the locked read finds,
    # and that is what is marked delivered.
    pk = await database_sync_to_async(_queue)(1, conflates=True)
    real = delivery_rounds.queue_services.queue_ack_and_mark_many

    def newer_update_first(**kwargs):
        newer = Event(
            seq=2,
            event_id=uuid.uuid4().hex,
            region="r",
            key="k1",
            op="update",
            value={"n": 2},
            version=2,
            conflate=True,
            ts=timezone.now(),
        )
        with transaction.atomic(using="node"):
            queue_services.queue_append_many({pk: [LoggedEvent.of(newer)]})
        return real(**kwargs)

    monkeypatch.setattr(
        delivery_rounds.queue_services, "queue_ack_and_mark_many", newer_update_first
    )
    rows = await delivery_rounds.ReadBatcher().next_batch(
        client_id=pk, sent_through=0, limit=5
    )
    assert [(row["seq"], json.loads(row["value_json"])) for row in rows] == [
        (2, {"n": 2})
    ]

    def state():
        s = QueueState.objects.get(pk=pk)
        return (
            s.delivered_through,
            s.size,
            sorted(
                QueueEntry.objects.filter(queue_id=pk).values_list("seq", flat=True)
            ),
        )

    assert await database_sync_to_async(state)() == (2, 1, [2])


async def test_an_ack_at_or_below_the_last_one_drops_nothing():
    pk = await database_sync_to_async(_queue)(3)
    batcher = delivery_rounds.ReadBatcher()
    assert await batcher.ack(client_id=pk, up_to=2) == 2
    assert await batcher.ack(client_id=pk, up_to=1) == 0
    assert await batcher.ack(client_id=pk, up_to=3) == 1


async def test_a_failed_ack_transaction_fails_its_acks_and_reads(monkeypatch):
    pk = await database_sync_to_async(_queue)(2)

    def failing(*, acks, **kwargs):
        raise RuntimeError("database gone")

    monkeypatch.setattr(
        delivery_rounds.queue_services, "queue_ack_and_mark_many", failing
    )
    batcher = delivery_rounds.ReadBatcher()
    acked, read = await asyncio.gather(
        batcher.ack(client_id=pk, up_to=1),
        batcher.next_batch(client_id=pk, sent_through=1, limit=5),
        return_exceptions=True,
    )
    assert isinstance(acked, RuntimeError)
    assert isinstance(read, RuntimeError)
    monkeypatch.undo()
    assert await batcher.ack(client_id=pk, up_to=1) == 1  # it goes on serving


def _queues_of_the_same_events(n_queues: int, when) -> list[uuid.UUID]:
    """Queues holding copies of the same two events, as a fan-out makes."""
    events = [(seq, uuid.uuid4().hex) for seq in (1, 2)]
    ids = []
    for _ in range(n_queues):
        state = QueueState.objects.create(client_id=uuid.uuid4(), conflate="false")
        for seq, event_id in events:
            queue_row(
                state,
                seq,
                event_id=event_id,
                region="r",
                key="k",
                op="update",
                value={"n": seq},
                version=seq,
                ts=when,
            )
        state.last_seq = state.size = 2
        state.save()
        ids.append(state.client_id)
    return ids


@pytest.mark.parametrize("microsecond", [0, 123456])
async def test_a_round_builds_each_event_once_for_all_its_sockets(microsecond):
    when = timezone.now().replace(microsecond=microsecond)
    ids = await database_sync_to_async(_queues_of_the_same_events)(3, when)
    batcher = delivery_rounds.ReadBatcher()
    results = await asyncio.gather(
        *(batcher.next_batch(client_id=pk, sent_through=0, limit=10) for pk in ids)
    )
    first = results[0]
    assert [row["seq"] for row in first] == [1, 2]
    for rows in results[1:]:
        assert all(a is b for a, b in zip(rows, first, strict=True))
    # The stored text read as is gives what formatting the datetime gave.
    assert first[0]["ts"] == queue_selectors.ts_text(when)
    assert first[0]["ts"] == when.isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize(
    ("stored", "wire"),
    [
        ("2026-12-02 12:00:00", "2026-12-02T12:00:00Z"),
        ("2026-12-02 12:00:00.000123", "2026-12-02T12:00:00.000123Z"),
        ("2026-12-02T12:00:00+00:00", "2026-12-02T12:00:00Z"),
    ],
)
def test_stored_timestamp_text_is_written_as_the_wire_wants(stored, wire):
    assert queue_selectors.ts_text(stored) == wire


def test_a_timestamp_text_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="not a stored timestamp"):
        queue_selectors.ts_text("yesterday")


def test_many_reads_in_one_statement_keep_each_reads_bounds():
    a, b, empty = _queue(5), _queue(3), uuid.uuid4()
    many = queue_selectors.queue_events_after_many(
        [(a, 1, 2, None), (b, 0, 10, 2), (empty, 0, 10, None), (a, 3, 10, None)]
    )
    seqs = [[row["seq"] for row in rows] for rows in many]
    assert seqs == [[2, 3], [1, 2], [], [4, 5]]
    one_by_one = [
        queue_selectors.queue_events_after(client_id=a, after=1, limit=2),
        queue_selectors.queue_events_after(client_id=b, after=0, limit=10, through=2),
    ]
    assert many[:2] == one_by_one


def _connected(user, durable_id: str, socket_id: str) -> uuid.UUID:
    options = services.parse_hello_options({"durable_id": durable_id})
    result = services.client_hello(user=user, socket_id=socket_id, options=options)
    return result.client.id


async def test_releases_that_arrive_together_share_one_round(user, monkeypatch):
    held = [
        (
            await database_sync_to_async(_connected)(user, f"c{i}", f"node-1!t.{i}"),
            f"node-1!t.{i}",
        )
        for i in range(3)
    ]
    rounds = _counted_rounds(monkeypatch, 2)
    batcher = delivery_rounds.ReadBatcher()
    stale = (held[0][0], "node-1!t.older")  # a socket the client no longer has
    await asyncio.gather(
        *(batcher.release(client_id=cid, socket_id=sid) for cid, sid in [*held, stale])
    )
    assert rounds == [4]

    def states():
        return sorted(
            DurableClient.objects.filter(durable_id__startswith="c").values_list(
                "durable_id", "is_connected", "socket_id"
            )
        )

    assert await database_sync_to_async(states)() == [
        ("c0", False, ""),
        ("c1", False, ""),
        ("c2", False, ""),
    ]


async def test_a_failed_release_round_fails_its_releases(user, monkeypatch):
    def broken(**kwargs):
        raise RuntimeError("database went away")

    monkeypatch.setattr(services, "clients_ended", broken)
    cid = await database_sync_to_async(_connected)(user, "c", "node-1!t.1")
    with pytest.raises(RuntimeError):
        await delivery_rounds.ReadBatcher().release(
            client_id=cid, socket_id="node-1!t.1"
        )
