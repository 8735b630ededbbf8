"""Log lines: DURABLECACHE_LOG_FORMAT=json writes one JSON object per line
with the node and, where one is handled, the durable id; text stays as it
was; any other value stops the process at start."""

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from clients import services
from common import logs
from sockets import registrations

BASE_DIR = Path(settings.BASE_DIR)

SNIPPET = """
import logging
import django
django.setup()
from common import logs
logging.getLogger("clients.fanout").warning("plain %s", "line")
with logs.handling("orders-7"):
    logging.getLogger("sockets.consumers").error("with an id")
"""


def run_snippet(log_format: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "durablecache.settings",
        "DURABLECACHE_NODE_NAME": "node-7",
        "DURABLECACHE_LOG_FORMAT": log_format,
    }
    return subprocess.run(
        [sys.executable, "-c", SNIPPET],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_json_format_is_one_object_per_line_with_node_and_durable_id() -> None:
    done = run_snippet("json")
    assert done.returncode == 0, done.stderr
    first, second = (json.loads(line) for line in done.stderr.splitlines())
    assert set(first) == {"timestamp", "level", "logger", "node", "message"}
    assert (first["level"], first["logger"], first["node"], first["message"]) == (
        "WARNING",
        "clients.fanout",
        "node-7",
        "plain line",
    )
    assert first["timestamp"].endswith("+00:00")
    assert second["durable_id"] == "orders-7"
    assert (second["level"], second["message"]) == ("ERROR", "with an id")


def test_text_format_is_unchanged() -> None:
    done = run_snippet("")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 2
    assert lines[0].endswith(" WARNING clients.fanout plain line")
    assert lines[1].endswith(" ERROR sockets.consumers with an id")


def test_a_bad_log_format_stops_the_process_at_start() -> None:
    done = run_snippet("xml")
    assert done.returncode != 0
    assert (
        "ImproperlyConfigured: DURABLECACHE_LOG_FORMAT must be one of text, json,"
        " got 'xml'" in done.stderr
    )


@pytest.fixture
def records() -> Iterator[list[logging.LogRecord]]:
    """Records of the logger ``tests.logs``, through the ContextFilter."""
    got: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = got.append  # type: ignore[method-assign]
    handler.addFilter(logs.ContextFilter())
    logger = logging.getLogger("tests.logs")
    logger.addHandler(handler)
    yield got
    logger.removeHandler(handler)


@pytest.mark.django_db(databases=["default", "node"])
def test_a_rest_request_on_a_client_logs_with_its_durable_id(
    api: Any, records: list[logging.LogRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    def client_delete(**_: Any) -> None:
        logging.getLogger("tests.logs").warning("deleting")

    monkeypatch.setattr(services, "client_delete", client_delete)
    assert api.delete("/api/v1/clients/orders-7/").status_code == 204
    logging.getLogger("tests.logs").warning("after the request")
    during, after = records
    assert (during.durable_id, during.node) == ("orders-7", "node-1")  # type: ignore[attr-defined]
    assert not hasattr(after, "durable_id")


@pytest.mark.django_db(transaction=True, databases=["default", "node"])
async def test_a_socket_logs_with_its_durable_id_after_hello(
    session: Any,
    token: str,
    region: Any,
    records: list[logging.LogRecord],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    register = registrations.interest_register

    async def logged(client_id: Any, frame: dict[str, Any]) -> Any:
        logging.getLogger("tests.logs").warning("registering")
        return await register(client_id, frame)

    monkeypatch.setattr(registrations, "interest_register", logged)
    sock, _ = await session(token, durable_id="orders-7")
    await sock.register(all_keys=True, durable=True, policy="none")
    (record,) = records
    assert record.durable_id == "orders-7"  # type: ignore[attr-defined]
