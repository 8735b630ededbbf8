"""The one settings module; every deployment knob comes from the environment.

See docs/configuration.md for each variable.
"""

import warnings
from pathlib import Path

import django_stubs_ext

from durablecache.env import (
    database_config,
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_list,
    env_str,
)

# Generic Django classes (ModelAdmin[Region], ModelForm[Region]) are
# subscriptable at runtime, as django-stubs types them.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent

DATA_DIR = Path(env_str("DURABLECACHE_DATA_DIR", str(BASE_DIR / "var"))).resolve()

SECRET_KEY = env_str(
    "DJANGO_SECRET_KEY", "dev-only-insecure-key-set-DJANGO_SECRET_KEY-in-production"
)
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "cache",
    "queues",
    "clients",
    "sockets",
    "dashboard",
    "durablecache",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files (the dashboard's JS and CSS, the admin's) from the node
    # itself, straight from the apps (no collectstatic needed).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "durablecache.middleware.BodySizeLimitMiddleware",
    "durablecache.middleware.DurableIdLogMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "durablecache.urls"
ASGI_APPLICATION = "durablecache.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# The node this process belongs to; set by `manage.py runnode`.
DURABLECACHE_NODE_NAME = env_str("DURABLECACHE_NODE_NAME", "node-1")
DURABLECACHE_NODE_URL = env_str("DURABLECACHE_NODE_URL", "http://127.0.0.1:8000")

# The runtime patches of Daphne's stack, the pooled HTTP handler and the
# SQLite backend (durablecache.server); false runs the stock stack.
DURABLECACHE_SERVER_TUNING = env_bool("DURABLECACHE_SERVER_TUNING", True)

_node_store_url = env_str("DURABLECACHE_NODE_STORE_URL", "").replace(
    "{node}", DURABLECACHE_NODE_NAME
)
DATABASES = {
    "default": database_config(
        env_str("DURABLECACHE_DATABASE_URL", ""),
        sqlite_default_path=str(DATA_DIR / "cluster.sqlite3"),
        tuned=DURABLECACHE_SERVER_TUNING,
    ),
    # The node store: the queue rows this node hosts (queues app only).
    "node": database_config(
        _node_store_url,
        sqlite_default_path=str(
            DATA_DIR / "nodes" / f"{DURABLECACHE_NODE_NAME}.sqlite3"
        ),
        tuned=DURABLECACHE_SERVER_TUNING,
    ),
}
DATABASE_ROUTERS = ["queues.routers.NodeStoreRouter"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ATOMIC_REQUESTS = False

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
WHITENOISE_USE_FINDERS = True
# STATIC_ROOT exists only after collectstatic, which the finders make optional.
warnings.filterwarnings("ignore", message="No directory at: .*static")
WHITENOISE_AUTOREFRESH = DEBUG
LOGIN_URL = "/dashboard/login/"
LOGIN_REDIRECT_URL = "/dashboard/"

DURABLECACHE_REDIS_URL = env_str("DURABLECACHE_REDIS_URL", "")
if DURABLECACHE_REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # redis-py 8 reads with a 5 s socket timeout by default, the
                # same as channels_redis' 5 s BZPOPMIN: give the read room.
                "hosts": [
                    {
                        "address": DURABLECACHE_REDIS_URL,
                        "socket_timeout": 15,
                        "socket_connect_timeout": 5,
                    }
                ],
                # Doorbells only: a lost one is healed by the consumer's poll.
                "capacity": 5000,
                "expiry": 60,
                "group_expiry": 86400,
            },
        }
    }
    CELERY_BROKER_URL = DURABLECACHE_REDIS_URL
else:
    # No Redis configured (one-off management commands, unit tests): doorbells
    # and tasks go nowhere, and the rows are healed by the nodes' sweeps.
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CELERY_BROKER_URL = "memory://"

CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
# Tasks are doorbells; a lost one is healed by the next tick, so acks_late
# would buy nothing but redelivery storms after a worker restart.
CELERY_TASK_ACKS_LATE = False
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery's Django fixup closes every database connection of the task's
# thread before and after each task unless this is set: every fan-out
# opened its two connections again (on PostgreSQL, a new server backend per
# task). Set, they live across tasks and are closed every this many tasks;
# between tasks they are checked as Django checks them between requests
# (durablecache.celery: close_old_connections, CONN_MAX_AGE).
CELERY_DB_REUSE_MAX = 1000
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {
    # No unacked-message bookkeeping in Redis (a hash and a sorted set
    # written when a task is taken and again when it is acked, ~18 % of a
    # worker's CPU at 50 writes/s): tasks are acked as they start anyway
    # (no acks_late), so all it guarded is a task taken by a worker that
    # dies before starting it, which the tick heals like any lost doorbell.
    "ack_emulation": False,
    "visibility_timeout": 300,
    # Fail fast when Redis is down: a doorbell is not worth a stalled write.
    "socket_connect_timeout": 1,
    "socket_timeout": 5,
    "max_retries": 0,
}
CELERY_BROKER_CONNECTION_TIMEOUT = 1
CELERY_TASK_DEFAULT_QUEUE = "default"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "common.auth.SqlTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "common.api.exception_handler",
    "DEFAULT_PARSER_CLASSES": ["common.parsers.StrictJSONParser"],
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "STRICT_JSON": True,
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "durablecache API",
    "VERSION": "1",
    "DESCRIPTION": "Regions, entries and durable clients; see docs/protocol.md.",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI's files come from drf-spectacular-sidecar, through the
    # node's static files: the page needs no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
}

# Our own knobs (docs/configuration.md), read at call time via settings.
DURABLECACHE_HEARTBEAT_S = env_float("DURABLECACHE_HEARTBEAT_S", 1.0, minimum=0.05)
DURABLECACHE_NODE_TIMEOUT_S = env_float("DURABLECACHE_NODE_TIMEOUT_S", 5.0, minimum=0.1)
DURABLECACHE_EXPIRY_CHECK_S = env_float(
    "DURABLECACHE_EXPIRY_CHECK_S", 1.0, minimum=0.05
)
DURABLECACHE_DEFAULT_TIMEOUT_S = env_int(
    "DURABLECACHE_DEFAULT_TIMEOUT_S", 300, minimum=0
)
DURABLECACHE_MAX_FRAME_BYTES = env_int(
    "DURABLECACHE_MAX_FRAME_BYTES", 1048576, minimum=1024
)
DURABLECACHE_MAX_BODY_BYTES = env_int(
    "DURABLECACHE_MAX_BODY_BYTES", 8388608, minimum=1024
)
DATA_UPLOAD_MAX_MEMORY_SIZE = DURABLECACHE_MAX_BODY_BYTES
# Threads per Daphne process that run REST/dashboard requests (each keeps
# its database connections across requests; durablecache.server.pooled_http).
DURABLECACHE_HTTP_THREADS = env_int("DURABLECACHE_HTTP_THREADS", 8, minimum=1)
DURABLECACHE_ALLOWED_ORIGINS = env_list("DURABLECACHE_ALLOWED_ORIGINS")
# A destroyed key's row (its tombstone) is kept at least this long for
# ``since`` catch-ups, then pruned by the tick (cache.services.tombstones).
DURABLECACHE_TOMBSTONE_KEEP_S = env_float(
    "DURABLECACHE_TOMBSTONE_KEEP_S", 86400.0, minimum=0.0
)
# A durable client's queue holds at most its ``max_queued`` events (hello
# field, 1 … DURABLECACHE_MAX_QUEUED; default DURABLECACHE_DEFAULT_MAX_QUEUED);
# past it the queue overflows into a gap (docs/protocol.md, "Bounded queues").
DURABLECACHE_MAX_QUEUED = env_int("DURABLECACHE_MAX_QUEUED", 10000000, minimum=1)
DURABLECACHE_DEFAULT_MAX_QUEUED = min(
    env_int("DURABLECACHE_DEFAULT_MAX_QUEUED", 1000000, minimum=1),
    DURABLECACHE_MAX_QUEUED,
)
DURABLECACHE_REPLAY_BATCH = env_int("DURABLECACHE_REPLAY_BATCH", 500, minimum=1)
DURABLECACHE_FANOUT_BATCH = env_int("DURABLECACHE_FANOUT_BATCH", 1000, minimum=1)
DURABLECACHE_POLL_S = env_float("DURABLECACHE_POLL_S", 1.0, minimum=0.05)
# runnode restarts a worker that ran no task for this long (0 = never).
DURABLECACHE_WORKER_STALL_S = env_float("DURABLECACHE_WORKER_STALL_S", 60.0)
# Redundancy (docs/operations.md#redundancy-and-failover).
DURABLECACHE_COPY_PAGE = env_int("DURABLECACHE_COPY_PAGE", 2000, minimum=1)
DURABLECACHE_COPY_RETRY_S = env_float("DURABLECACHE_COPY_RETRY_S", 5.0, minimum=0.1)
DURABLECACHE_ACK_RELAY_S = env_float("DURABLECACHE_ACK_RELAY_S", 0.25, minimum=0.01)
DURABLECACHE_HANDOVER_S = env_float("DURABLECACHE_HANDOVER_S", 15.0, minimum=0.0)
DURABLECACHE_PROBE_PEERS = env_bool("DURABLECACHE_PROBE_PEERS", True)

