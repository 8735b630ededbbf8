"""A socket's delivery once ``ready``: replay, the marker, then live rows.

docs/protocol.md. One task per delivering socket reads its rows in the
process's read rounds (sockets.delivery_rounds) and sends them as event
frames; between reads it waits on its wake flag, which the process's hub
sets (sockets.wakeups).
"""

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any, Protocol

from channels.db import database_sync_to_async as db
from daphne.ws_protocol import WebSocketProtocol
from django.conf import settings

from cache import counters
from clients import selectors, services
from common import trace
from sockets import delivery_rounds, protocol, registrations, wakeups, wire

log = logging.getLogger(__name__)

# Where an event dict of a read round keeps its frame text, once built.
_REPLAY_FRAME = "frame:replay"
_LIVE_FRAME = "frame:live"
# ... and the same as websocket frame bytes (sockets.wire).
_REPLAY_WIRE = "wire:replay"
_LIVE_WIRE = "wire:live"


class StreamSocket(Protocol):
    """What a stream needs of its socket (sockets.consumers)."""

    base_send: Any  # the server's ASGI send
    wire: WebSocketProtocol | None  # Daphne's socket, or None
    node: str

    async def send(self, text_data: str | None = None) -> None: ...

    async def close_with(self, code: int) -> None: ...


@contextlib.asynccontextmanager
async def held(stream: "Stream | None") -> AsyncIterator[None]:
    """Hold ``stream``'s delivery (if it runs) while the block runs: no
    batch is read or sent meanwhile (a CQ's registration and image)."""
    if stream is None:
        yield
        return
    async with stream.gate:
        yield


