"""Command line: `python -m durablecache_client subscribe ...`.

Prints one JSON line on stdout for everything the subscriber learns: the
node it connected to (`"type": "connected"`, then `"reconnected"` after
each reconnect or failover), the image of its interest and the initial
result of each `--cq` (`"image"`), every event (`"event"`, with its `cq`
list when it concerns CQs) and the replay marker (`"marker"`). Ctrl-C (or
SIGTERM) closes the client.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from typing import Any, TextIO

from .client import AsyncDurableClient
from .errors import DurableCacheError
from .events import (
    CacheListener,
    CqEvent,
    CqListener,
    EntryEvent,
    Gap,
    Marker,
    Welcome,
)
from .region import Region


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the CLI."""
    parser = argparse.ArgumentParser(prog="python -m durablecache_client")
    commands = parser.add_subparsers(dest="command", required=True)
    sub = commands.add_parser("subscribe", help="print events as JSON lines")
    sub.add_argument(
        "--url",
        action="append",
        required=True,
        help="ws://HOST:PORT/ws/v1/subscribe (repeat for several nodes)",
    )
    sub.add_argument(
        "--token",
        default=os.environ.get("DURABLECACHE_TOKEN"),
        help="API token (default: $DURABLECACHE_TOKEN)",
    )
    sub.add_argument("--durable-id", default=None)
    sub.add_argument("--timeout", type=int, default=300, help="durable timeout, s")
    sub.add_argument("--redundancy", type=int, default=0)
    sub.add_argument(
        "--max-queued",
        type=int,
        default=None,
        help="the most events the queue holds while away (default: the server's)",
    )
    sub.add_argument(
        "--conflate", choices=("server", "true", "false"), default="server"
    )
    sub.add_argument("--region", required=True)
    selector = sub.add_mutually_exclusive_group()
    selector.add_argument("--keys", help="comma-separated keys")
    selector.add_argument("--regex", help="regex matched against whole keys")
    selector.add_argument("--all-keys", action="store_true")
    sub.add_argument(
        "--cq",
        action="append",
        default=[],
        type=_cq_argument,
        metavar="NAME=QUERY",
        help="a continuous query on --region (repeat for several)",
    )
    sub.add_argument(
        "--policy", choices=("keys_values", "keys", "none"), default="keys_values"
    )
    sub.add_argument("--durable", action="store_true", help="durable interest and CQs")
    sub.add_argument(
        "--keepalive", action="store_true", help="close with keepalive on Ctrl-C"
    )
    sub.add_argument("-v", "--verbose", action="store_true")
    return parser


def _cq_argument(text: str) -> tuple[str, str]:
    """Parse `NAME=QUERY` (the query may hold `=` too)."""
    name, sep, query = text.partition("=")
    if not sep or not name or not query:
        raise argparse.ArgumentTypeError(f"expected NAME=QUERY, got {text!r}")
    return name, query


