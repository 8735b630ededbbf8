"""``manage.py durable list|show ID|close ID|close-cq ID NAME``: operator CLI."""

import json
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from clients import selectors, services
from clients.api.serializers import DurableClientSerializer
from common.errors import DomainError


def _operator() -> Any:
    """The shell acts with an operator's rights (it can read the databases)."""
    user = get_user_model()(username="manage.py", is_staff=True, is_superuser=True)
    user.pk = 0
    return user


def _row(client: Any) -> dict[str, Any]:
    """The same fields as ``GET /api/v1/clients/{id}/``."""
    return dict(DurableClientSerializer(client).data)


def _gap_note(gap: dict[str, Any] | None) -> str:
    if gap is None:
        return ""
    return f"  gap since {gap['since']} ({gap['dropped']} dropped, {gap['reason']})"


class Command(BaseCommand):
    help = "List, show and close durable clients."

    def add_arguments(self, parser: Any) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("list", help="every durable client, one line each")
        show = sub.add_parser("show", help="one client as JSON, with its interests")
        show.add_argument("durable_id")
        close = sub.add_parser("close", help="close a client: drop its queue")
        close.add_argument("durable_id")
        close_cq = sub.add_parser("close-cq", help="close one continuous query")
        close_cq.add_argument("durable_id")
        close_cq.add_argument("name")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            getattr(self, "do_" + opts["action"].replace("-", "_"))(opts)
        except DomainError as exc:
            raise CommandError(exc.message) from exc

    def do_list(self, opts: dict[str, Any]) -> None:
        header = (
            f"{'durable_id':<32} {'state':<12} {'primary':<10} {'pending':>8}"
            "  expires_at"
        )
        self.stdout.write(header)
        for client in selectors.client_list(user=_operator()):
            row = _row(client)
            self.stdout.write(
                f"{row['durable_id']:<32} {row['state']:<12} {row['primary']:<10} "
                f"{row['pending_events']:>8}  {row['expires_at'] or '-'}"
                + _gap_note(row["gap"])
            )

    def do_show(self, opts: dict[str, Any]) -> None:
        client = selectors.client_visible_to(
            user=_operator(), durable_id=opts["durable_id"]
        )
        row = _row(client)
        row["interests"] = [
            {
                "id": i.pk,
                "region": i.region,
                "kind": i.kind,
                "selector": i.selector,
                "durable": i.is_durable,
                "policy": i.policy,
            }
            for i in selectors.interest_list(client=client)
        ]
        row["cqs"] = [
            {
                "name": q.name,
                "region": q.region,
                "query": q.query,
                "durable": q.is_durable,
            }
            for q in selectors.cq_list(client=client)
        ]
        self.stdout.write(json.dumps(row, indent=2))

    def do_close(self, opts: dict[str, Any]) -> None:
        services.client_delete(user=_operator(), durable_id=opts["durable_id"])
        self.stdout.write(
            f"closed {opts['durable_id']}: its queue is dropped on every host"
        )

    def do_close_cq(self, opts: dict[str, Any]) -> None:
        client = selectors.client_visible_to(
            user=_operator(), durable_id=opts["durable_id"]
        )
        if not services.cq_close(client=client, name=opts["name"], by_operator=True):
            raise CommandError(f"no continuous query {opts['name']!r}")
        self.stdout.write(f"closed continuous query {opts['name']!r}")
