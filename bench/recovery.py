"""Recovery of a bounded queue that overflowed, against a plain replay.

Issue 31: one durable client with an all-keys interest and ``max_queued``
100,000 goes away (``close`` with keepalive) while 1,000,000 events are
written by ``putall`` (batches of 1000) over 10,000 keys. Every
``sample_every`` events the node's RSS (its process tree: runnode, Daphne,
the worker) and the client's queue (REST ``clients/{id}/``:
``queue_sizes``, ``pending_events``, ``gap``) are read: the queue must
never hold more than the cap, the RSS must stay flat (±20 %). Then the
client comes back and is timed from ``hello`` to its ``marker``, reading
the ``gap`` frame and every resync image (≤ one entry per key). The
reference, in the same run: a client with 10,000 queued events (no
overflow) timed the same way, ``hello`` to ``marker`` through its replay.
Target: recovery ÷ replay ≤ 2, recovery cost following keys, not events.
docs/performance.md, "Method".
"""

import asyncio
import json
import time
from typing import Any

from bench import dc, growth
from bench.common import SHIPPED_TIMINGS, Rest, out, wait_until

BATCH = 1000
RATIO_BOUND = 2.0
RSS_FLAT = 0.20


def new_tally() -> dict[str, int]:
    """Counters of what a session sent between ``ready`` and ``marker``."""
    return {"events": 0, "gaps": 0, "images": 0, "resync_entries": 0}


def tally(frame: dict[str, Any], counts: dict[str, int]) -> bool:
    """Count one frame after ``ready``; True when it is the ``marker``.

    An ``error`` frame raises: the session did not recover.
    """
    kind = frame.get("type")
    if kind == "event":
        counts["events"] += 1
    elif kind == "gap":
        counts["gaps"] += 1
    elif kind == "image" and frame.get("resync"):
        counts["images"] += 1
        counts["resync_entries"] += len(frame.get("entries", []))
        counts["resync_entries"] += len(frame.get("keys", []))
    elif kind == "error":
        raise RuntimeError(f"server error: {frame}")
    return kind == "marker"


async def hello_to_marker(
    ws_url: str, token: str, durable_id: str, max_queued: int
) -> dict[str, Any]:
    """Reconnect, ``hello``, ``ready``, read to the ``marker`` (acking
    events as ``dc.replay`` does); seconds from sending ``hello`` to
    reading the marker, the counts, the welcome's gap. The client goes
    afterwards (``close``, keepalive false)."""
    ws = await dc.Ws(ws_url, token).connect()
    counts = new_tally()
    last_seq = acked = 0
    start = last_ack = time.monotonic()
    welcome = await ws.hello(durable_id, max_queued=max_queued)
    await ws.send(type="ready")
    async with asyncio.timeout(dc.WAIT_S * 5):
        while True:
            frame = json.loads(await ws.ws.recv())
            if tally(frame, counts):
                marker = frame
                break
            if frame["type"] == "event":
                last_seq = frame["seq"]
                now = time.monotonic()
                if counts["events"] - acked >= 1000 or now - last_ack >= 0.05:
                    await ws.send(type="ack", up_to=last_seq)
                    acked, last_ack = counts["events"], now
    elapsed = time.monotonic() - start
    if last_seq:
        await ws.send(type="ack", up_to=last_seq)
    await ws.close(keepalive=False)
    return {
        "seconds": round(elapsed, 4),
        "pending_at_welcome": welcome["pending_events"],
        "gap": welcome.get("gap"),
        **counts,
        "marker_replayed": marker.get("replayed"),
        "marker_resynced": marker.get("resynced"),
    }


def queue_sample(
    rest: Rest, durable_id: str, node_pid: int, written: int
) -> dict[str, Any]:
    """The client's queue as REST shows it and the node's RSS, now."""
    view = rest.ok("GET", f"/api/v1/clients/{durable_id}/")
    sizes = view["queue_sizes"]
    return {
        "written": written,
        "queued": max(sizes.values(), default=0),
        "pending": view["pending_events"],
        "gap": view["gap"] is not None,
        "rss_mib": round(growth.group_rss(node_pid) / 2**20, 1),
    }


