"""Live fan-out: subscribers in their own processes, writer in this one.

At 100 subscribers x 100 events/s a single Python process receiving every
frame is the bottleneck of the measurement itself, so the subscribers are
split over ``PROCESSES`` spawned processes (the same for both sides). Latency
is wall clock from the scheduled send time of a write to a subscriber parsing
the frame; every process is on this machine, so the clocks are the same.
"""

import asyncio
import json
import multiprocessing
import queue
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import websockets

from bench import dc, mqtt
from bench.common import Rest, percentile, wait_until

PROCESSES = 2
# How long after the last write a missing frame is waited for before it
# counts as lost: healthy runs have every frame within ~4 s; a longer wait
# costs a round that much whenever Mosquitto's overloaded subscriber
# processes miss some, and three rounds must fit the time box.
GRACE_S = 15


def _dc_receiver(args: dict[str, Any], ready: Any, stop: Any, results: Any) -> None:
    """Subscriber ``i`` connects to ``ws_urls[i % len]`` (its primary) and
    says ``hello`` with ``redundancy``; with ``samples`` the process also
    returns ``(seq, sent, received)`` per frame (bench.budget)."""
    urls = args["ws_urls"]

    async def run() -> dict[str, list[Any]]:
        conns = await dc._connect_many(
            lambda i: dc._fanout_client(
                urls[i % len(urls)],
                args["token"],
                f"{args['tag']}-{i}",
                args["region"],
                args["key"],
                args["redundancy"],
            ),
            args["count"],
            first=args["first"],
        )
        ready.put(len(conns))
        latencies: list[float] = []
        samples: list[tuple[int, float, float, int]] = []
        keep = args.get("samples", False)
        expected = args["expected"] * len(conns)

        async def reader(ws: dc.Ws, node: int) -> None:
            since_ack = 0
            while True:
                try:
                    raw = await ws.ws.recv()
                except websockets.ConnectionClosed:
                    return
                now = time.time()
                frame = json.loads(raw)
                if frame["type"] != "event":
                    continue
                sent = frame["value"]["t"]
                latencies.append(now - sent)
                if keep:
                    samples.append((frame["seq"], sent, now, node))
                since_ack += 1
                if since_ack >= 50:
                    await ws.send(type="ack", up_to=frame["seq"])
                    since_ack = 0

        tasks = [
            asyncio.create_task(reader(ws, (args["first"] + j) % len(urls)))
            for j, ws in enumerate(conns)
        ]
        # ``stop`` is a multiprocessing.Event: it can only be polled here.
        while len(latencies) < expected and not stop.is_set():  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(ws.close(keepalive=False) for ws in conns))
        return {"latencies": latencies, "samples": samples}

    results.put(asyncio.run(run()))


def _mqtt_receiver(args: dict[str, Any], ready: Any, stop: Any, results: Any) -> None:
    """The process's subscribers on one selector loop, as the durablecache
    side reads all its sockets from one asyncio loop: paho's external-loop
    calls (``loop_read`` / ``loop_write`` / ``loop_misc``), no network thread
    per client contending for the GIL."""
    port, tag, topic = args["port"], args["tag"], args["topic"]
    latencies: list[float] = []
    subscribed: set[str] = set()

    def on_message(_c: Any, _u: Any, message: Any) -> None:
        latencies.append(time.time() - json.loads(message.payload)["t"])

    def on_connect(client: Any, *_: Any) -> None:
        client.subscribe(topic, qos=1)

    ids = [f"{tag}-{i}" for i in range(args["first"], args["first"] + args["count"])]
    loop = mqtt.SelectorLoop()
    for client_id in ids:
        client = mqtt.client_for(port, client_id, clean=False)
        client.on_connect = on_connect
        client.on_subscribe = lambda *_, c=client_id: subscribed.add(c)
        client.on_message = on_message
        client.connect("127.0.0.1", port, keepalive=120)
        loop.add(client)
    deadline = time.monotonic() + mqtt.WAIT_S
    while len(subscribed) < len(ids):
        if time.monotonic() > deadline:
            raise TimeoutError(f"SUBACK from {len(subscribed)} of {len(ids)}")
        loop.pump(0.05)
    ready.put(len(ids))
    expected = args["expected"] * len(ids)
    while len(latencies) < expected and not stop.is_set():
        loop.pump(0.05)
    loop.close()
    for client_id in ids:
        mqtt.drop_session(port, client_id)
    results.put({"latencies": list(latencies), "samples": []})


