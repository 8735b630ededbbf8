"""Fixtures of the sockets' tests."""

import pytest
from daphne.server import Server


@pytest.fixture
def server() -> Server:
    """Daphne's server, bare: what ``sockets.wire`` reads of it."""
    daphne = Server.__new__(Server)
    daphne.connections = {}
    return daphne
