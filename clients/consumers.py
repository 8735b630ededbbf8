"""The websocket door: ``/ws/v1/subscribe`` (docs/protocol.md).

Transport only: frames are parsed by ``clients.protocol`` and every decision
is a service or selector call. One asyncio task per socket delivers queued
rows once ``ready``. A socket has no channel-layer channel: the process's
``WakeHub`` (clients.wakeups) wakes it when the node's fan-out grew its
queue, closes it for an operator or a node shutdown, and sweeps every
delivering socket each ``DURABLECACHE_POLL_S`` (lost doorbells, a client
gone or moved to another primary).
"""

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async as db
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from clients import (
    protocol,
    reads,
    replication,
    selectors,
    services,
    stats,
    wakeups,
    wire,
    writes,
)
from clients.exceptions import ClientConnectedError, ClientOwnedError
from clients.matching import parse_bool, parse_policy, parse_selector
from durablecache.cache.exceptions import DomainError, ValidationError
from queues import selectors as queue_selectors

log = logging.getLogger(__name__)

IMAGE_CHUNK = 500
MAX_BAD_FRAMES = 10
CLOSE_PROTOCOL = 4400
CLOSE_UNAUTHORIZED = 4401
CLOSE_TOO_LARGE = 4413
CLOSE_SHUTDOWN = 4503
# Where an event dict of a read round keeps its frame text, once built.
_REPLAY_FRAME = "frame:replay"
_LIVE_FRAME = "frame:live"
# ... and the same as websocket frame bytes (clients.wire).
_REPLAY_WIRE = "wire:replay"
_LIVE_WIRE = "wire:live"
# The releases a socket's end must finish even if its instance is killed
# first: Daphne cancels an instance still running --application-close-timeout
# after its socket closed, and again every second until it ends (a storm of
# disconnects queued behind the database thread). Held here until done.
_detached: set[asyncio.Future[Any]] = set()


def _detach(coro: Any) -> asyncio.Future[Any]:
    """Run ``coro`` on its own task, which no cancel of the caller reaches."""
    task = asyncio.ensure_future(coro)
    _detached.add(task)
    task.add_done_callback(_detach_done)
    return task


def _detach_done(task: asyncio.Future[Any]) -> None:
    _detached.discard(task)
    if not task.cancelled():
        # Seen here if no one awaits it any more (the instance was killed):
        # a failed release is retried by the hub's reconcile.
        task.exception()


async def _release(client_id: uuid.UUID, socket_id: str) -> None:
    try:
        await reads.batcher().release(client_id=client_id, socket_id=socket_id)
    except Exception:
        log.warning(
            "releasing client %s failed; the hub's reconcile retries",
            client_id,
            exc_info=True,
        )


async def _release_late(hello: asyncio.Future[Any], socket_id: str) -> None:
    """Release what a hello did after its socket's instance was killed."""
    with contextlib.suppress(Exception):
        result = await hello
        if result.client is not None:
            await _release(result.client.id, socket_id)


@dataclass(frozen=True, slots=True)
class HeldClient:
    """What a socket keeps of its client: a model instance is ~1 KiB per
    socket, and services load the row when they need more."""

    id: uuid.UUID
    is_durable: bool


