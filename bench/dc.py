"""durablecache side: raw-protocol websocket clients and REST writers."""

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import websockets

from bench.common import Rest, wait_until

WAIT_S = 60


class Ws:
    """One raw-protocol websocket client."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token
        self.ws: Any = None

    async def connect(self) -> "Ws":
        self.ws = await websockets.connect(
            self.url,
            additional_headers={"Authorization": f"Token {self.token}"},
            max_size=None,
            ping_interval=None,
        )
        return self

    async def send(self, **frame: Any) -> None:
        await self.ws.send(json.dumps(frame))

    async def expect(self, frame_type: str) -> dict[str, Any]:
        while True:
            frame = json.loads(await asyncio.wait_for(self.ws.recv(), WAIT_S))
            if frame["type"] == frame_type:
                return frame
            if frame["type"] == "error":
                raise RuntimeError(f"server error: {frame}")

    async def hello(
        self, durable_id: str, redundancy: int = 0, max_queued: int | None = None
    ) -> dict[str, Any]:
        """``hello`` with a 30-minute timeout (and ``max_queued`` if given)."""
        bound = {} if max_queued is None else {"max_queued": max_queued}
        await self.send(
            type="hello",
            durable_id=durable_id,
            timeout=1800,
            redundancy=redundancy,
            **bound,
        )
        return await self.expect("welcome")

    async def register(self, region: str, **selector: Any) -> None:
        await self.send(
            type="register_interest",
            id="r",
            region=region,
            durable=True,
            policy="none",
            **selector,
        )
        await self.expect("interest_registered")

    async def ready(self) -> dict[str, Any]:
        await self.send(type="ready")
        return await self.expect("marker")

    async def close(self, keepalive: bool) -> None:
        await self.send(type="close", keepalive=keepalive)
        try:
            await self.expect("closed")
        finally:
            await self.ws.close()


async def make_offline(
    url: str,
    token: str,
    durable_id: str,
    region: str,
    redundancy: int = 0,
    max_queued: int | None = None,
) -> None:
    """A durable client with durable interest in every key, then away."""
    ws = await Ws(url, token).connect()
    await ws.hello(durable_id, redundancy, max_queued)
    await ws.register(region, all_keys=True)
    await ws.close(keepalive=True)


async def discard(url: str, token: str, durable_id: str) -> None:
    """Reconnect and close with keepalive false: the queue goes."""
    ws = await Ws(url, token).connect()
    await ws.hello(durable_id)
    await ws.close(keepalive=False)


def pending(rest: Rest, durable_id: str) -> int:
    return int(rest.ok("GET", f"/api/v1/clients/{durable_id}/")["pending_events"])


def wait_pending(rest: Rest, durable_id: str, count: int, timeout: float) -> float:
    return wait_until(lambda: pending(rest, durable_id) >= count, timeout=timeout)


def fill_putall(rest: Rest, region: str, prefix: str, count: int) -> None:
    batch = 1000
    for start in range(0, count, batch):
        entries = {f"{prefix}{i}": {"i": i} for i in range(start, start + batch)}
        rest.ok("POST", f"/api/v1/regions/{region}/putall/", {"entries": entries})


def put_one(rest: Rest, region: str, key: str, value: Any) -> None:
    rest.ok("PUT", f"/api/v1/regions/{region}/entries/{key}/", {"value": value})


def enqueue_putall(
    ws_url: str, rest: Rest, token: str, region: str, durable_id: str, count: int
) -> float:
    """Events/s from the first putall to all ``count`` events queued."""
    asyncio.run(make_offline(ws_url, token, durable_id, region))
    start = time.monotonic()
    fill_putall(rest, region, f"{durable_id}-", count)
    end = wait_pending(rest, durable_id, count, timeout=300)
    return count / (end - start)


def queued_on(rest: Rest, durable_id: str, node: str) -> int:
    """The size of the client's queue in ``node``'s own store (asked of that
    node, which reads it live; other nodes' figures are reports)."""
    view = rest.ok("GET", f"/api/v1/clients/{durable_id}/")
    return int(view["queue_sizes"].get(node, 0))


def offline_on(
    ws_url: str, rests: dict[str, Rest], token: str, durable_id: str, region: str
) -> Rest:
    """An offline durable client (``make_offline``) with a copy of its queue
    on each node of ``rests`` after the first (redundancy len - 1), placed
    and synced; return the first node's REST client."""
    redundancy = len(rests) - 1
    asyncio.run(make_offline(ws_url, token, durable_id, region, redundancy))
    first = next(iter(rests.values()))
    if redundancy:

        def placed() -> bool:
            view = first.ok("GET", f"/api/v1/clients/{durable_id}/")
            return len(view["secondaries"]) == redundancy and not view["syncing"]

        wait_until(placed, timeout=60)
    return first


def queued_everywhere(rests: dict[str, Rest], durable_id: str, count: int) -> float:
    """When every node of ``rests`` holds ``count`` events of the client's
    queue in its own store (monotonic time)."""
    return max(
        wait_until(
            lambda n=node, r=rest: queued_on(r, durable_id, n) >= count, timeout=300
        )
        for node, rest in rests.items()
    )


def enqueue_putall_redundant(
    ws_url: str,
    rests: dict[str, Rest],
    token: str,
    region: str,
    durable_id: str,
    count: int,
) -> float:
    """Events/s into an offline queue with redundancy 1: from the first
    putall until both copies hold all ``count`` events."""
    first = offline_on(ws_url, rests, token, durable_id, region)
    start = time.monotonic()
    fill_putall(first, region, f"{durable_id}-", count)
    rate = count / (queued_everywhere(rests, durable_id, count) - start)
    asyncio.run(discard(ws_url, token, durable_id))
    return rate


def enqueue_putall_many(
    ws_url: str,
    rests: dict[str, Rest],
    token: str,
    region: str,
    tag: str,
    count: int,
    clients: int,
) -> float:
    """Events/s into ``clients`` offline queues at once, each with a copy on
    every node of ``rests`` after the first: from the first putall until
    every host of every queue holds all ``count`` events. The clients go
    afterwards (they would load the scenarios after this one)."""
    ids = [f"{tag}-{i}" for i in range(clients)]
    first = next(iter(rests.values()))
    for durable_id in ids:
        offline_on(ws_url, rests, token, durable_id, region)
    start = time.monotonic()
    fill_putall(first, region, f"{tag}-k", count)
    end = max(queued_everywhere(rests, durable_id, count) for durable_id in ids)
    for durable_id in ids:
        asyncio.run(discard(ws_url, token, durable_id))
    return count / (end - start)


def enqueue_puts(
    ws_url: str,
    rest: Rest,
    token: str,
    region: str,
    durable_id: str,
    count: int,
    writers: int,
) -> float:
    """Events/s of single PUTs from ``writers`` threads until all are queued."""
    asyncio.run(make_offline(ws_url, token, durable_id, region))
    per = count // writers

    def write(w: int) -> None:
        for i in range(per):
            put_one(rest, region, f"{durable_id}-{w}-{i}", i)

    start = time.monotonic()
    with ThreadPoolExecutor(writers) as pool:
        list(pool.map(write, range(writers)))
    end = wait_pending(rest, durable_id, per * writers, timeout=300)
    rate = per * writers / (end - start)
    asyncio.run(discard(ws_url, token, durable_id))
    return rate


async def _ws_writers(ws_url: str, token: str, writers: int) -> list[Ws]:
    """``writers`` non-durable sockets, each after its ``hello``."""

    async def one() -> Ws:
        ws = await Ws(ws_url, token).connect()
        await ws.send(type="hello")
        await ws.expect("welcome")
        return ws

    return list(await asyncio.gather(*(one() for _ in range(writers))))


def _put_text(region: str, key: str, value_json: str) -> str:
    return f'{{"type":"put","region":"{region}","key":"{key}","value":{value_json}}}'


async def put_frame(ws: Ws, region: str, key: str, value_json: str) -> None:
    """One ``put`` frame (the value as JSON text), then its ``written``."""
    await ws.ws.send(_put_text(region, key, value_json))
    reply = json.loads(await ws.ws.recv())
    if reply["type"] != "written":
        raise RuntimeError(f"put refused: {reply}")


async def _ws_write(
    ws: Ws, region: str, prefix: str, count: int, window: int = 1
) -> None:
    """``count`` put frames with up to ``window`` unanswered at a time (1:
    each after the previous one's ``written``, as a QoS 1 publisher waits
    for each PUBACK; more: as paho keeps up to ``max_inflight`` publishes
    without a PUBACK); every ``written`` read, in order; one deadline for
    them all."""
    room = asyncio.Semaphore(window)

    async def answers() -> None:
        for i in range(count):
            reply = json.loads(await ws.ws.recv())
            if reply["type"] != "written" or reply["key"] != f"{prefix}{i}":
                raise RuntimeError(f"put {i} refused or out of order: {reply}")
            room.release()

    async with asyncio.timeout(WAIT_S):
        reader = asyncio.create_task(answers())
        for i in range(count):
            await room.acquire()
            await ws.ws.send(_put_text(region, f"{prefix}{i}", str(i)))
        await reader


def enqueue_ws_puts(
    ws_url: str,
    rests: dict[str, Rest],
    token: str,
    region: str,
    durable_id: str,
    count: int,
    writers: int,
    window: int = 1,
) -> float:
    """Events/s of single ``put`` frames from ``writers`` sockets until all
    are queued for an offline durable client: in every node's own store
    when ``rests`` names two nodes (the client then has redundancy 1).
    ``window``: puts a socket sends before it waits for a ``written``."""
    offline_on(ws_url, rests, token, durable_id, region)
    per = count // writers

    async def run() -> float:
        socks = await _ws_writers(ws_url, token, writers)
        start = time.monotonic()
        await asyncio.gather(
            *(
                _ws_write(ws, region, f"{durable_id}-{w}-", per, window)
                for w, ws in enumerate(socks)
            )
        )
        await asyncio.gather(*(ws.close(keepalive=False) for ws in socks))
        return start

    start = asyncio.run(run())
    rate = per * writers / (queued_everywhere(rests, durable_id, per * writers) - start)
    asyncio.run(discard(ws_url, token, durable_id))
    return rate


async def replay(ws_url: str, token: str, durable_id: str, count: int) -> float:
    """Reconnect, ready, read ``count`` replayed events acking as it goes."""
    ws = await Ws(ws_url, token).connect()
    welcome = await ws.hello(durable_id)
    if welcome["pending_events"] < count:
        raise RuntimeError(f"expected {count} pending, got {welcome}")
    received = 0
    last_seq = acked = 0
    last_ack = start = time.monotonic()
    await ws.send(type="ready")
    # One deadline for the whole replay, as on the MQTT side: a wait_for per
    # frame made a task and a timer for each (~10 us of this reader's CPU
    # per event, which bounded the figure: docs/performance.md).
    async with asyncio.timeout(WAIT_S):
        while received < count:
            frame = json.loads(await ws.ws.recv())
            if frame["type"] != "event":
                continue
            received += 1
            last_seq = frame["seq"]
            now = time.monotonic()
            if received - acked >= 1000 or now - last_ack >= 0.05:
                await ws.send(type="ack", up_to=last_seq)
                acked, last_ack = received, now
    elapsed = time.monotonic() - start
    await ws.send(type="ack", up_to=last_seq)
    await ws.close(keepalive=False)
    return count / elapsed


async def _fanout_client(
    ws_url: str, token: str, durable_id: str, region: str, key: str, redundancy: int = 0
) -> Ws:
    ws = await Ws(ws_url, token).connect()
    await ws.hello(durable_id, redundancy)
    await ws.register(region, keys=[key])
    await ws.ready()
    return ws


async def _connect_many(
    factory: Any, count: int, parallel: int = 50, first: int = 0
) -> list[Any]:
    clients: list[Any] = []
    for start in range(first, first + count, parallel):
        batch = [factory(i) for i in range(start, min(first + count, start + parallel))]
        clients += await asyncio.gather(*batch)
    return clients


async def idle_durable_clients(
    ws_url: str, token: str, region: str, tag: str, count: int
) -> list[Ws]:
    """``count`` connected, ready, idle durable clients (one key each)."""

    async def one(i: int) -> Ws:
        return await _fanout_client(ws_url, token, f"{tag}-{i}", region, f"{tag}-{i}")

    return await _connect_many(one, count)


async def idle_echo_clients(ws_url: str, count: int) -> list[Ws]:
    """``count`` websockets to the bare echo app, each after one round trip."""

    async def one(_: int) -> Ws:
        ws = await Ws(ws_url, "none").connect()
        await ws.ws.send('{"type": "hello"}')
        await asyncio.wait_for(ws.ws.recv(), WAIT_S)
        return ws

    return await _connect_many(one, count)
