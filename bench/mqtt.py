"""Mosquitto side: our own broker instance and paho-mqtt clients (QoS 1)."""

import json
import os
import selectors
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt

from bench.common import wait_until

WAIT_S = 120
# paho's default max_inflight_messages: QoS 1 publishes without a PUBACK.
DEFAULT_INFLIGHT = 20


class Mosquitto:
    """A private broker on a free loopback port, persistence off."""

    def __init__(self, workdir: Path, port: int) -> None:
        self.port = port
        workdir.mkdir(parents=True, exist_ok=True)
        self.config = workdir / "mosquitto.conf"
        self.config.write_text(
            f"listener {port} 127.0.0.1\n"
            "allow_anonymous true\n"
            "persistence false\n"
            "max_queued_messages 0\n"
            "max_queued_bytes 0\n"
            f"log_dest file {workdir / 'mosquitto.log'}\n"
        )
        self.proc = subprocess.Popen(
            ["mosquitto", "-c", str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_until(self._up, timeout=20, interval=0.1)

    def _up(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError("mosquitto exited; see its log")
        client = client_for(self.port, "bench-probe", clean=True)
        try:
            client.connect("127.0.0.1", self.port)
        except OSError:
            return False
        client.disconnect()
        return True

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def client_for(port: int, client_id: str, *, clean: bool) -> mqtt.Client:
    client = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2,
        client_id=client_id,
        clean_session=clean,
        protocol=mqtt.MQTTv311,
    )
    client.max_queued_messages_set(0)
    return client


def connect(client: mqtt.Client, port: int) -> None:
    connected = threading.Event()
    client.on_connect = lambda *_: connected.set()
    client.connect("127.0.0.1", port, keepalive=120)
    client.loop_start()
    if not connected.wait(WAIT_S):
        raise TimeoutError("no CONNACK")


class SelectorLoop:
    """Many paho clients driven from one thread through one selector (paho's
    external-loop API), the way an asyncio client reads many sockets."""

    MISC_EVERY_S = 1.0

    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self.clients: list[mqtt.Client] = []
        self._misc_at = time.monotonic()

    def add(self, client: mqtt.Client) -> None:
        """``client`` has called ``connect`` (its socket exists)."""
        self.selector.register(client.socket(), selectors.EVENT_READ, client)
        self.clients.append(client)

    def pump(self, timeout: float) -> None:
        for client in self.clients:
            if client.want_write():
                client.loop_write()
        for key, _ in self.selector.select(timeout):
            key.data.loop_read()
        if time.monotonic() - self._misc_at >= self.MISC_EVERY_S:
            self._misc_at = time.monotonic()
            for client in self.clients:
                client.loop_misc()

    def close(self) -> None:
        """DISCONNECT every client and flush it."""
        for client in self.clients:
            client.disconnect()
            while client.want_write():
                client.loop_write()
        self.selector.close()


def make_offline(port: int, client_id: str, topic: str) -> None:
    """A persistent session subscribed at QoS 1, then disconnected."""
    client = client_for(port, client_id, clean=False)
    subscribed = threading.Event()
    client.on_subscribe = lambda *_: subscribed.set()
    connect(client, port)
    client.subscribe(topic, qos=1)
    if not subscribed.wait(WAIT_S):
        raise TimeoutError("no SUBACK")
    client.disconnect()
    client.loop_stop()


def publish_pipelined(
    port: int, topic: str, count: int, window: int = DEFAULT_INFLIGHT
) -> float:
    """Publish ``count`` QoS 1 messages as fast as paho allows, ``window``
    without a PUBACK at most; events/s."""
    client = client_for(port, f"pub-{topic}", clean=True)
    client.max_inflight_messages_set(window)
    acked = threading.Semaphore(0)
    client.on_publish = lambda *_: acked.release()
    connect(client, port)
    start = time.monotonic()
    for i in range(count):
        client.publish(f"{topic}/{i}", json.dumps({"i": i}), qos=1)
    for _ in range(count):
        if not acked.acquire(timeout=WAIT_S):
            raise TimeoutError("PUBACKs missing")
    elapsed = time.monotonic() - start
    client.disconnect()
    client.loop_stop()
    return count / elapsed


def enqueue_pipelined(
    port: int, tag: str, count: int, window: int = DEFAULT_INFLIGHT
) -> float:
    """Pipelined publishes into a persistent session's queue (kept: the
    replay scenario reads it)."""
    make_offline(port, f"{tag}-sub", f"{tag}/#")
    return publish_pipelined(port, tag, count, window)


def enqueue_many(
    port: int, tag: str, count: int, sessions: int, window: int = DEFAULT_INFLIGHT
) -> float:
    """Pipelined publishes into ``sessions`` persistent sessions' queues
    (each subscribed to every message), until the last PUBACK; the sessions
    are dropped afterwards."""
    ids = [f"{tag}-sub-{i}" for i in range(sessions)]
    for client_id in ids:
        make_offline(port, client_id, f"{tag}/#")
    rate = publish_pipelined(port, tag, count, window)
    for client_id in ids:
        drop_session(port, client_id)
    return rate


def enqueue_sequential(port: int, tag: str, count: int, writers: int) -> float:
    """Each writer waits for the PUBACK of one message before the next."""
    make_offline(port, f"{tag}-sub", f"{tag}/#")
    per = count // writers
    clients = []
    for w in range(writers):
        client = client_for(port, f"{tag}-pub{w}", clean=True)
        connect(client, port)
        clients.append(client)

    def write(w: int) -> None:
        for i in range(per):
            info = clients[w].publish(f"{tag}/{w}/{i}", json.dumps({"i": i}), qos=1)
            info.wait_for_publish(WAIT_S)

    start = time.monotonic()
    with ThreadPoolExecutor(writers) as pool:
        list(pool.map(write, range(writers)))
    elapsed = time.monotonic() - start
    for client in clients:
        client.disconnect()
        client.loop_stop()
    drop_session(port, f"{tag}-sub")
    return per * writers / elapsed


def drop_session(port: int, client_id: str) -> None:
    client = client_for(port, client_id, clean=True)
    connect(client, port)
    client.disconnect()
    client.loop_stop()


def replay(port: int, tag: str, count: int) -> float:
    """Reconnect the persistent session; events/s from CONNACK to the last."""
    client = client_for(port, f"{tag}-sub", clean=False)
    state: dict[str, Any] = {"n": 0, "start": None}
    done = threading.Event()

    def on_connect(*_: Any) -> None:
        state["start"] = time.monotonic()

    def on_message(*_: Any) -> None:
        state["n"] += 1
        if state["n"] == count:
            state["end"] = time.monotonic()
            done.set()

    client.on_connect = on_connect
    client.on_message = on_message
    client.connect("127.0.0.1", port, keepalive=120)
    client.loop_start()
    if not done.wait(WAIT_S):
        raise TimeoutError(f"replayed {state['n']} of {count}")
    client.disconnect()
    client.loop_stop()
    drop_session(port, f"{tag}-sub")
    return count / (state["end"] - state["start"])
