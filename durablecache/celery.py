"""The Celery app (Celery's Django recipe); settings under CELERY_."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "durablecache.settings")

app = Celery("durablecache")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