# /readyz/: how long each of its checks may take (durablecache.readiness).
DURABLECACHE_READY_TIMEOUT_S = env_float(
    "DURABLECACHE_READY_TIMEOUT_S", 2.0, minimum=0.05
)

# Behind a TLS-terminating proxy (docs/operations.md#behind-a-tls-proxy).
# Every default suits plain http on 127.0.0.1 (make run): no proxy header
# trusted, cookies sent over http, no redirect, no HSTS.
DURABLECACHE_BEHIND_TLS_PROXY = env_bool("DURABLECACHE_BEHIND_TLS_PROXY", False)
DURABLECACHE_PROXY_SSL_HEADER = env_str(
    "DURABLECACHE_PROXY_SSL_HEADER", "X-Forwarded-Proto"
)
if DURABLECACHE_BEHIND_TLS_PROXY:
    # Trusted only behind a proxy that sets (or strips) this header itself.
    SECURE_PROXY_SSL_HEADER = (
        "HTTP_" + DURABLECACHE_PROXY_SSL_HEADER.upper().replace("-", "_"),
        "https",
    )
SESSION_COOKIE_SECURE = env_bool(
    "DURABLECACHE_SECURE_COOKIES", DURABLECACHE_BEHIND_TLS_PROXY
)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_SSL_REDIRECT = env_bool("DURABLECACHE_SSL_REDIRECT", False)
# runnode's start-up probe and Prometheus reach a node over plain http.
SECURE_REDIRECT_EXEMPT = [r"^healthz/$", r"^readyz/$", r"^metrics$"]
SECURE_HSTS_SECONDS = env_int("DURABLECACHE_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DURABLECACHE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("DURABLECACHE_HSTS_PRELOAD", False)
CSRF_TRUSTED_ORIGINS = env_list("DURABLECACHE_CSRF_TRUSTED_ORIGINS")

# Logs: `text` (one plain line each) or `json` (one JSON object per line,
# python-json-logger). Every record carries the node's name and, where
# there is one, the durable id being handled (common.logs).
DURABLECACHE_LOG_FORMAT = env_choice(
    "DURABLECACHE_LOG_FORMAT", "text", ("text", "json")
)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "common.logs.ContextFilter"}},
    "formatters": {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": ["levelname", "name", "node", "message"],
            "rename_fields": {"levelname": "level", "name": "logger"},
            "timestamp": "timestamp",
        },
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": DURABLECACHE_LOG_FORMAT,
            "filters": ["context"],
        }
    },
    "root": {"handlers": ["console"], "level": env_str("DJANGO_LOG_LEVEL", "WARNING")},
}
# The Celery worker logs through the LOGGING above when it is JSON; with
# text it keeps Celery's own format.
CELERY_WORKER_HIJACK_ROOT_LOGGER = DURABLECACHE_LOG_FORMAT == "text"
