"""Expiry: a durable client away longer than its timeout goes, with its
queue on every host; its owner's next ``hello`` is told ``-1``."""

from django.db import transaction
from django.utils import timezone

from clients import history
from clients.models import DurableClient, LostQueue
from clients.services.ownership import clients_purge


def clients_expire() -> int:
    """Expire disconnected durable clients past their timeout; return the count.

    Idempotent: several nodes may run it at once; each client is expired by
    whoever locks it first, and its id remembered for ``pending_events: -1``.
    """
    now = timezone.now()
    due = list(
        DurableClient.objects.filter(
            is_connected=False, expires_at__lte=now, durable_id__isnull=False
        ).values_list("pk", flat=True)[:500]
    )
    count = 0
    for pk in due:
        with transaction.atomic():
            client = (
                DurableClient.objects.select_for_update()
                .filter(pk=pk, is_connected=False, expires_at__lte=now)
                .first()
            )
            if client is None:
                continue
            LostQueue.objects.update_or_create(
                durable_id=client.durable_id,
                defaults={"reason": "expired", "owner_id": client.owner_id},
            )
            history.record(client, "expired", detail=f"away over {client.timeout} s")
            clients_purge([client])
            count += 1
    return count
