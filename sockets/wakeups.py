"""What reaches the sockets of one Daphne process from outside it.

A subscriber socket has no channel-layer channel of its own: a channel,
its receive task, its group memberships and their refresher would be
carried by every socket (docs/decisions/0012-one-wake-hub-per-process.md).
The process's ``WakeHub`` is the one member of the group ``wake.<node>``
for this process and carries these to its sockets, in memory:

- **doorbells**: the fan-out publishes one message per batch naming every
  client whose queue grew (``queues.notify.ring_many``) on the node's Redis
  pub/sub channel, which the hub subscribes to (``_wake_loop``; without
  Redis they come through the group); the hub sets those sockets' wake
  flags. Per batch, one Redis command and one message per process,
  whatever the number of sockets
  (docs/decisions/0027-wake-ups-by-redis-publish.md). A **push** message
  carries, for queues whose appended rows are all plain, the head before
  them, their seqs and the events' frame fields: a socket that has sent
  through that head sends them without reading its queue
  (``WakeFlag.take``; docs/decisions/0028-pushed-events.md); one whose
  delivery task waits with nothing to do has them written by the hub at
  once, without waking the task (``WakeFlag.direct``,
  ``sockets.streams.Stream.write_pushed``).
- **closes**: an operator's delete (``notify.close_client``, 4410) and a
  node's shutdown (``notify.close_node``, 4503).
- **the sweep**: every ``DURABLECACHE_POLL_S`` one query per database reads
  the primary, queue head and holding socket of every delivering socket's
  client (``clients.selectors.delivery_checks``): a socket whose client is
  gone is closed 4410, one whose client has another primary now, or is no
  longer marked held by it (released by a node that took this one for
  dead), 4503, and one whose queue grew since the last look is woken.
  This heals a lost doorbell or close and delivers while Redis is away, at
  one query per process and period instead of two per socket.
- **the reconcile**: every ``RECONCILE_S`` one query reads the clients
  marked connected to a socket of this process (its socket ids carry the
  hub's ``tag``); those whose socket is no longer open are released as if
  it had disconnected. A socket releases its client when it ends
  (sockets.holding), but that release can fail (the cluster database
  unreachable at that moment); such a client's ``hello`` would otherwise
  be refused 4409 until the node restarts.

Surviving Redis: channels_redis reads a process's channels with one receive
at a time; when the hub's receive fails it joins its group again and then
wakes every socket (events written meanwhile rang nobody). Its membership
is also refreshed every ``GROUP_REFRESH_S`` (channels_redis drops a member
after ``group_expiry``, and a Redis that restarted empty forgets it without
a receive failing), and every socket woken then (the doorbells rung while
it was out of the group reached nobody).
"""

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import redis.asyncio as aioredis
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings

from clients import selectors, services
from common import trace
from queues import notify
from queues import selectors as queue_selectors

log = logging.getLogger(__name__)

GROUP_REFRESH_S = 30.0
# How often the hub releases clients held by sockets it no longer has.
RECONCILE_S = 10.0
# The longest one read of the wake-up channel waits (see _raise_if_cancelled).
WAKE_READ_S = 1.0
# Pushes a socket keeps before it drops them and reads its queue instead.
MAX_PUSHES = 64


