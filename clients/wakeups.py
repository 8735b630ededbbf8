"""Fan-out wake-ups for the sockets of one Daphne process.

The fan-out of a node sends one channel-layer message per batch to the
group ``wake.<node>`` naming every client whose queue grew
(``queues.notify.ring_many``); each Daphne process of the node is one member
of that group and wakes its own sockets in memory. Per batch, that is one
Redis send and one receive per process instead of one of each per socket:
an event for 100 live sockets cost 100 ``group_send`` calls before.

Surviving Redis: channels_redis reads a process's channels with one
receive at a time, so when Redis restarts only the receiver that was
reading sees the error. Whoever sees it (this hub or a socket) calls
``layer_failed``: the hub joins its group again and then wakes every socket
(events written meanwhile rang nobody), and every socket's refresher joins
its own groups again. Memberships are also refreshed every
``GROUP_REFRESH_S``. A wake-up lost anyway only delays delivery until the
socket's poll (``DURABLECACHE_POLL_S``).
"""

import asyncio
import contextlib
import logging
import uuid
from collections import defaultdict

from channels.layers import get_channel_layer
from django.conf import settings

from queues import notify

log = logging.getLogger(__name__)

GROUP_REFRESH_S = 30.0


class WakeHub:
    """The wake events of this process's delivering sockets, by client."""

    def __init__(self) -> None:
        self.sockets: dict[uuid.UUID, set[asyncio.Event]] = defaultdict(set)
        self.tasks: list[asyncio.Task[None]] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.channel: str | None = None
        self.joined = False
        self.failed = asyncio.Event()
        self.rejoining: asyncio.Task[None] | None = None

    def _ensure_started(self) -> None:
        loop = asyncio.get_running_loop()
        if self.loop is not loop or any(t.done() for t in self.tasks):
            self._start(loop)

    def add(self, client_id: uuid.UUID, wake: asyncio.Event) -> None:
        """Wake ``wake`` whenever this node's fan-out grows the queue."""
        self.sockets[client_id].add(wake)
        self._ensure_started()

    def failure_event(self) -> asyncio.Event:
        """Set the next time a receiver of this process sees the layer fail."""
        self._ensure_started()
        return self.failed

    def layer_failed(self) -> None:
        """A receiver of this process saw the channel layer fail: tell every
        socket's refresher, join again and then wake every socket."""
        self._ensure_started()
        failed, self.failed = self.failed, asyncio.Event()
        failed.set()
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
        for events in list(self.sockets.values()):
            for event in events:
                event.set()

    def discard(self, client_id: uuid.UUID, wake: asyncio.Event) -> None:
        events = self.sockets.get(client_id)
        if events is not None:
            events.discard(wake)
            if not events:
                del self.sockets[client_id]

    def wake(self, clients: list[str]) -> int:
        """Set the wake event of every socket of these clients (hex ids)."""
        woken = 0
        for hex_id in clients:
            for event in self.sockets.get(uuid.UUID(hex_id), ()):
                event.set()
                woken += 1
        return woken

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        for task in self.tasks:
            task.cancel()
        self.loop, self.channel, self.joined = loop, None, False
        self.failed, self.rejoining = asyncio.Event(), None
        self.tasks = [
            loop.create_task(self._receive_loop()),
            loop.create_task(self._refresh_loop()),
        ]

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
            if message.get("type") == "queue.wakeup_many":
                self.wake(message.get("clients", []))

    async def _refresh_loop(self) -> None:
        """channels_redis drops a member after ``group_expiry``, and a Redis
        that restarted empty forgets it without a receive failing."""
        while True:
            await asyncio.sleep(GROUP_REFRESH_S)
            with contextlib.suppress(Exception):
                await self._join()

    def stop(self) -> None:
        for task in [*self.tasks, self.rejoining]:
            if task is not None:
                task.cancel()
        self.tasks, self.loop, self.rejoining = [], None, None

    def __repr__(self) -> str:
        return f"<WakeHub {len(self.sockets)} clients>"


hub = WakeHub()
