"""The Celery app (Celery's Django recipe); settings under CELERY_."""

import os
from typing import Any

from celery import Celery
from celery.signals import (
    task_postrun,
    task_prerun,
    task_revoked,
    worker_init,
    worker_ready,
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "durablecache.settings")

app = Celery("durablecache")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _mark_progress_from_now(**_: Any) -> None:
    from clients import fanout
    from durablecache.supervision import liveness

    liveness.enable()
    fanout.on_batch_progress(liveness.beat)


@worker_ready.connect
def _say_ready(**_: Any) -> None:
    from django.conf import settings

    from clients import tasks
    from durablecache import server
    from durablecache.supervision import liveness

    tasks.listen_for_fanout(settings.DURABLECACHE_NODE_NAME)
    liveness.mark_ready()
    server.freeze_startup_heap()


@task_prerun.connect
@task_postrun.connect
@task_revoked.connect
def _progress(**_: Any) -> None:
    from durablecache.supervision import liveness

    liveness.beat()


@task_prerun.connect
@task_postrun.connect
def _check_connections(**_: Any) -> None:
    """What Django does around each request: close this thread's database
    connections that failed or outlived ``CONN_MAX_AGE`` (Celery's fixup no
    longer closes them all per task: settings.CELERY_DB_REUSE_MAX)."""
    from django.db import close_old_connections

    close_old_connections()