class _JsonLinePrinter(CacheListener, CqListener):
    """Write every event, and markers, as JSON lines.

    As the region's listener and every CQ's, it prints a delivered event
    once, whichever of them hear it (an interest and two CQs may all
    name one event); the event's `cq` list says which CQs it concerns.
    """

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._last_id: str | None = None

    def emit(self, data: dict[str, Any]) -> None:
        self.out.write(json.dumps(data) + "\n")
        self.out.flush()

    def event(self, event: EntryEvent) -> None:
        if event.id is not None:  # a resync event (no id) is printed each time
            if event.id == self._last_id:
                return  # already printed for another listener
            self._last_id = event.id
        self.emit({"type": "event", **event.to_json_dict()})

    def on_event(self, event: CqEvent) -> None:
        if event.entry is not None:
            self.event(event.entry)
        else:  # recovered by key: no delivered event behind it
            self.emit({"type": "event", **event.to_json_dict()})

    def gap(self, gap: Gap) -> None:
        self.emit(
            {
                "type": "gap",
                "since": gap.since,
                "dropped": gap.dropped,
                "reason": gap.reason,
            }
        )

    def on_close(self) -> None:
        pass

    def cq_image(self, region: Region, name: str, count: int) -> None:
        """The initial result of the CQ `name`."""
        results = sorted((region.cq_results(name) or {}).items())
        self.emit(
            {
                "type": "image",
                "region": region.name,
                "cq": name,
                "count": count,
                "entries": [
                    {"key": key, "value": value, "version": version}
                    for key, (value, version) in results
                ],
            }
        )

    def welcome(self, welcome: Welcome, *, reconnect: bool) -> None:
        data: dict[str, Any] = {
            "type": "reconnected" if reconnect else "connected",
            "node": welcome.node,
            "url": welcome.url,
            "durable_id": welcome.durable_id,
            "primary": welcome.primary,
            "secondaries": welcome.secondaries,
            "redundancy_satisfied": welcome.redundancy_satisfied,
            "pending_events": welcome.pending_event_count,
        }
        if welcome.raw.get("gap") is not None:
            data["gap"] = welcome.raw["gap"]
        self.emit(data)

    def reconnected(self, welcome: Welcome) -> None:
        self.welcome(welcome, reconnect=True)

    def image(self, region: Region, count: int, policy: str) -> None:
        """The entries (or keys) the interest's image put in the cache."""
        data: dict[str, Any] = {"type": "image", "region": region.name}
        data["count"] = count
        snapshot = sorted(region.snapshot().items())
        if policy == "keys":
            data["keys"] = [key for key, _ in snapshot]
        else:
            data["entries"] = [
                {"key": key, "value": value, "version": version}
                for key, (value, version) in snapshot
            ]
        self.emit(data)

    def marker(self, marker: Marker) -> None:
        data: dict[str, Any] = {"type": "marker", "replayed": marker.replayed}
        data["regions"] = marker.regions
        if marker.resynced:
            data["resynced"] = marker.resynced
        self.emit(data)

    after_create = after_update = after_destroy = after_invalidate = event
    after_region_clear = after_region_destroy = event


async def subscribe(
    args: argparse.Namespace,
    *,
    stop: asyncio.Event,
    out: TextIO | None = None,
    err: TextIO | None = None,
    **client_options: Any,
) -> int:
    """Run the `subscribe` command until `stop` is set; return the exit code."""
    err = err or sys.stderr
    printer = _JsonLinePrinter(out or sys.stdout)
    client = AsyncDurableClient(
        args.url,
        durable_id=args.durable_id,
        timeout=args.timeout,
        redundancy=args.redundancy,
        max_queued=args.max_queued,
        conflate=args.conflate,
        token=args.token,
        default_listener=printer,
        on_marker=printer.marker,
        on_reconnect=printer.reconnected,
        on_gap=printer.gap,
        **client_options,
    )
    try:
        printer.welcome(await client.connect(), reconnect=False)
        region = client.region(args.region)
        count = await _register(client, args)
        if count is not None:
            printer.image(region, count, args.policy)
        for name, query in args.cq:
            count = await region.register_cq(name, query, printer, durable=args.durable)
            printer.cq_image(region, name, count)
        await client.ready_for_events()
        stopped = asyncio.ensure_future(stop.wait())
        ended = asyncio.ensure_future(client.wait_closed())
        await asyncio.wait({stopped, ended}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if ended.done():
            ended.result()  # raises the fatal error
            return 1
        ended.cancel()
        await client.close(keepalive=args.keepalive)
        return 0
    except DurableCacheError as exc:
        err.write(f"error: {exc}\n")
        await client.close()
        return 1


async def _register(client: AsyncDurableClient, args: argparse.Namespace) -> int | None:
    """Register the interest the arguments name; return the image count
    (None when they name none)."""
    region = client.region(args.region)
    options = {"durable": args.durable, "policy": args.policy}
    if args.keys is not None:
        keys = [k for k in args.keys.split(",") if k]
        return await region.register_keys(keys, **options)
    if args.regex is not None:
        return await region.register_regex(args.regex, **options)
    if args.all_keys:
        return await region.register_all_keys(**options)
    return None


async def _main_subscribe(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        # Not available on Windows or off the main thread: Ctrl-C then
        # arrives as KeyboardInterrupt and the queue lives until its timeout.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, stop.set)
    return await subscribe(args, stop=stop)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m durablecache_client`."""
    args = build_parser().parse_args(argv)
    if not args.token:
        build_parser().error("--token (or DURABLECACHE_TOKEN) is required")
    if args.durable and not args.durable_id:
        build_parser().error("--durable needs --durable-id")
    if args.keys is None and args.regex is None and not args.all_keys and not args.cq:
        build_parser().error("give --keys, --regex, --all-keys or --cq")
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr
    )
    try:
        return asyncio.run(_main_subscribe(args))
    except KeyboardInterrupt:
        return 130