def summarise(samples: list[dict[str, Any]], cap: int) -> dict[str, Any]:
    """RSS first/last/max and its change, the largest queue seen against
    ``cap``, and from which write the gap stood."""
    rss = [s["rss_mib"] for s in samples]
    gapped = [s["written"] for s in samples if s["gap"]]
    max_queued = max(s["queued"] for s in samples)
    return {
        "rss_first_mib": rss[0],
        "rss_last_mib": rss[-1],
        "rss_max_mib": max(rss),
        "rss_change": round(rss[-1] / rss[0] - 1, 3),
        "rss_max_change": round(max(rss) / rss[0] - 1, 3),
        "max_queued_seen": max_queued,
        "cap": cap,
        "queue_within_cap": max_queued <= cap,
        "gap_seen_at_written": gapped[0] if gapped else None,
    }


def targets(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The three targets of issue 31, each with ``met``."""
    ratio = result["ratio"]
    rss = result["rss_change"]
    return {
        "recovery_ratio": {
            "ratio": f"recovery {result['events']} events/{result['keys']} keys "
            f"vs replay {result['keys']} (hello->marker)",
            "op": "<=",
            "bound": RATIO_BOUND,
            "value": ratio,
            "met": ratio <= RATIO_BOUND,
        },
        "queue_rows": {
            "ratio": "queue rows <= cap",
            "op": "<=",
            "bound": result["cap"],
            "value": result["max_queued_seen"],
            "met": result["queue_within_cap"],
        },
        "rss": {
            "ratio": "RSS change (first sample -> last)",
            "op": "<=",
            "bound": RSS_FLAT,
            "value": rss,
            "met": abs(rss) <= RSS_FLAT,
        },
    }


def rows(result: dict[str, Any]) -> list[str]:
    """The lines the bench prints for this scenario."""
    rec, ref = result["recovery"], result["replay"]
    t = result["target"]

    def met(name: str) -> str:
        return "yes" if t[name]["met"] else "NO"

    return [
        f"recovery {result['events']} events/{result['keys']} keys vs replay "
        f"{result['keys']} (hello->marker): {rec['seconds']:.3f} s / "
        f"{ref['seconds']:.3f} s = {result['ratio']:.2f} (target <= "
        f"{RATIO_BOUND}: {met('recovery_ratio')}); resync {rec['resync_entries']} "
        f"entries in {rec['images']} images",
        f"queue rows <= cap: max {result['max_queued_seen']} seen, cap "
        f"{result['cap']} ({met('queue_rows')}); the gap stood from ~"
        f"{result['gap_seen_at_written']} events written",
        f"RSS change <= {RSS_FLAT:.0%}: {result['rss_first_mib']} -> "
        f"{result['rss_last_mib']} MiB ({result['rss_change']:+.1%}), max "
        f"{result['rss_max_mib']} ({met('rss')})",
    ]


def table_rows(result: dict[str, Any]) -> list[tuple[str, ...]]:
    """The bench table's rows (figure, durablecache, reference, ratio,
    target, met) of the three targets."""
    rec, ref, t = result["recovery"], result["replay"], result["target"]

    def met(name: str) -> str:
        return "yes" if t[name]["met"] else "NO"

    return [
        (
            t["recovery_ratio"]["ratio"],
            f"{rec['seconds'] * 1000:.1f} ms",
            f"replay {ref['seconds'] * 1000:.1f} ms",
            f"{result['ratio']:.3g}",
            f"<= {RATIO_BOUND}",
            met("recovery_ratio"),
        ),
        (
            f"queue rows <= cap, {result['events']} events written",
            f"max {result['max_queued_seen']} seen",
            "",
            "",
            f"<= {result['cap']}",
            met("queue_rows"),
        ),
        (
            f"node RSS change during those {result['events']} events",
            f"{result['rss_first_mib']} -> {result['rss_last_mib']} MiB",
            "",
            f"{result['rss_change']:+.1%}",
            f"+-{RSS_FLAT:.0%}",
            met("rss"),
        ),
    ]


def detail(result: dict[str, Any]) -> str:
    """One line under the bench table: what the recovery read and the fill."""
    rec = result["recovery"]
    gap = rec["gap"] or {}
    return (
        f"recovery: {rec['gaps']} gap frame (dropped {gap.get('dropped')}), "
        f"{rec['resync_entries']} resync entries in {rec['images']} images for "
        f"{result['keys']} keys, {rec['events']} events; RSS max "
        f"{result['rss_max_mib']} MiB; fill {result['fill_ev_s']:.0f} ev/s; the "
        f"gap stood from ~{result['gap_seen_at_written']} events written"
    )


def fill_overflowing(
    rest: Rest,
    region: str,
    prefix: str,
    *,
    events: int,
    keys: int,
    sample: Any,
    sample_every: int,
) -> list[dict[str, Any]]:
    """``putall`` ``events`` events over ``keys`` keys (batches of 1000,
    the keys in turn), calling ``sample(written)`` every ``sample_every``
    events and at the end."""
    samples = []
    next_sample = sample_every
    for start in range(0, events, BATCH):
        stop = min(events, start + BATCH)
        entries = {f"{prefix}{i % keys}": {"i": i} for i in range(start, stop)}
        rest.ok("POST", f"/api/v1/regions/{region}/putall/", {"entries": entries})
        if stop >= next_sample or stop == events:
            samples.append(sample(stop))
            while next_sample <= stop:
                next_sample += sample_every
    return samples


def run(
    ws_url: str,
    rest: Rest,
    token: str,
    region: str,
    node_pid: int,
    tag: str,
    *,
    events: int = 1_000_000,
    keys: int = 10_000,
    max_queued: int = 100_000,
    sample_every: int = 10_000,
    log: Any = out,
) -> dict[str, Any]:
    """The reference replay, then the overflow and the recovery; figures."""
    prefix = f"{tag}-k"
    ref_id, rec_id = f"{tag}-replay", f"{tag}-recover"
    began = time.monotonic()
    asyncio.run(dc.make_offline(ws_url, token, ref_id, region, max_queued=max_queued))
    dc.fill_putall(rest, region, prefix, keys)
    dc.wait_pending(rest, ref_id, keys, timeout=300)
    replay = asyncio.run(hello_to_marker(ws_url, token, ref_id, max_queued))
    log(f"  recovery  reference replay {json.dumps(replay)}")
    asyncio.run(dc.make_offline(ws_url, token, rec_id, region, max_queued=max_queued))
    fill_start = time.monotonic()

    def sample(written: int) -> dict[str, Any]:
        point = queue_sample(rest, rec_id, node_pid, written)
        if written % (sample_every * 10) == 0 or written == events:
            log(f"  recovery  {json.dumps(point)}")
        return point

    samples = fill_overflowing(
        rest,
        region,
        prefix,
        events=events,
        keys=keys,
        sample=sample,
        sample_every=sample_every,
    )
    fill_s = time.monotonic() - fill_start
    if events > max_queued:
        # The overflow is recorded as the fan-out passes the cap: wait for
        # the gap before coming back, or there is nothing to recover.
        wait_until(
            lambda: rest.ok("GET", f"/api/v1/clients/{rec_id}/")["gap"] is not None,
            timeout=120,
            interval=0.2,
        )
    recovery = asyncio.run(hello_to_marker(ws_url, token, rec_id, max_queued))
    log(f"  recovery  after overflow {json.dumps(recovery)}")
    result: dict[str, Any] = {
        "events": events,
        "keys": keys,
        "fill_s": round(fill_s, 1),
        "fill_ev_s": round(events / fill_s, 1),
        "replay": replay,
        "recovery": recovery,
        "ratio": round(recovery["seconds"] / replay["seconds"], 3),
        **summarise(samples, max_queued),
        "samples": samples,
        "wall_s": round(time.monotonic() - began, 1),
    }
    result["target"] = targets(result)
    return result


def main() -> None:
    """``python -m bench.recovery [--events N --keys K --max-queued M]``:
    this scenario alone on a fresh one-node cluster (embedded defaults, or
    the ``DURABLECACHE_*`` URLs of the environment); prints its rows and,
    with ``--output``, writes the figures as JSON."""
    import argparse
    import shutil
    import tempfile
    from pathlib import Path

    from bench.common import first_node
    from tests.integration.harness import Cluster

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--max-queued", type=int, default=100_000)
    parser.add_argument("--sample-every", type=int, default=10_000)
    parser.add_argument("--output", default="")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="durablecache-recovery-bench-"))
    cluster = Cluster(workdir, settings=SHIPPED_TIMINGS)
    try:
        ws_url, token, rest = first_node(cluster, "bench", "bench")
        result = run(
            ws_url,
            rest,
            token,
            "bench",
            cluster.nodes["node-1"]["proc"].pid,
            "rec",
            events=args.events,
            keys=args.keys,
            max_queued=args.max_queued,
            sample_every=args.sample_every,
        )
    finally:
        cluster.close()
        # Its SQLite files hold the million events' log (~180 MB).
        shutil.rmtree(workdir, ignore_errors=True)
    for line in rows(result):
        out(line)
    out(
        f"fill {result['fill_s']} s ({result['fill_ev_s']:.0f} ev/s); "
        f"wall {result['wall_s']} s"
    )
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
        out(f"wrote {args.output}")


if __name__ == "__main__":
    main()
