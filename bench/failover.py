"""``make bench-failover``: time from SIGKILL of a primary to events again.

A 3-node cluster (tests.integration.harness, with the default
heartbeat and node timeout), one library client (redundancy 1) connected
and interested in every key, a writer doing one small ``putall`` every
20 ms through a node that is not about to die. Each round SIGKILLs the
client's primary's process group and measures, from the kill:

* ``resumed``: the first event written after the kill reaches the
  application (what the issue calls failover time; the writer writes one
  every 20 ms, so this includes up to 20 ms of waiting for a write);
* ``promoted``: the REST view names a new primary;
* ``redundant``: two complete copies again, on nodes that are up;

then restarts the killed node. Run twice: with the peer probe (default)
and with ``DURABLECACHE_PROBE_PEERS=0`` (heartbeat detection only). At the
end every written event id must have reached the application exactly once.
Writes bench/failover.json; all on 127.0.0.1, bounded, own processes only.
"""

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import SHIPPED_TIMINGS, out
from durablecache_client import DurableClient
from tests.integration.harness import Cluster, wait_for
from tests.integration.recording import Recorder

HERE = Path(__file__).resolve().parent
NODES = ("node-1", "node-2", "node-3")


class Writer(threading.Thread):
    def __init__(self, cluster: Cluster, token: str) -> None:
        super().__init__(daemon=True)
        self.cluster, self.token = cluster, token
        self.target = NODES[0]
        self.ids: list[str] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            with self.lock:
                status, body = self.cluster.rest(
                    "POST",
                    "/api/v1/regions/r/putall/",
                    self.token,
                    {"entries": {f"k{n % 10}": n}},
                    node=self.target,
                )
                if status != 200:
                    raise RuntimeError(f"putall failed: {status} {body}")
                self.ids.extend(e["event_id"] for e in body["events"])
            n += 1
            time.sleep(0.02)


def view(cluster: Cluster, token: str, via: str) -> dict[str, Any]:
    return cluster.rest("GET", "/api/v1/clients/bench-failover/", token, node=via)[1]


def redundant(cluster: Cluster, token: str, via: str, dead: str) -> bool:
    v = view(cluster, token, via)
    hosts = [v["primary"], *v["secondaries"]]
    return len(hosts) == 2 and not v["syncing"] and dead not in hosts


def one_kill(
    cluster: Cluster, operator: str, writer: Writer, recorder: Recorder
) -> tuple[str, dict[str, float]]:
    """SIGKILL the client's primary; return it and the times measured."""
    primary = view(cluster, operator, NODES[0])["primary"]
    other = next(n for n in NODES if n != primary)
    with writer.lock:
        writer.target = other
        killed = time.monotonic()
        cluster.kill_node(primary)
        written_before = len(writer.ids)
    # Receiving again = the first event written after the kill arrives
    # (frames already in flight from the dead node do not count).
    resumed = wait_for(
        lambda: recorder.first_arrival_of(set(writer.ids[written_before:])),
        timeout=60,
        interval=0.01,
    )
    wait_for(
        lambda: view(cluster, operator, other)["primary"] != primary,
        timeout=60,
        interval=0.05,
    )
    promoted = time.monotonic()
    wait_for(
        lambda: redundant(cluster, operator, other, primary), timeout=120, interval=0.1
    )
    restored = time.monotonic()
    return primary, {
        "resumed_s": round(resumed - killed, 3),
        "promoted_s": round(promoted - killed, 3),
        "redundant_s": round(restored - killed, 3),
    }


def run_mode(workdir: Path, *, probe: bool, kills: int) -> dict[str, Any]:
    cluster = Cluster(
        workdir,
        settings={
            **SHIPPED_TIMINGS,
            "DURABLECACHE_PROBE_PEERS": "1" if probe else "0",
        },
    )
    rounds: list[dict[str, float]] = []
    client = None
    writer = None
    try:
        cluster.migrate()
        for name in NODES:
            cluster.start_node(name)
        operator = cluster.token("ops", operator=True)
        user = cluster.token("app")
        cluster.rest("POST", "/api/v1/regions/", operator, {"name": "r"})
        recorder = Recorder()
        client = DurableClient(
            [cluster.ws_url(n) for n in NODES],
            durable_id="bench-failover",
            redundancy=1,
            timeout=600,
            token=user,
        )
        client.connect()
        client.region("r", recorder).register_all_keys(durable=True, policy="none")
        client.ready_for_events()
        client.wait_for_marker(timeout=30)
        writer = Writer(cluster, user)
        writer.start()
        for k in range(kills):
            wait_for(
                lambda: redundant(cluster, operator, NODES[0], "none"),
                timeout=120,
                interval=0.2,
            )
            primary, figures = one_kill(cluster, operator, writer, recorder)
            rounds.append(figures)
            out(f"  kill {k + 1} ({primary}): {figures}")
            cluster.start_node(primary)
        writer.stopping.set()
        writer.join(timeout=30)
        expected = set(writer.ids)
        wait_for(
            lambda: {e.id for e in recorder.events()} >= expected,
            timeout=60,
            interval=0.2,
        )
        ids = [e.id for e in recorder.events()]
        exact = len(ids) == len(set(ids)) and set(ids) == expected
        return {"rounds": rounds, "events": len(expected), "exactly_once": exact}
    finally:
        if writer is not None:
            writer.stopping.set()
        if client is not None:
            client.close(keepalive=False)
        cluster.close()


def stats(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": min(values),
        "max": max(values),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, Any] = {"node_timeout_s": 5, "heartbeat_s": 1}
    with tempfile.TemporaryDirectory(prefix="dc-failover-") as tmp:
        for probe in (True, False):
            mode = "probe" if probe else "heartbeat_only"
            out(f"{mode}: {args.kills} kills")
            run = run_mode(Path(tmp) / mode, probe=probe, kills=args.kills)
            run["summary"] = {
                key: stats([r[key] for r in run["rounds"]])
                for key in ("resumed_s", "promoted_s", "redundant_s")
            }
            results[mode] = run
            out(f"  {run['summary']}")
            out(f"  events {run['events']}, exactly once: {run['exactly_once']}")
    (HERE / "failover.json").write_text(json.dumps(results, indent=2) + "\n")
    ok = all(results[m]["exactly_once"] for m in ("probe", "heartbeat_only"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
