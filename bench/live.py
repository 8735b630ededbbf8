"""The live fan-out alone, and its latency budget.

``python -m bench.live`` runs scenario 3 of ``make bench`` on a fresh
cluster of ``--nodes`` (2) with ``--redundancy`` (1): ``--clients`` (100)
connected durable subscribers of one key, spread over the nodes, and one
write every 1/``--rate`` s for ``--seconds``, by REST PUTs and by put
frames, against Mosquitto in the same run with the same subscriber loop.
With ``--budget`` the nodes run with ``DURABLECACHE_TRACE_DIR`` and the
run prints each stage's p50 / p99 per node (``bench.budget``) and the
statements per event by database and thread (a separate run: the trace
costs a line write per mark). The ``DURABLECACHE_*`` URLs of the
environment select PostgreSQL and Redis, as for ``bench.run``.
docs/performance.md, "Live fan-out, many subscribers and the latency
budget".
"""

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from bench import budget, fanout, mqtt
from bench.common import SHIPPED_TIMINGS, Rest, first_node, out, summary
from tests.integration.harness import Cluster, free_port

REGION = "bench"


def pg_stats(server: str, databases: list[str]) -> dict[str, dict[str, int]]:
    """pg_stat_database's counters of these databases (PostgreSQL only)."""
    import psycopg

    with psycopg.connect(server + "/postgres", autocommit=True) as conn:
        rows = conn.execute(
            "SELECT datname, xact_commit, xact_rollback, tup_returned, "
            "tup_inserted, tup_updated, tup_deleted FROM pg_stat_database "
            "WHERE datname = ANY(%s)",
            (databases,),
        ).fetchall()
    names = ("commits", "rollbacks", "returned", "inserted", "updated", "deleted")
    return {row[0]: dict(zip(names, row[1:], strict=True)) for row in rows}


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="durablecache-live-bench-"))
    trace_dir = workdir / "trace"
    settings = dict(SHIPPED_TIMINGS)
    if args.budget:
        trace_dir.mkdir()
        settings["DURABLECACHE_TRACE_DIR"] = str(trace_dir)
    cluster = Cluster(workdir / "cluster", settings=settings)
    mosquitto = None
    result: dict[str, Any] = {"args": vars(args), "rounds": []}
    try:
        _, token, rest = first_node(cluster, REGION, "bench")
        names = [f"node-{i}" for i in range(1, args.nodes + 1)]
        for name in names[1:]:
            cluster.start_node(name)
        ws_urls = [cluster.ws_url(name) for name in names]
        rests = [rest] + [Rest(cluster.nodes[n]["url"], token) for n in names[1:]]
        if not args.no_mosquitto:
            mosquitto = mqtt.Mosquitto(workdir / "mosquitto", free_port())
        fan = (args.clients, args.rate, args.seconds)
        for r in range(1, args.rounds + 1):
            one: dict[str, Any] = {}
            for writer in args.writers.split(","):
                before = _db_stats(cluster)
                cpu_before = _cpu(cluster)
                got = fanout.run_dc(
                    ws_urls, rests, token, REGION, f"r{r}-{writer}", *fan,
                    writer=writer, redundancy=args.redundancy, samples=args.budget,
                )  # fmt: skip
                samples = got.pop("samples", [])
                events = args.rate * int(args.seconds)
                got["cpu_ms_per_event"] = {
                    k: (v - cpu_before.get(k, 0.0)) * 1000 / events
                    for k, v in _cpu(cluster).items()
                }
                if args.budget:
                    got["budget"] = budget.budget(trace_dir, samples, names)
                    got["statements_per_event"] = budget.statements(
                        trace_dir, args.rate * int(args.seconds)
                    )
                    got["database_per_event"] = _per_event(
                        before, _db_stats(cluster), args.rate * int(args.seconds)
                    )
                    # Emptied, not removed: the nodes keep them open (for
                    # append, so their next lines start the file again).
                    for path in trace_dir.glob("*.trace"):
                        path.write_text("")
                one[writer] = got
                out(f"round {r} durablecache ({writer}): {_brief(got)}")
            if mosquitto is not None:
                one["mosquitto"] = fanout.run_mqtt(mosquitto.port, f"r{r}-fan", *fan)
                out(f"round {r} mosquitto: {_brief(one['mosquitto'])}")
            result["rounds"].append(one)
    finally:
        if mosquitto is not None:
            mosquitto.stop()
        cluster.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def _cpu(cluster: Cluster) -> dict[str, float]:
    """CPU seconds (user + system) of each node's processes, by role."""
    import psutil

    found: dict[str, float] = {}
    for name, node in cluster.nodes.items():
        try:
            root = psutil.Process(node["proc"].pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        for proc in procs:
            try:
                line = " ".join(proc.cmdline())
                times = proc.cpu_times()
            except psutil.Error:
                continue
            role = next(
                (r for r in ("daphne", "celery", "runnode") if r in line), "other"
            )
            key = f"{name} {role}"
            found[key] = found.get(key, 0.0) + times.user + times.system
    return found


def _db_stats(cluster: Cluster) -> dict[str, dict[str, int]]:
    if not cluster.pg_databases:
        return {}
    names = [*cluster.pg_databases]
    names += [f"dce2e_{cluster.pg_tag}_{n}" for n in cluster.nodes]
    return pg_stats(cluster.pg_server, names)


def _per_event(
    before: dict[str, dict[str, int]], after: dict[str, dict[str, int]], events: int
) -> dict[str, dict[str, float]]:
    return {
        db: {k: (v - before.get(db, {}).get(k, 0)) / events for k, v in counts.items()}
        for db, counts in after.items()
    }


def _brief(got: dict[str, Any]) -> str:
    return (
        f"p50 {got['p50_ms']:.1f} ms, p99 {got['p99_ms']:.1f} ms, "
        f"max {got['max_ms']:.1f} ms, {got['received']}/{got['expected']} frames"
    )


def report(result: dict[str, Any]) -> None:
    rounds = result["rounds"]
    for side in rounds[0]:
        for q in ("p50_ms", "p99_ms"):
            s = summary([one[side][q] for one in rounds])
            out(f"{side:<12} {q}: {s['median']:.1f} [{s['min']:.1f}-{s['max']:.1f}]")
        if "mosquitto" in rounds[0] and side != "mosquitto":
            ratios = [
                one[side]["p99_ms"] / one["mosquitto"]["p99_ms"] for one in rounds
            ]
            s = summary(ratios)
            out(f"{side:<12} p99 / mosquitto p99: {s['median']:.2f} "
                f"[{s['min']:.2f}-{s['max']:.2f}] (target <= 3)")  # fmt: skip
    for side, got in rounds[-1].items():
        if "cpu_ms_per_event" in got:
            out(f"\nCPU per event (ms), {side} writes (last round), by node, process:")
            for where, ms in got["cpu_ms_per_event"].items():
                out(f"    {where:<40} {ms:8.3f}")
        if "budget" not in got:
            continue
        out(f"\nlatency budget, {side} writes (last round), ms p50 / p99:")
        for node, stages in got["budget"].items():
            out(f"  {node} (as primary of its subscribers)")
            for stage, fig in stages.items():
                out(f"    {stage:<26} {fig['p50_ms']:8.2f} {fig['p99_ms']:8.2f}"
                    f"   {budget.describe(stage)}")  # fmt: skip
        out("  statements per event (Django's, by node, database and thread):")
        for where, n in got["statements_per_event"].items():
            if n >= 0.01:
                out(f"    {where:<40} {n:8.2f}")
        for db, counts in got.get("database_per_event", {}).items():
            out(f"  {db} per event: " + ", ".join(
                f"{k} {v:.2f}" for k, v in counts.items()))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--redundancy", type=int, default=1)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--writers", default="rest,ws")
    parser.add_argument("--no-mosquitto", action="store_true")
    parser.add_argument("--budget", action="store_true")
    parser.add_argument("--output", default="")
    args = parser.parse_args()
    result = run(args)
    report(result)
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
