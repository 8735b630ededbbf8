"""Typed helpers that read settings from the environment.

Every knob is documented in docs/configuration.md.
"""

import os
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured


def env_str(name: str, default: str = "") -> str:
    """Return the variable as a string, or the default when unset or empty."""
    value = os.environ.get(name, "")
    return value if value != "" else default


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    """Return the variable as an int; raise ImproperlyConfigured when malformed."""
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {value}")
    return value


def env_float(name: str, default: float, *, minimum: float = 0.0) -> float:
    """Return the variable as a positive float."""
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from exc
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {value}")
    return value


def env_bool(name: str, default: bool) -> bool:
    """Return the variable as a bool (1/0, true/false, yes/no, on/off)."""
    raw = os.environ.get(name, "").strip().lower()
    if raw == "":
        return default
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean, got {raw!r}")


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """Return the variable, lower-cased, if it is one of ``choices``."""
    raw = os.environ.get(name, "").strip().lower()
    if raw == "":
        return default
    if raw not in choices:
        allowed = ", ".join(choices)
        raise ImproperlyConfigured(f"{name} must be one of {allowed}, got {raw!r}")
    return raw


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    """Return a comma-separated variable as a list of non-empty items."""
    raw = os.environ.get(name, "")
    if raw.strip() == "":
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]


def database_config(
    url: str, *, sqlite_default_path: str, tuned: bool = True
) -> dict[str, Any]:
    """Turn a database URL (or the SQLite default) into a DATABASES entry.

    SQLite gets ``durablecache.server.sqlite3`` when ``tuned`` (the server
    tuning is on), Django's own backend otherwise.
    """
    if not url:
        url = f"sqlite:///{sqlite_default_path}"
    try:
        config = dj_database_url.parse(url, conn_max_age=300, conn_health_checks=True)
    except ValueError as exc:
        raise ImproperlyConfigured(f"bad database URL {url!r}: {exc}") from exc
    if config["ENGINE"] == "django.db.backends.sqlite3":
        if tuned:
            config["ENGINE"] = "durablecache.server.sqlite3"
        name = str(config.get("NAME") or "")
        if name and name != ":memory:":
            Path(name).parent.mkdir(parents=True, exist_ok=True)
        config["OPTIONS"] = {
            # IMMEDIATE avoids the read-then-write upgrade deadlock of SQLite's
            # default DEFERRED transactions when several processes write.
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    return dict(config)