class SubscriptionConsumer(AsyncWebsocketConsumer):
    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Handle the socket's messages one at a time, without a channel.

        Channels' own loop would give the socket a channel-layer channel,
        a receive task and group memberships to refresh (~13 KiB each);
        what came through them now comes through the hub, whose closes take
        ``self.turn`` like the socket's own frames, so a close never runs in
        the middle of a frame's handler.
        """
        self.scope = scope
        self.base_send = send
        # Daphne's socket, for event frames as ready-made bytes (or None).
        self.wire = wire.daphne_socket(send)
        # What services record as the socket holding a client: unique in
        # the cluster (a late disconnect of an older socket changes nothing).
        self.socket_id = wakeups.hub.new_socket_id()
        self.turn = asyncio.Lock()
        # Made at the first put: its deques and event are ~2 KiB, which an
        # idle socket (most of them) would carry for nothing.
        self.puts: writes.PutPipeline | None = None
        self.client: Any = None  # a HeldClient once hello succeeded
        self.woken_as: uuid.UUID | None = None  # the client it delivers for
        self.is_closing = False
        self.has_ended = False
        wakeups.hub.attach(self)
        try:
            with contextlib.suppress(StopConsumer):
                while True:
                    message = await receive()
                    async with self.turn:
                        await self.dispatch(message)
        finally:
            wakeups.hub.detach(self)
            # A handler that raised (the database failing, say) ends the
            # socket without a websocket.disconnect: release the client all
            # the same, or its durable id would answer 4409 until the node
            # restarts.
            if self.client is not None:
                with contextlib.suppress(Exception):
                    await self.disconnect(1011)

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Channels' dispatch, without its ``close_old_connections`` hop per
        message: a thread hop for every ``ack`` frame, queued behind the
        socket's database calls. Every database call here goes through
        ``database_sync_to_async``, which closes old connections itself."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"no handler for message type {message['type']}")
        await handler(message)

    async def connect(self) -> None:
        self.node = settings.DURABLECACHE_NODE_NAME
        self.is_ready = False
        self.sent_through = 0
        # The queue head the hub's sweep last woke this socket for.
        self.polled_head = 0
        self.bad_frames = 0
        self.wake = wakeups.Doorbell()
        self.delivery: asyncio.Task[None] | None = None
        self.delivery_stopping = False
        await self.accept()
        if self.scope.get("user") is None:
            await self._close(CLOSE_UNAUTHORIZED)

    async def send(  # type: ignore[override]  # as Channels' own
        self,
        text_data: str | None = None,
        bytes_data: bytes | None = None,
        close: bool = False,
    ) -> None:
        """A reply frame (``written``, ``ok``, ``error``...) straight to
        Daphne's socket when it can take it (clients.wire), as event frames
        go; otherwise, and for anything else, through ASGI."""
        sock = self.wire
        # Daphne sends no frame for empty text; neither does this.
        if sock is not None and text_data and not close:
            data = wire.text_frame(text_data)
            if wire.writable(sock, len(data)):
                sock.sendData(data)
                return
        await super().send(text_data, bytes_data, close)

    async def _close(self, code: int) -> None:
        self.is_closing = True
        await self.close(code=code)

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None
    ) -> None:
        if self.is_closing:
            return
        size = protocol.frame_size(text_data, bytes_data)
        if size > settings.DURABLECACHE_MAX_FRAME_BYTES:
            await self._close(CLOSE_TOO_LARGE)
            return
        req_id, frame_type = None, None
        try:
            if bytes_data is not None:
                raise protocol.BadJsonError(
                    "binary frames are not accepted",
                    req_id=protocol.binary_frame_id(bytes_data),
                )
            frame, req_id, needs_check = protocol.parse_frame(text_data or "")
            frame_type = frame.get("type")
            protocol.check_type(frame)
            if self.client is None and frame_type != "hello":
                raise ValidationError("the first frame must be hello")
            if needs_check:
                protocol.check_fields(frame)
            if frame_type != "put" and self.puts is not None:
                await self.puts.drained()  # answered after every earlier put
            await getattr(self, f"on_{frame_type}")(frame, req_id)
            self.bad_frames = 0
        except DomainError as exc:
            if isinstance(exc, protocol.BadJsonError) and exc.req_id is not None:
                req_id = exc.req_id  # read from a frame the parser refused
            # A hello with a bad field is a bad frame like any other; only a
            # first frame that is not a hello at all is fatal at once.
            fatal = self.client is None and frame_type != "hello"
            if self.puts is not None:
                await self.puts.drained()
            await self._bad_frame(req_id, exc.code, exc.message, fatal=fatal)

    async def _bad_frame(
        self, req_id: str | None, code: str, message: str, *, fatal: bool
    ) -> None:
        self.bad_frames += 1
        await self.send(protocol.error(req_id, code, message))
        if fatal or self.bad_frames >= MAX_BAD_FRAMES:
            await self._close(CLOSE_PROTOCOL)

    async def on_hello(self, frame: dict[str, Any], req_id: str | None) -> None:
        if self.client is not None:
            raise ValidationError("hello was already sent")
        options = services.parse_hello_options(frame)
        hello = _detach(
            db(services.client_hello)(
                user=self.scope["user"], channel_name=self.socket_id, options=options
            )
        )
        try:
            result = await asyncio.shield(hello)
        except asyncio.CancelledError:
            # Killed: the hello may still connect the client; undo it then.
            _detach(_release_late(hello, self.socket_id))
            raise
        except (ClientOwnedError, ClientConnectedError) as exc:
            await self._close(exc.close_code)
            return
        if result.redirect_url:
            await self.send(protocol.reply("redirect", req_id, url=result.redirect_url))
            await self._close(1000)
            return
        client = result.client
        assert client is not None  # noqa: S101
        self.client = HeldClient(client.id, client.is_durable)
        # Not needed after a hello: a User instance is ~0.5 KiB per socket.
        self.scope.pop("user", None)
        welcome = await db(selectors.welcome_fields)(client=client)
        await self.send(
            protocol.reply(
                "welcome", req_id, pending_events=result.pending_events, **welcome
            )
        )

    async def on_register_interest(
        self, frame: dict[str, Any], req_id: str | None
    ) -> None:
        region = protocol.required_str(frame, "region")
        selector = parse_selector(frame)
        is_durable = parse_bool(frame.get("durable"), field="durable")
        policy = parse_policy(frame.get("policy"))
        await db(services.interest_register_for)(
            client_id=self.client.id,
            region=region,
            selector=selector,
            is_durable=is_durable,
            policy=policy,
        )
        count = await self._send_image(req_id, region, selector, policy)
        await self.send(protocol.reply("interest_registered", req_id, count=count))

    async def _send_image(
        self, req_id: str | None, region: str, selector: Any, policy: str
    ) -> int:
        field = "keys" if policy == "keys" else "entries"
        count, after = 0, None
        while True:
            items, after = await db(selectors.image_page)(
                region=region,
                selector=selector,
                policy=policy,
                after=after,
                size=IMAGE_CHUNK,
            )
            if items:
                count += len(items)
                await self.send(
                    protocol.reply("image", req_id, region=region, **{field: items})
                )
            if after is None:
                break
        return count

    async def on_unregister_interest(
        self, frame: dict[str, Any], req_id: str | None
    ) -> None:
        region = protocol.required_str(frame, "region")
        selector = parse_selector(frame)
        await db(services.interest_unregister_for)(
            client_id=self.client.id, region=region, selector=selector
        )
        await self.send(protocol.reply("interest_unregistered", req_id))

    async def on_register_cq(self, frame: dict[str, Any], req_id: str | None) -> None:
        raise protocol.BadQueryError("continuous queries are not supported yet")

    async def on_close_cq(self, frame: dict[str, Any], req_id: str | None) -> None:
        raise protocol.BadQueryError("continuous queries are not supported yet")

    async def on_ready(self, frame: dict[str, Any], req_id: str | None) -> None:
        if self.is_ready:
            raise ValidationError("ready was already sent")
        self.is_ready = True
        head = await db(queue_selectors.queue_head)(client_id=self.client.id)
        self.polled_head = head
        self.woken_as = self.client.id
        wakeups.hub.add(self.woken_as, self.wake)
        self.delivery = asyncio.create_task(self._deliver(replay_through=head))

    async def on_ack(self, frame: dict[str, Any], req_id: str | None) -> None:
        if not self.is_ready:
            raise protocol.NotReadyError("ack before ready")
        up_to = frame.get("up_to")
        if isinstance(up_to, bool) or not isinstance(up_to, int) or up_to < 0:
            raise ValidationError("up_to must be a non-negative integer seq")
        if up_to > self.sent_through:
            raise ValidationError(f"up_to {up_to} is beyond the last seq sent")
        await reads.batcher().ack(client_id=self.client.id, up_to=up_to)
        if self.client.is_durable:
            replication.ack_relay.add(self.client.id, up_to)

    async def on_put(self, frame: dict[str, Any], req_id: str | None) -> None:
        """Create or update one key, as ``PUT .../entries/{key}/`` does;
        answered once the event is durable, the socket's next frame handled
        meanwhile (clients.writes)."""
        region = protocol.required_str(frame, "region")
        key = protocol.required_str(frame, "key")
        if "value" not in frame:
            raise ValidationError("value is required (null is a value)")
        if self.puts is None:
            self.puts = writes.PutPipeline(self._answer_put, self._puts_failed)
        await self.puts.put(req_id, region=region, key=key, value=frame["value"])

    async def _answer_put(self, req_id: str | None, region: str, result: Any) -> None:
        if self.is_closing:
            return
        if isinstance(result, DomainError):
            await self._bad_frame(req_id, result.code, result.message, fatal=False)
            return
        await self.send(
            protocol.reply(
                "written",
                req_id,
                region=region,
                key=result.key,
                op=result.op,
                version=result.version,
                event_id=result.event_id,
            )
        )

    async def _puts_failed(self, exc: Exception) -> None:
        """A write round failed (the database, say): the socket ends as
        one whose handler raised does; its client reconnects."""
        log.error("a write round failed; closing the socket", exc_info=exc)
        if not self.is_closing:
            await self._close(1011)

    async def on_close(self, frame: dict[str, Any], req_id: str | None) -> None:
        keepalive = parse_bool(frame.get("keepalive"), field="keepalive")
        self.is_closing = True
        await self._stop_delivery()
        # Done even if the instance is killed meanwhile (see ``_detached``).
        await asyncio.shield(
            _detach(
                reads.batcher().release(
                    client_id=self.client.id, socket_id=self.socket_id, keep=keepalive
                )
            )
        )
        self.client = None
        await self.send(protocol.reply("closed", req_id, keepalive=keepalive))
        await self.close(code=1000)

    async def _deliver(self, *, replay_through: int) -> None:
        """Replay what was queued before ``ready``, the marker, then live rows."""
        client_id, batch = self.client.id, settings.DURABLECACHE_REPLAY_BATCH
        replayed = 0
        try:
            while True:
                rows = await self._next_batch(batch, through=replay_through)
                if not rows:
                    break
                await self._send_rows(rows, replay=True)
                replayed += len(rows)
            regions = await db(selectors.client_regions)(client_id=client_id)
            await self.send(
                protocol.reply("marker", None, replayed=replayed, regions=regions)
            )
            while not self.delivery_stopping:
                self.wake.clear()
                rows = await self._next_batch(batch)
                if rows:
                    await self._send_rows(rows, replay=False)
                    if len(rows) >= batch:
                        continue  # maybe more: read on at once
                # A short batch was everything committed when it was read:
                # what commits later rings after its commit, so after the
                # clear above, and the wait returns at once. (Reading again
                # first found nothing almost always: half of the live
                # reads.) No timeout: the hub's sweep wakes a socket whose
                # doorbell was lost and closes one whose client is gone or
                # moved.
                await self.wake.wait()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("delivery to %s failed; closing the socket", client_id)
            await self._close(1011)

    def holds(self, client_id: uuid.UUID) -> bool:
        return self.client is not None and self.client.id == client_id

    def swept(self, *, primary: str | None, head: int, holder: str) -> None:
        """The hub's periodic look at this socket's client (clients.wakeups).

        Gone (an operator closed the client while its close was lost):
        4410. Moved to another primary (this node was taken for dead, or
        handed the queue over): 4503, so the client reconnects there. No
        longer marked held by this socket (a node that took this one for
        dead released it: its durable timeout runs, and would expire a
        client still connected here): 4503, so its ``hello`` attaches it
        again. Its queue grew since the last look: wake (a doorbell may
        have been lost).
        """
        if self.is_closing:
            return
        if primary is None:
            wakeups.hub.spawn(
                self.close_from_hub(services.CLOSE_BY_OPERATOR, gone=True)
            )
        elif primary != self.node or holder != self.socket_id:
            wakeups.hub.spawn(self.close_from_hub(CLOSE_SHUTDOWN, gone=False))
        elif head > self.polled_head:
            self.polled_head = head
            self.wake.set()

    async def _send_rows(self, rows: list[Any], *, replay: bool) -> None:
        # Straight to the server's send: Channels' two wrappers around it
        # are two more coroutine calls per event frame.
        send: Any = self.base_send
        frame = protocol.event_frame
        # The sockets of one read round get the same dict for the same event
        # (clients.reads), and the frame is the same bytes for all of them
        # (seq is the log's): the first to send it builds it, once.
        cached = _REPLAY_FRAME if replay else _LIVE_FRAME
        # And the websocket frame, header and all, once for all of them:
        # written straight to Daphne's socket when nothing would differ.
        wired = _REPLAY_WIRE if replay else _LIVE_WIRE
        sock = self.wire
        for event in rows:
            text = event.get(cached)
            if text is None:
                text = event[cached] = frame(event, replay=replay)
            direct = False
            if sock is not None:
                data = event.get(wired)
                if data is None:
                    data = event[wired] = wire.text_frame(text)
                if direct := wire.writable(sock, len(data)):
                    sock.sendData(data)  # autobahn's write, in order with its queue
            if not direct:
                await send({"type": "websocket.send", "text": text})
            # Per row: a send may yield, and an ack of a row already sent
            # must not be taken for an ack beyond what was sent.
            self.sent_through = event["seq"]
        stats.delivered.add(self.node, len(rows))

    async def _next_batch(self, limit: int, through: int | None = None) -> list[Any]:
        """Rows after what was sent; those that may conflate are marked
        delivered in the same trip (clients.reads)."""
        return await reads.batcher().next_batch(
            client_id=self.client.id,
            sent_through=self.sent_through,
            limit=limit,
            through=through,
        )

    async def _stop_delivery(self) -> None:
        if self.woken_as is not None:
            wakeups.hub.discard(self.woken_as, self.wake)
            self.woken_as = None
        if self.delivery is not None:
            # The flag ends the loop even if a cancel were lost.
            self.delivery_stopping = True
            self.wake.set()
            self.delivery.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.delivery
            self.delivery = None

    async def close_from_hub(self, code: int, *, gone: bool) -> None:
        """Close for an operator or a node shutdown, or after the sweep;
        ``gone``: the client row is gone, nothing to keep."""
        async with self.turn:
            if self.is_closing or self.has_ended:
                return
            await self._stop_delivery()
            if gone:
                self.client = None
            await self._close(code)

    async def disconnect(self, code: int) -> None:
        self.has_ended = True
        if self.puts is not None:
            self.puts.cancel()
        await self._stop_delivery()
        if self.client is not None:
            client_id, self.client = self.client.id, None
            await asyncio.shield(_detach(_release(client_id, self.socket_id)))
