"""Test settings: the main module plus only what tests need."""

from durablecache.settings import *  # noqa: F403

CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
CELERY_BROKER_URL = "memory://"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
DURABLECACHE_NODE_NAME = "node-1"
DURABLECACHE_POLL_S = 0.2

# Threads of database_sync_to_async must not keep connections open past a
# test: PostgreSQL refuses to drop a test database still in use.
for _alias in DATABASES.values():  # noqa: F405
    _alias["CONN_MAX_AGE"] = 0
