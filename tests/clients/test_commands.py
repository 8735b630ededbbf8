"""Operator commands: issue_token and durable list/show/close."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from rest_framework.authtoken.models import Token

from clients import services
from clients.models import DurableClient
from tests.helpers import run_python

pytestmark = pytest.mark.django_db(databases=["default", "node"])


def run(*args):
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_issue_token_creates_the_user_and_prints_the_token_last():
    output = run("issue_token", "carol", "--operator")
    token = output.strip().splitlines()[-1]
    found = Token.objects.select_related("user").get(key=token)
    assert found.user.username == "carol"
    assert found.user.is_staff
    # A second call prints the same token.
    assert run("issue_token", "carol").strip().splitlines()[-1] == token


def test_durable_list_show_and_close(user):
    options = services.parse_hello_options({"durable_id": "cli-1"})
    services.client_hello(user=user, socket_id="ch", options=options)
    assert "cli-1" in run("durable", "list")
    shown = json.loads(run("durable", "show", "cli-1"))
    assert shown["state"] == "connected"
    assert shown["primary"] == "node-1"
    run("durable", "close", "cli-1")
    assert not DurableClient.objects.filter(durable_id="cli-1").exists()
    with pytest.raises(CommandError):
        run("durable", "show", "cli-1")


def test_durable_list_and_show_print_a_gap(user):
    options = services.parse_hello_options({"durable_id": "cli-1", "max_queued": 9})
    client = services.client_hello(user=user, socket_id="s", options=options).client
    DurableClient.objects.filter(pk=client.pk).update(
        gap_since=41, gap_dropped=9, gap_reason="overflow"
    )
    assert "gap since 41 (9 dropped, overflow)" in run("durable", "list")
    shown = json.loads(run("durable", "show", "cli-1"))
    assert shown["gap"] == {"since": 41, "dropped": 9, "reason": "overflow"}
    assert shown["max_queued"] == 9


def test_every_command_loads_in_a_fresh_process(tmp_path):
    """Each command imports cleanly on its own (no import cycle at startup)."""
    for command in ("durable", "issue_token", "runnode", "runcluster"):
        result = run_python(["manage.py", command, "--help"], tmp_path)
        assert result.returncode == 0, result.stderr


def test_durable_show_lists_cqs_and_close_cq_closes_one(user, region):
    options = services.parse_hello_options({"durable_id": "cli-1"})
    client = services.client_hello(user=user, socket_id="ch", options=options).client
    services.cq_register(
        client=client, name="big", region="prices", query="value > 5", durable=True
    )
    shown = json.loads(run("durable", "show", "cli-1"))
    assert shown["cqs"] == [
        {"name": "big", "region": "prices", "query": "value > 5", "durable": True}
    ]
    assert "closed" in run("durable", "close-cq", "cli-1", "big")
    assert not client.cqs.exists()
    with pytest.raises(CommandError, match="no continuous query"):
        run("durable", "close-cq", "cli-1", "big")