class WakeFlag:
    """A socket's wake flag, set by the hub, with one waiter: its delivery
    task.

    ``asyncio.Event``'s interface without the waiter deque every Event
    allocates, which a socket with a single waiter does not need
    (docs/decisions/0012-one-wake-hub-per-process.md). A ``set`` before
    ``wait`` is kept until ``clear``.
    """

    __slots__ = ("direct", "flag", "pushes", "read", "waiter")

    def __init__(self) -> None:
        self.flag = False
        self.waiter: asyncio.Future[None] | None = None
        # Whether a wake asked for a read of the queue (any ``set``), and
        # the pushes received since the last ``take``, in order.
        self.read = False
        self.pushes: list[tuple[int, list[dict[str, Any]]]] = []
        # The delivery task's writer of pushed events, while it is live
        # (``sockets.streams.Stream.write_pushed``): given the queue's head
        # before the push and its events, it writes those it can at once
        # and returns how many.
        self.direct: Callable[[int, list[dict[str, Any]]], int] | None = None

    def set(self) -> None:
        self.read = True
        self._wake()

    def push(self, head: int, events: list[dict[str, Any]]) -> None:
        """Wake with ``events``: the rows the fan-out appended to the queue
        after its head ``head``, all plain (``queues.notify.ring_many``)."""
        waiter = self.waiter
        if (
            self.direct is not None
            and not self.flag
            and waiter is not None
            and not waiter.done()
        ):
            # Its task waits with nothing to do: the socket takes the
            # events now, on this turn of the loop, without waking it.
            sent = self.direct(head, events)
            if sent == len(events):
                return
            if sent:
                head, events = events[sent - 1]["seq"], events[sent:]
        if len(self.pushes) >= MAX_PUSHES:
            # A socket that does not keep up reads instead.
            self.pushes.clear()
            self.read = True
        self.pushes.append((head, events))
        self._wake()

    def take(self, sent_through: int) -> tuple[list[dict[str, Any]], bool]:
        """The pushed events that follow ``sent_through`` without a gap, in
        order, and whether the queue must be read as well: a plain wake
        came, or a push did not follow on (a push older than a read is
        dropped, as the read sent its events)."""
        read, self.read = self.read, False
        pushes, self.pushes = self.pushes, []
        events: list[dict[str, Any]] = []
        for head, pushed in pushes:
            last = pushed[-1]["seq"]
            if last <= sent_through:
                continue
            if head == sent_through:
                events.extend(pushed)
                sent_through = last
            else:
                read = True
        return events, read

    def _wake(self) -> None:
        self.flag = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self.flag = False

    def is_set(self) -> bool:
        return self.flag

    async def wait(self) -> None:
        if self.flag:
            return
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None


class Wakeable(Protocol):
    def set(self) -> None: ...


class HubSocket(Protocol):
    """What the hub needs of a subscriber socket (sockets.consumers)."""

    woken_as: uuid.UUID | None  # the client it delivers for, once ready
    socket_id: str  # what services record as the socket holding a client

    def holds(self, client_id: uuid.UUID) -> bool: ...

    async def close_from_hub(self, code: int, *, gone: bool) -> None: ...

    def swept(self, *, primary: str | None, head: int, holder: str) -> None: ...

    def cq_closed_by_operator(self, name: str) -> None: ...


