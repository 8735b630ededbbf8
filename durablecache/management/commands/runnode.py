"""``manage.py runnode --name NAME --port P``: one node as one process group."""

import contextlib
import os
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from cache.validation import validate_name
from durablecache.supervision import processes
from durablecache.supervision.node import Node


class Command(BaseCommand):
    help = "Run one node: Daphne (HTTP + websockets) and its Celery worker."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--name", required=True)
        parser.add_argument("--port", type=int, required=True)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--url", help="public base URL [http://HOST:PORT]")
        parser.add_argument("--concurrency", type=int, default=4)

    def handle(self, *args: Any, **opts: Any) -> None:
        name = opts["name"]
        try:
            validate_name(name, what="node name")
        except Exception as exc:
            raise CommandError(str(exc)) from exc
        url = opts["url"] or f"http://{opts['host']}:{opts['port']}"
        if os.environ.get("DURABLECACHE_NODE_NAME") != name:
            # Settings (the node store path) depend on the node name: start
            # again with it in the environment.
            env = processes.child_env(
                DURABLECACHE_NODE_NAME=name, DURABLECACHE_NODE_URL=url
            )
            os.execve(sys.executable, [sys.executable, *sys.argv], env)  # noqa: S606
        if not settings.DURABLECACHE_REDIS_URL:
            raise CommandError(
                "runnode needs DURABLECACHE_REDIS_URL (runcluster starts an "
                "embedded Redis for a local cluster)"
            )
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)  # fails when already a group (or session) leader
        Node(name, url, opts).run(self.stdout)
