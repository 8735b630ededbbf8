"""The websocket door: ``/ws/v1/subscribe`` (docs/protocol.md).

Transport only: frames are parsed by ``clients.protocol`` and every decision
is a service or selector call. One asyncio task per socket delivers queued
rows; the node's fan-out wakes it through the process's ``WakeHub`` (and a
poll heals lost wakeups); the channel layer group ``queue.<id>`` carries an
operator close, ``node.<name>`` a shutdown.
"""

import asyncio
import contextlib
import logging
import time
from typing import Any

from channels.db import database_sync_to_async as db
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from channels.utils import await_many_dispatch
from django.conf import settings

from clients import (
    protocol,
    reads,
    replication,
    selectors,
    services,
    stats,
    wakeups,
)
from clients.exceptions import ClientConnectedError, ClientOwnedError
from clients.matching import parse_bool, parse_policy, parse_selector
from durablecache.cache.exceptions import DomainError, ValidationError
from queues import notify
from queues import selectors as queue_selectors

log = logging.getLogger(__name__)

IMAGE_CHUNK = 500
MAX_BAD_FRAMES = 10
CLOSE_PROTOCOL = 4400
CLOSE_UNAUTHORIZED = 4401
CLOSE_TOO_LARGE = 4413
CLOSE_SHUTDOWN = 4503
# Re-join the groups this often: channels_redis drops members after
# group_expiry, and a Redis that restarted empty between two receives forgets
# them without the receive ever failing (seen in CI: doorbells stopped).
GROUP_REFRESH_S = 30.0
# A socket streaming without pause still checks its client's placement.
PLACEMENT_CHECK_S = 5.0