class Stream:
    """The delivery task of one socket, from ``ready`` to ``stop``."""

    __slots__ = (
        "client_id",
        "gate",
        "polled_head",
        "sent_through",
        "socket",
        "stopping",
        "task",
        "wake",
    )

    def __init__(
        self,
        socket: StreamSocket,
        client_id: uuid.UUID,
        head: int,
        resync: services.Resync | None = None,
    ) -> None:
        """Start delivering: the rows through ``head`` as replay, then live;
        after a gap (``resync``), the resync instead of the replay."""
        self.socket = socket
        self.client_id = client_id
        self.sent_through = 0
        # The queue head the hub's sweep last woke this stream for.
        self.polled_head = head
        self.wake = wakeups.WakeFlag()
        # Held around each batch's read and send; ``held`` holds it too.
        self.gate = asyncio.Lock()
        self.stopping = False
        wakeups.hub.add(client_id, self.wake)
        self.task: asyncio.Task[None] | None = asyncio.create_task(
            self._run(replay_through=head, resync=resync)
        )

    def poll(self, head: int) -> None:
        """The hub's sweep read the queue's head: wake if it grew since the
        last look (a doorbell may have been lost)."""
        if head > self.polled_head:
            self.polled_head = head
            self.wake.set()

    async def stop(self) -> None:
        """End the delivery task and stop being woken; idempotent."""
        wakeups.hub.discard(self.client_id, self.wake)
        if self.task is not None:
            # The flag ends the loop even if a cancel were lost.
            self.stopping = True
            self.wake.set()
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
            self.task = None

    async def _run(
        self, *, replay_through: int, resync: services.Resync | None = None
    ) -> None:
        """Replay what was queued before ``ready`` (after a gap: the
        ``gap`` frame and the resync), the marker, then live rows."""
        try:
            replayed = resynced = 0
            if resync is None:
                replayed = await self._replay(replay_through)
            else:
                resynced = await self._resync(resync)
            regions = await db(selectors.client_regions)(client_id=self.client_id)
            await self.socket.send(
                protocol.reply(
                    "marker",
                    None,
                    replayed=replayed,
                    resynced=resynced,
                    regions=regions,
                )
            )
            await self._live()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("delivery to %s failed; closing the socket", self.client_id)
            await self.socket.close_with(1011)

    async def _resync(self, resync: services.Resync) -> int:
        """The ``gap`` frame, then the resync's images; return how many
        entries and markers they held. The rows queued since the resync
        began (above its floor) follow the marker as live events."""
        async with self.gate:
            await self.socket.send(protocol.reply("gap", None, **resync.gap))
            sent = await registrations.send_resync(self.socket.send, resync)
            self.sent_through = resync.floor
        counters.counter.add(self.socket.node, sent, counters.RESYNCED_ENTRIES)
        return sent

    async def _replay(self, through: int) -> int:
        """Send the rows through ``through``; return how many."""
        batch, replayed = settings.DURABLECACHE_REPLAY_BATCH, 0
        while True:
            async with self.gate:
                rows = await self._next_batch(batch, through=through)
                if not rows:
                    return replayed
                await self._send_rows(rows, replay=True)
            replayed += len(rows)

    def write_pushed(self, head: int, events: list[dict[str, Any]]) -> int:
        """Write pushed events straight to the socket, from the hub's turn
        of the loop, while the delivery task waits with nothing to do
        (``wakeups.WakeFlag.push``): only when they follow what was sent
        (``head``), no batch is held (``held``) and each frame may go to
        Daphne's socket directly (``wire.writable``). Return how many were
        written, in order; the task takes the rest as a push. Waking the
        task instead costs a task switch per socket and event
        (docs/decisions/0031-the-live-paths-cost-per-event.md)."""
        sock = self.socket.wire
        if self.stopping or sock is None or head != self.sent_through:
            return 0
        if self.gate.locked():
            return 0
        frames: list[bytes] = []
        for event in events:
            data = _wire_bytes(event, replay=False)
            if not wire.writable(sock, len(data)):
                break
            frames.append(data)
        if not frames:
            return 0
        _send_frames(sock, frames)
        written = len(frames)
        self.sent_through = events[written - 1]["seq"]
        node = self.socket.node
        first, last = events[0]["seq"], self.sent_through
        trace.mark("read", node, first, last)
        counters.counter.add(node, written)
        trace.mark("written", node, first, last)
        return written

    async def _live(self) -> None:
        self.wake.direct = self.write_pushed
        try:
            await self._live_rows()
        finally:
            self.wake.direct = None

    async def _live_rows(self) -> None:
        batch = settings.DURABLECACHE_REPLAY_BATCH
        read = True  # the first look reads what came during the replay
        while not self.stopping:
            self.wake.clear()
            rows: list[Any] = []
            async with self.gate:
                # Pushed events that follow what was sent are the queue's
                # next rows (sockets.wakeups.WakeFlag.take): sent without
                # a read. Any other wake reads the queue.
                pushed, must_read = self.wake.take(self.sent_through)
                if pushed:
                    trace.mark(
                        "read", self.socket.node, pushed[0]["seq"], pushed[-1]["seq"]
                    )
                    await self._send_rows(pushed, replay=False)
                if read or must_read:
                    rows = await self._next_batch(batch)
                    if rows:
                        await self._send_rows(rows, replay=False)
            read = len(rows) >= batch
            if read:
                continue  # maybe more: read on at once
            # A short batch is everything committed when it was read: what
            # commits later rings after its commit, so after the clear
            # above, and the wait returns at once. A read again before the
            # wait would almost always find nothing. No timeout: the hub's
            # sweep wakes a socket whose doorbell is lost and closes one
            # whose client is gone or moved.
            await self.wake.wait()

    async def _send_rows(self, rows: list[Any], *, replay: bool) -> None:
        # Straight to the server's send: Channels' two wrappers around it
        # are two more coroutine calls per event frame.
        send: Any = self.socket.base_send
        # The sockets of one read round get the same dict for the same
        # event (sockets.delivery_rounds), and the frame is the same text
        # for all of them (seq is the log's): the first to send it builds
        # it, once (docs/decisions/0009-prebuilt-event-frames.md).
        sock = self.socket.wire
        # Frames that go to Daphne's socket directly, written together when
        # a frame must go through Channels' send or at the end: nothing
        # yields in between, so no ack can come for a frame not yet written.
        frames: list[bytes] = []
        for event in rows:
            direct = False
            if sock is not None:
                data = _wire_bytes(event, replay=replay)
                if direct := wire.writable(sock, len(data)):
                    frames.append(data)
            if not direct:
                if frames:
                    _send_frames(sock, frames)
                    frames = []
                text = _frame_text(event, replay=replay)
                await send({"type": "websocket.send", "text": text})
            # Per row: a send may yield, and an ack of a row already sent
            # must not be taken for an ack beyond what was sent.
            self.sent_through = event["seq"]
        if frames:
            _send_frames(sock, frames)
        counters.counter.add(self.socket.node, len(rows))
        trace.mark("written", self.socket.node, rows[0]["seq"], rows[-1]["seq"])

    async def _next_batch(self, limit: int, through: int | None = None) -> list[Any]:
        """Rows after what was sent; those that may conflate are marked
        delivered in the same trip (sockets.delivery_rounds)."""
        return await delivery_rounds.batcher().next_batch(
            client_id=self.client_id,
            sent_through=self.sent_through,
            limit=limit,
            through=through,
        )


def _send_frames(sock: Any, frames: list[bytes]) -> None:
    """Write whole frames to Daphne's socket in one write (autobahn's, in
    order with its queue): frames written one by one in a turn of the loop
    go out as one send on the next turn, registered for writability and
    unregistered again, where one write goes out at once
    (durablecache.server.twisted_eager_writes)."""
    sock.sendData(frames[0] if len(frames) == 1 else b"".join(frames))


def _wire_bytes(event: dict[str, Any], *, replay: bool) -> bytes:
    """The event's frame as websocket frame bytes, header and all, built
    once per event for every socket that writes it straight to Daphne's
    socket (sockets.wire), from its frame text, itself built once
    (docs/decisions/0009-prebuilt-event-frames.md)."""
    wired = _REPLAY_WIRE if replay else _LIVE_WIRE
    data = event.get(wired)
    if data is None:
        data = event[wired] = wire.text_frame(_frame_text(event, replay=replay))
    return data


def _frame_text(event: dict[str, Any], *, replay: bool) -> str:
    """The event's frame text, built by the first socket to send it."""
    cached = _REPLAY_FRAME if replay else _LIVE_FRAME
    text = event.get(cached)
    if text is None:
        text = event[cached] = protocol.event_frame(event, replay=replay)
    return text
