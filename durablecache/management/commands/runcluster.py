"""``manage.py runcluster --nodes N --base-port P``: a local cluster."""

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from durablecache.supervision.cluster import Cluster


class Command(BaseCommand):
    help = "Run N nodes on this machine (and an embedded Redis if none is set)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--nodes", type=int, default=3)
        parser.add_argument("--base-port", type=int, default=8000)
        parser.add_argument("--host", default="127.0.0.1")

    def handle(self, *args: Any, **opts: Any) -> None:
        count = opts["nodes"]
        if not 1 <= count <= 64:
            raise CommandError("--nodes must be between 1 and 64")
        call_command("migrate", verbosity=0, interactive=False)
        cluster = Cluster(
            count=count,
            base_port=opts["base_port"],
            host=opts["host"],
            out=self.stdout,
            err=self.stderr,
        )
        try:
            cluster.run()
        except ImproperlyConfigured as exc:  # no Redis to start: say why, briefly
            raise CommandError(str(exc)) from exc