class SubscriptionConsumer(AsyncWebsocketConsumer):
    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Run the consumer with a channel-layer receive that survives Redis.

        Channels' own loop dies with the socket when the layer's receive
        raises (Redis restarted or unreachable), and then ``disconnect``
        never runs. The layer carries doorbells only, so keep the socket,
        retry, re-join the groups (a restarted Redis forgot them) and let
        the delivery poll carry events meanwhile.
        """
        self.scope = scope
        layer = get_channel_layer(self.channel_layer_alias)
        assert layer is not None, "durablecache needs a channel layer"  # noqa: S101
        self.channel_layer = layer
        self.channel_name = await self.channel_layer.new_channel()
        self.groups_joined: set[str] = set()
        self.membership_stale = False
        self.base_send = send
        try:
            with contextlib.suppress(StopConsumer):
                await await_many_dispatch(
                    [receive, self._channel_receive],  # type: ignore[list-item]
                    self.dispatch,
                )
        finally:
            # A handler that raised (the database failing, say) ends the
            # socket without a websocket.disconnect: release the client all
            # the same, or its durable id would answer 4409 until the node
            # restarts.
            if getattr(self, "client", None) is not None:
                with contextlib.suppress(Exception):
                    await self.disconnect(1011)

    async def _channel_receive(self) -> dict[str, Any]:
        failures = 0
        while True:
            try:
                if self.membership_stale:
                    # A Redis that restarted empty forgot the groups: join
                    # again before waiting, or no doorbell would ever come.
                    await self._join_all()
                return await self.channel_layer.receive(self.channel_name)
            except asyncio.CancelledError:
                raise
            except Exception:
                self.membership_stale = True
                failures += 1
                if failures == 1:
                    log.warning("channel layer unreachable; polling meanwhile")
                    # The other receivers of this process may not see it.
                    wakeups.hub.layer_failed()
                await asyncio.sleep(min(5.0, 0.2 * failures))

    async def _join_all(self) -> None:
        for group in list(self.groups_joined):
            await self.channel_layer.group_add(group, self.channel_name)
        self.membership_stale = False

    async def _refresh_membership(self) -> None:
        """Re-join the groups now and then (channels_redis drops a member
        after ``group_expiry`` and a socket may live longer than that), and
        at once when another receiver of this process saw the layer fail
        (only the one reading at that moment does)."""
        while True:
            failed = False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(GROUP_REFRESH_S):
                    await wakeups.hub.failure_event().wait()
                    failed = True
            while True:
                try:
                    await self._join_all()
                    break
                except Exception:
                    self.membership_stale = True
                    if not failed:
                        break  # the receive loop retries
                    await asyncio.sleep(1.0)

    async def connect(self) -> None:
        self.client: Any = None
        self.node = settings.DURABLECACHE_NODE_NAME
        self.is_ready = False
        self.is_closing = False
        self.sent_through = 0
        # What the read batcher has recorded of sent_through (clients.reads).
        self.marked_through = 0
        self.bad_frames = 0
        self.wake = asyncio.Event()
        self.woken_as: Any = None  # the client id this socket is woken for
        self.delivery: asyncio.Task[None] | None = None
        self.delivery_stopping = False
        await self.accept()
        if self.scope.get("user") is None:
            await self._close(CLOSE_UNAUTHORIZED)
            return
        await self._join(notify.node_group(self.node))
        self.refresher = asyncio.create_task(self._refresh_membership())

    async def _join(self, group: str) -> None:
        self.groups_joined.add(group)
        try:
            await self.channel_layer.group_add(group, self.channel_name)
        except Exception:  # doorbells only: polling delivers meanwhile
            self.membership_stale = True

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
                raise protocol.BadJsonError("binary frames are not accepted")
            frame, req_id = protocol.parse_frame(text_data or "")
            frame_type = frame.get("type")
            protocol.check_type(frame)
            if self.client is None and frame_type != "hello":
                raise ValidationError("the first frame must be hello")
            await getattr(self, f"on_{frame_type}")(frame, req_id)
            self.bad_frames = 0
        except DomainError as exc:
            # A hello with a bad field is a bad frame like any other; only a
            # first frame that is not a hello at all is fatal at once.
            fatal = self.client is None and frame_type != "hello"
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
        try:
            result = await db(services.client_hello)(
                user=self.scope["user"],
                channel_name=self.channel_name,
                options=options,
            )
        except (ClientOwnedError, ClientConnectedError) as exc:
            await self._close(exc.close_code)
            return
        if result.redirect_url:
            await self.send(protocol.reply("redirect", req_id, url=result.redirect_url))
            await self._close(1000)
            return
        self.client = result.client
        await self._join(notify.group_for(self.client.id))
        welcome = await db(selectors.welcome_fields)(client=self.client)
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
        await db(services.interest_register)(
            client=self.client,
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
        await db(services.interest_unregister_checked)(
            client=self.client, region=region, selector=selector
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

    async def on_close(self, frame: dict[str, Any], req_id: str | None) -> None:
        keepalive = parse_bool(frame.get("keepalive"), field="keepalive")
        self.is_closing = True
        await self._stop_delivery()
        await db(services.client_close)(
            client_id=self.client.id,
            channel_name=self.channel_name,
            keepalive=keepalive,
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
            next_check = time.monotonic() + PLACEMENT_CHECK_S
            while not self.delivery_stopping:
                self.wake.clear()
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + PLACEMENT_CHECK_S
                    if not await self._still_served_here(client_id):
                        return
                rows = await self._next_batch(batch)
                if rows:
                    await self._send_rows(rows, replay=False)
                    continue
                try:
                    # asyncio.timeout, not wait_for: on Python 3.11 wait_for
                    # can swallow a cancel that races a wake-up, and then
                    # _stop_delivery waited forever (seen under load).
                    async with asyncio.timeout(settings.DURABLECACHE_POLL_S):
                        await self.wake.wait()
                except TimeoutError:
                    # Quiet for a poll period: check now (a doorbell of an
                    # operator close may have been lost).
                    next_check = 0.0
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("delivery to %s failed; closing the socket", client_id)
            await self._close(1011)

    async def _still_served_here(self, client_id: Any) -> bool:
        """Whether this socket may go on delivering; if not, close it.

        Gone (an operator closed the client while its doorbell was lost):
        4410. Moved to another primary (this node was taken for dead, or
        handed the queue over): 4503, so the client reconnects there.
        """
        primary = await db(selectors.client_primary)(client_id=client_id)
        if primary is None:
            await self._closed_by_operator(services.CLOSE_BY_OPERATOR)
            return False
        if primary != self.node:
            await self._close(CLOSE_SHUTDOWN)
            return False
        return True

    async def _send_rows(self, rows: list[Any], *, replay: bool) -> None:
        for event in rows:
            await self.send(protocol.event_frame(event, replay=replay))
            # Per row: a send may yield, and an ack of a row already sent
            # must not be taken for an ack beyond what was sent.
            self.sent_through = event["seq"]
        stats.delivered.add(self.node, len(rows))

    async def _next_batch(self, limit: int, through: int | None = None) -> list[Any]:
        """Rows after what was sent; records what was sent in the same trip."""
        sent = self.sent_through
        rows = await reads.batcher().next_batch(
            client_id=self.client.id,
            sent_through=sent,
            marked_through=self.marked_through,
            limit=limit,
            through=through,
        )
        self.marked_through = max(self.marked_through, sent)
        return rows

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

    async def queue_close(self, message: dict[str, Any]) -> None:
        await self._stop_delivery()
        await self._closed_by_operator(int(message["code"]))

    async def _closed_by_operator(self, code: int) -> None:
        self.client = None  # the client row is gone: nothing to keep
        await self._close(code)

    async def node_close(self, message: dict[str, Any]) -> None:
        await self._close(int(message["code"]))

    async def disconnect(self, code: int) -> None:
        await self._stop_delivery()
        refresher = getattr(self, "refresher", None)
        if refresher is not None:
            refresher.cancel()
        with contextlib.suppress(Exception):
            await self.channel_layer.group_discard(
                notify.node_group(self.node), self.channel_name
            )
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.channel_layer.group_discard(
                    notify.group_for(self.client.id), self.channel_name
                )
            await db(services.client_disconnected)(
                client_id=self.client.id, channel_name=self.channel_name
            )
            self.client = None
