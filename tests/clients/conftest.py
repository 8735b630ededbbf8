"""Fixtures of the clients tests: Celery sends recorded instead of sent."""

from typing import Any

import pytest

from clients import dispatch


def recorder(monkeypatch: Any, name: str) -> list[tuple[Any, ...]]:
    """Replace ``clients.dispatch.<name>`` with one that records its arguments."""
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(dispatch, name, lambda *args: calls.append(args))
    return calls


@pytest.fixture
def adopted(monkeypatch):
    """The ``adopt`` tasks sent (to their node), recorded instead."""
    return recorder(monkeypatch, "adopt_on")


@pytest.fixture
def dropped(monkeypatch):
    """The ``drop_queue`` tasks sent, recorded instead."""
    return recorder(monkeypatch, "drop_queue_on")