def _run(
    target: Any, base: dict[str, Any], clients: int, puts: int, publish: Any
) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    ready, results, stop = ctx.Queue(), ctx.Queue(), ctx.Event()
    per = -(-clients // PROCESSES)
    procs = []
    for first in range(0, clients, per):
        args = {**base, "first": first, "count": min(per, clients - first)}
        args["expected"] = puts
        proc = ctx.Process(target=target, args=(args, ready, stop, results))
        proc.start()
        procs.append(proc)
    try:
        for _ in procs:
            ready.get(timeout=120)
        publish()
        got: list[dict[str, list[Any]]] = []
        deadline = time.monotonic() + GRACE_S
        for _ in procs:
            try:
                got.append(results.get(timeout=max(0.1, deadline - time.monotonic())))
            except queue.Empty:
                stop.set()
                got.append(results.get(timeout=60))
    finally:
        stop.set()
        for proc in procs:
            proc.join(timeout=60)
            if proc.is_alive():
                proc.kill()
                proc.join()
    latencies = [x for one in got for x in one["latencies"]]
    samples = [x for one in got for x in one["samples"]]
    return {
        **({"samples": samples} if samples else {}),
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "max_ms": max(latencies) * 1000,
        "received": len(latencies),
        "expected": puts * clients,
    }


# Writes in flight at most, on both sides: paho's window of QoS 1
# publishes without a PUBACK (20). The REST writer keeps that many HTTP
# connections (HTTP/1.1 has one request in flight per connection), the
# put-frame writer that many sockets, each waiting for its ``written``.
WRITES_IN_FLIGHT = mqtt.DEFAULT_INFLIGHT
WS_WRITERS = WRITES_IN_FLIGHT


def run_dc(
    ws_urls: list[str],
    rests: list[Rest],
    token: str,
    region: str,
    tag: str,
    clients: int,
    rate: int,
    seconds: float,
    writer: str = "rest",
    redundancy: int = 0,
    samples: bool = False,
) -> dict[str, Any]:
    """``writer``: ``rest`` (a PUT each, ``WRITES_IN_FLIGHT`` HTTP
    connections) or ``ws`` (a ``put`` frame each, on ``WS_WRITERS``
    sockets, each waiting for its ``written`` before its next put, as a
    QoS 1 publisher waits for PUBACK only per message in flight).
    Subscribers and writes are spread over the nodes (``ws_urls`` and
    ``rests``, in the same order), as behind a load balancer; each
    subscriber's primary is the node it connects to and, with
    ``redundancy`` 1, its queue has a copy on another node."""
    key = f"{tag}-hot"
    puts = int(rate * seconds)

    def publish_rest() -> None:
        start = time.monotonic()
        with ThreadPoolExecutor(WRITES_IN_FLIGHT) as pool:
            for i in range(puts):
                delay = start + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                # "Issued" is the scheduled send time, so a server that falls
                # behind shows up as latency instead of a slower writer.
                rest = rests[i % len(rests)]
                pool.submit(dc.put_one, rest, region, key, {"t": time.time()})

    async def publish_ws_async() -> None:
        socks = [
            sock
            for i, url in enumerate(ws_urls)
            for sock in await dc._ws_writers(
                url, token, WS_WRITERS // len(ws_urls) + (i < WS_WRITERS % len(ws_urls))
            )
        ]
        free: asyncio.Queue[dc.Ws] = asyncio.Queue()
        for sock in socks:
            free.put_nowait(sock)

        async def put(sent: float) -> None:
            sock = await free.get()
            await dc.put_frame(sock, region, key, json.dumps({"t": sent}))
            free.put_nowait(sock)

        start = time.monotonic()
        pending = []
        try:
            async with asyncio.timeout(seconds + GRACE_S):
                for i in range(puts):
                    delay = start + i / rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    pending.append(asyncio.create_task(put(time.time())))
                await asyncio.gather(*pending)
        except TimeoutError:
            # Fell behind: the writes not made show as frames not received.
            left = sum(not task.done() for task in pending) + puts - len(pending)
            sys.stderr.write(f"put-frame writer: {left} puts not written in time\n")
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        finally:
            await asyncio.gather(
                *(sock.ws.close() for sock in socks), return_exceptions=True
            )

    def publish_ws() -> None:
        asyncio.run(publish_ws_async())

    base = {
        "ws_urls": ws_urls,
        "token": token,
        "tag": tag,
        "region": region,
        "key": key,
        "redundancy": redundancy,
        "samples": samples,
    }
    publish = {"rest": publish_rest, "ws": publish_ws}[writer]

    def placed_then_publish() -> None:
        if redundancy:
            placed(rests[0], [f"{tag}-{i}" for i in range(clients)], redundancy)
        publish()

    return _run(_dc_receiver, base, clients, puts, placed_then_publish)


def placed(rest: Rest, durable_ids: list[str], redundancy: int) -> None:
    """Wait until every client's queue has its copies, synced."""
    for durable_id in durable_ids:

        def done(d: str = durable_id) -> bool:
            view = rest.ok("GET", f"/api/v1/clients/{d}/")
            return len(view["secondaries"]) == redundancy and not view["syncing"]

        wait_until(done, timeout=60)


def run_mqtt(
    port: int, tag: str, clients: int, rate: int, seconds: float
) -> dict[str, float]:
    topic = f"{tag}/hot"
    puts = int(rate * seconds)

    def publish() -> None:
        publisher = mqtt.client_for(port, f"{tag}-pub", clean=True)
        mqtt.connect(publisher, port)
        start = time.monotonic()
        infos = []
        for i in range(puts):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            infos.append(
                publisher.publish(topic, json.dumps({"t": time.time()}), qos=1)
            )
        # Publishes beyond paho's in-flight window wait in its queue; a
        # DISCONNECT sent before they leave drops them (a frame "lost" that
        # Mosquitto never got).
        deadline = time.monotonic() + GRACE_S
        for info in infos:
            info.wait_for_publish(max(0.1, deadline - time.monotonic()))
        publisher.disconnect()
        publisher.loop_stop()

    base = {"port": port, "tag": tag, "topic": topic}
    return _run(_mqtt_receiver, base, clients, puts, publish)