class WakeHub:
    """The open subscriber sockets of this process and their wake flags."""

    def __init__(self) -> None:
        self.sockets: dict[uuid.UUID, set[Wakeable]] = defaultdict(set)
        self.open: set[HubSocket] = set()
        self.tasks: list[asyncio.Task[None]] = []
        self.spawned: set[asyncio.Task[None]] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.channel: str | None = None
        self.joined = False
        self.rejoining: asyncio.Task[None] | None = None
        # In every socket id this process makes (``new_socket_id``).
        self.tag = uuid.uuid4().hex[:12]
        self.reconciled_at = time.monotonic()

    def new_socket_id(self) -> str:
        """An id for a socket of this process: unique in the cluster (a late
        disconnect of an older socket changes nothing), and telling the
        reconcile which rows are this process's."""
        return f"{settings.DURABLECACHE_NODE_NAME}!{self.tag}.{uuid.uuid4().hex}"

    def _ensure_started(self) -> None:
        loop = asyncio.get_running_loop()
        if self.loop is not loop or any(t.done() for t in self.tasks):
            self._start(loop)

    def attach(self, socket: HubSocket) -> None:
        """Reach ``socket`` with closes and the sweep until ``detach``."""
        self.open.add(socket)
        self._ensure_started()

    def detach(self, socket: HubSocket) -> None:
        self.open.discard(socket)

    def add(self, client_id: uuid.UUID, wake: Wakeable) -> None:
        """Wake ``wake`` whenever this node's fan-out grows the queue."""
        self.sockets[client_id].add(wake)
        self._ensure_started()

    def discard(self, client_id: uuid.UUID, wake: Wakeable) -> None:
        events = self.sockets.get(client_id)
        if events is not None:
            events.discard(wake)
            if not events:
                del self.sockets[client_id]

    def layer_failed(self) -> None:
        """The hub's receive saw the channel layer fail: join again, then
        wake every socket (events written meanwhile rang nobody)."""
        self.joined = False
        if self.rejoining is None or self.rejoining.done():
            self.rejoining = asyncio.get_running_loop().create_task(
                self._rejoin_then_wake_all()
            )

    async def _rejoin_then_wake_all(self) -> None:
        failures = 0
        while True:
            try:
                await self._join()
                break
            except Exception:
                failures += 1
                await asyncio.sleep(min(5.0, 0.2 * failures))
        self.wake_all()

    def wake_all(self) -> None:
        """Set every socket's wake flag: each reads its queue once."""
        for events in list(self.sockets.values()):
            for event in events:
                event.set()

    async def refresh(self) -> None:
        """Join the group again and wake every socket. A Redis that
        restarts empty forgets the membership, and a receive need not fail
        for it: when the connection that breaks is only channels_redis's
        backup cleaner's, the next receive opens a new one to the new Redis
        and waits there, out of the group, and the doorbells rung meanwhile
        reach nobody; without this the events written after a restart
        would come only with the sweep."""
        await self._join()
        self.wake_all()

    def wake(self, clients: list[str]) -> int:
        """Set the wake flag of every socket of these clients (hex ids)."""
        woken = 0
        for hex_id in clients:
            for event in self.sockets.get(uuid.UUID(hex_id), ()):
                event.set()
                woken += 1
        return woken

    def push(self, message: dict[str, Any]) -> int:
        """Hand a push message's events (``queues.notify.ring_many``) to
        the sockets of its clients; each event's dict is made once, and
        shared (a frame built for one socket serves the others)."""
        events = {
            int(seq): queue_selectors.pushed_event(int(seq), fields)
            for seq, fields in message["events"].items()
        }
        woken = 0
        for hex_id, (head, seqs) in message["push"].items():
            flags = self.sockets.get(uuid.UUID(hex_id), ())
            if not flags:
                continue
            pushed = [events[seq] for seq in seqs]
            for flag in flags:
                if isinstance(flag, WakeFlag):
                    flag.push(head, pushed)
                else:
                    flag.set()
                woken += 1
        return woken

    def wake_message(self, data: bytes) -> int:
        """One message of the wake-up channel: a push (JSON) or the hex ids
        of the clients to wake."""
        if data[:1] == b"{":
            return self.push(json.loads(data))
        return self.wake(data.decode().split())

    def close(self, code: int, clients: list[str] | None = None) -> int:
        """Close this process's sockets of these clients (hex ids), or all
        of them when ``clients`` is None; their clients are gone unless
        all are closed (a node's shutdown keeps them)."""
        gone = clients is not None
        wanted = None if clients is None else {uuid.UUID(h) for h in clients}
        targets = [
            s
            for s in list(self.open)
            if wanted is None or any(s.holds(cid) for cid in wanted)
        ]
        for socket in targets:
            self.spawn(socket.close_from_hub(code, gone=gone))
        return len(targets)

    def cq_closed(self, name: str, clients: list[str]) -> int:
        """Tell this process's sockets of these clients (hex ids) that an
        operator closed their CQ ``name``."""
        wanted = {uuid.UUID(h) for h in clients}
        targets = [s for s in list(self.open) if any(s.holds(c) for c in wanted)]
        for socket in targets:
            socket.cq_closed_by_operator(name)
        return len(targets)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` on the hub's loop, keeping a reference until done."""
        assert self.loop is not None  # noqa: S101
        task = self.loop.create_task(coro)
        self.spawned.add(task)
        task.add_done_callback(self.spawned.discard)

    async def sweep(self) -> int:
        """Check every delivering socket once (see the module docstring);
        return how many were checked."""
        delivering: dict[uuid.UUID, list[HubSocket]] = defaultdict(list)
        for socket in list(self.open):
            if socket.woken_as is not None:
                delivering[socket.woken_as].append(socket)
        if not delivering:
            return 0
        checks = await database_sync_to_async(selectors.delivery_checks)(
            client_ids=list(delivering)
        )
        for client_id, (primary, head, holder) in checks.items():
            for socket in delivering[client_id]:
                if socket in self.open and socket.woken_as == client_id:
                    socket.swept(primary=primary, head=head, holder=holder)
        return sum(len(s) for s in delivering.values())

    async def reconcile(self) -> int:
        """Release the clients held by sockets of this process that are no
        longer open (see the module docstring); return how many."""
        held = await database_sync_to_async(selectors.sockets_holding)(tag=self.tag)
        # Read after the rows: a socket is attached before its hello can
        # mark a client connected, so a row of an open socket finds it here.
        open_ids = {socket.socket_id for socket in self.open}
        gone = [(cid, sid) for cid, sid in held if sid not in open_ids]
        if not gone:
            return 0
        released = await database_sync_to_async(services.clients_ended)(
            ended=[(cid, sid, True) for cid, sid in gone],
            why="its socket ended unreleased",
        )
        if released:
            log.warning("released %d clients whose sockets ended unreleased", released)
        return released

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        for task in self.tasks:
            task.cancel()
        self.loop, self.channel, self.joined = loop, None, False
        self.rejoining = None
        self.tasks = [
            loop.create_task(self._receive_loop()),
            loop.create_task(self._refresh_loop()),
            loop.create_task(self._sweep_loop()),
        ]
        if settings.DURABLECACHE_REDIS_URL:
            self.tasks.append(loop.create_task(self._wake_loop()))

    async def _join(self) -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        if self.channel is None:
            self.channel = await layer.new_channel()
        await layer.group_add(
            notify.wake_group(settings.DURABLECACHE_NODE_NAME), self.channel
        )
        self.joined = True

    async def _receive_loop(self) -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        failures = 0
        while True:
            try:
                if not self.joined:
                    await self._join()
                assert self.channel is not None  # noqa: S101
                message = await layer.receive(self.channel)
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception:
                failures += 1
                if failures == 1:
                    log.warning("channel layer unreachable; sockets poll meanwhile")
                    self.layer_failed()
                self.joined = False
                await asyncio.sleep(min(5.0, 0.2 * failures))
                continue
            kind = message.get("type")
            if kind == "queue.wakeup_many":
                self.wake(message.get("clients", []))
            elif kind == "sockets.close":
                self.close(int(message["code"]), message.get("clients"))
            elif kind == "sockets.cq_closed":
                self.cq_closed(str(message["name"]), message.get("clients", []))

    async def _wake_loop(self) -> None:
        """The fan-out's wake-ups, from this node's Redis pub/sub channel
        (``notify.wake_channel``): each message is the hex ids of the
        clients whose queue grew. After each (re)subscribe every socket is
        woken: wake-ups published while this process was not subscribed
        reached nobody."""
        failures = 0
        while True:
            _raise_if_cancelled()
            client = aioredis.Redis.from_url(
                settings.DURABLECACHE_REDIS_URL,
                socket_connect_timeout=5,
                health_check_interval=30,
            )
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(
                    notify.wake_channel(settings.DURABLECACHE_NODE_NAME)
                )
                if failures:
                    log.warning("wake-up channel back after %d tries", failures)
                failures = 0
                self.wake_all()
                while True:
                    message = await pubsub.get_message(timeout=WAKE_READ_S)
                    _raise_if_cancelled()
                    if message is not None:
                        trace.mark("woken", settings.DURABLECACHE_NODE_NAME)
                        self.wake_message(message["data"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                if failures == 1:
                    log.warning("wake-up channel unreachable (%s); sockets poll", exc)
                await asyncio.sleep(min(5.0, 0.2 * failures))
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
                    await client.aclose()

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(GROUP_REFRESH_S)
            with contextlib.suppress(Exception):
                await self.refresh()

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(settings.DURABLECACHE_POLL_S)
            try:
                await self.sweep()
                now = time.monotonic()
                if now - self.reconciled_at >= RECONCILE_S:
                    self.reconciled_at = now
                    await self.reconcile()
            except asyncio.CancelledError:
                raise
            except Exception:  # the next period tries again
                log.warning("delivery sweep failed", exc_info=True)

    def stop(self) -> None:
        for task in [*self.tasks, self.rejoining]:
            if task is not None:
                task.cancel()
        self.tasks, self.loop, self.rejoining = [], None, None

    def __repr__(self) -> str:
        return f"<WakeHub {len(self.open)} sockets, {len(self.sockets)} delivering>"


def _raise_if_cancelled() -> None:
    """redis-py's pub/sub read can swallow a cancellation that lands while
    it reads (seen with redis 8.2 at an event loop's shutdown: the task
    stayed "cancelling" in a read that never ended, and the loop's close
    waited for it forever). Reads are bounded by ``WAKE_READ_S``; after
    each, a cancellation asked for and not yet delivered is delivered."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


hub = WakeHub()
