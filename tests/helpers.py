"""Assertions and set-ups shared by the tests."""

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from cache.models import Node
from clients import services
from clients.matching import parse_selector

ROOT = Path(__file__).resolve().parents[1]


def run_python(args, data_dir):
    """``python *args`` in a fresh process at the repository's root, on the
    embedded defaults with its files under ``data_dir`` (none of this
    process's project settings)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DURABLECACHE_", "DJANGO_", "PYTEST"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="durablecache.settings",
        DURABLECACHE_DATA_DIR=str(data_dir),
    )
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def assert_error(response, status, code=None):
    """Every error under /api/ is {"error": {"code", "message"}}."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    assert body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code
    return body["error"]


def follow_pages(api, url):
    """Collect every page of a list by following ``next`` links."""
    pages = []
    while url:
        response = api.get(url)
        assert response.status_code == 200, response.content
        pages.append(response.json()["results"])
        url = response.json()["next"]
    return pages


def connected_client(
    user, durable_id, region="prices", *, durable=True, hello=None, **selector
):
    """A durable client said hello on node-1 (with the ``hello`` fields
    given, if any), with interest in ``region`` (``all_keys`` unless a
    selector is given; a durable one unless ``durable`` is false), no
    image."""
    options = services.parse_hello_options({"durable_id": durable_id, **(hello or {})})
    client = services.client_hello(
        user=user, socket_id=durable_id, options=options
    ).client
    services.interest_register(
        client=client,
        region=region,
        selector=parse_selector(selector or {"all_keys": True}),
        is_durable=durable,
        policy="none",
    )
    return client


def queue_row(queue, seq, *, event_id=None, ts=None, value=None, version=1, **row):
    """A queue row of ``queue`` (a QueueState) at ``seq`` and the event it
    names (stored once: a second queue's row of the same seq shares it).
    ``row``: the row's ``region``, ``key``, ``op``, ``conflates``, ``cq``."""
    import uuid

    from queues.models import QueuedEvent, QueueEntry

    QueuedEvent.objects.get_or_create(
        seq=seq,
        defaults={
            "event_id": event_id or uuid.uuid4().hex,
            "region": row.get("region", "r"),
            "key": row.get("key"),
            "op": row.get("op", "create"),
            "value": value,
            "version": version,
            "ts": ts or timezone.now(),
        },
    )
    return QueueEntry.objects.create(
        queue=queue, seq=seq, through=row.pop("through", seq), **row
    )


def queued_rows(client_id):
    """A client's queue rows in this node store, each with its event (the
    row's seq, conflates and cq, the event's fields), in seq order."""
    from queues.selectors import queue_entries_after

    return queue_entries_after(client_id=client_id, after=0, limit=1_000_000)


def queued_seqs(client_id):
    """The seqs queued for a client in this node store, in order (a span's
    each)."""
    return [held.seq for held in queued_rows(client_id)]


def node_row(
    name,
    *,
    down=False,
    age_s=None,
    draining=False,
    url="http://127.0.0.1:1",
    fanout_through=0,
    save=True,
):
    """A node's row, started an hour ago: its heartbeat ``age_s`` seconds old
    (well past the node timeout when ``down``, now otherwise); saved unless
    ``save`` is false. The default URL refuses connections: never probed
    live."""
    now = timezone.now()
    if age_s is None:
        age_s = settings.DURABLECACHE_NODE_TIMEOUT_S * 10 if down else 0
    row = Node(
        name=name,
        url=url,
        started_at=now - timedelta(hours=1),
        last_heartbeat=now - timedelta(seconds=age_s),
        is_draining=draining,
        fanout_through=fanout_through,
    )
    if save:
        row.save()
    return row


def hello(user, durable_id="d1", socket_id="ch-1", **extra):
    """Say ``hello`` on this node (node-1) as the websocket does; ``extra``
    are more hello fields (``timeout``, ``redundancy``, ...). Returns the
    service's ``HelloResult``."""
    options = services.parse_hello_options({"durable_id": durable_id, **extra})
    return services.client_hello(user=user, socket_id=socket_id, options=options)
