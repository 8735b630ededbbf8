"""Hostile frames at the transport, on a real node: a frame over
DURABLECACHE_MAX_FRAME_BYTES is answered 4413 from its header, whatever its
size or shape, and its client is released as after any close."""

import pytest

from tests.integration.harness import Cluster, wait_for
from tests.integration.rawws import BINARY, CONTINUATION, TEXT, Closed, RawSocket

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

LIMIT = 65536


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """One node whose frames may be at most 64 KiB."""
    c = Cluster(
        tmp_path_factory.mktemp("small"),
        settings={"DURABLECACHE_MAX_FRAME_BYTES": str(LIMIT)},
    )
    try:
        c.migrate()
        c.start_node("node-1")
        c.user = c.token("app")
        yield c
    finally:
        c.close()


def connect(cluster: Cluster) -> RawSocket:
    return RawSocket(cluster.nodes["node-1"]["port"], cluster.user)


def closed_code(sock: RawSocket) -> int | None:
    """Read until the server closes; return its close code (None: a drop)."""
    while True:
        try:
            sock.recv_frame()
        except Closed as closed:
            return closed.code


def released(cluster: Cluster, durable_id: str) -> bool:
    status, body = cluster.rest("GET", f"/api/v1/clients/{durable_id}/", cluster.user)
    return status == 200 and body["state"] == "disconnected"


def padded(size: int) -> bytes:
    """A JSON frame of exactly ``size`` bytes."""
    head = b'{"type": "nope", "id": "big", "pad": "'
    return head + b"x" * (size - len(head) - 2) + b'"}'


@pytest.mark.parametrize(
    "size", [LIMIT + 1, 1 << 20], ids=["one-byte-over", "one-mebibyte"]
)
def test_a_text_frame_over_the_limit_closes_4413(small, size):
    with connect(small) as sock:
        assert sock.hello(durable_id=f"big-{size}")["type"] == "welcome"
        sock.send_frame(TEXT, padded(size))
        assert closed_code(sock) == 4413
    # Released as after any drop: the durable id may say hello again.
    wait_for(lambda: released(small, f"big-{size}"), timeout=20)
    with connect(small) as sock:
        assert sock.hello(durable_id=f"big-{size}")["type"] == "welcome"


def test_a_frame_at_the_limit_is_answered(small):
    with connect(small) as sock:
        sock.hello()
        sock.send_frame(TEXT, padded(LIMIT))
        reply = sock.recv_json()
        assert (reply["type"], reply["id"], reply["code"]) == (
            "error",
            "big",
            "unknown_type",
        )


def test_the_answer_comes_from_the_header_before_any_payload(small):
    # A header announcing 1 GiB and no payload at all: the close comes at
    # once, so nothing of the payload was waited for or buffered.
    with connect(small) as sock:
        sock.hello()
        sock.send_header(TEXT, 1 << 30)
        assert closed_code(sock) == 4413


def test_a_binary_frame_over_the_limit_closes_4413(small):
    with connect(small) as sock:
        sock.hello()
        sock.send_frame(BINARY, b"\xff" * (LIMIT + 1))
        assert closed_code(sock) == 4413


def test_a_message_over_the_limit_in_small_fragments_closes_4413(small):
    with connect(small) as sock:
        sock.hello()
        fragment = b"x" * 4096
        sock.send_frame(TEXT, b'{"pad": "' + fragment, fin=False)
        for _ in range(LIMIT // len(fragment)):
            sock.send_frame(CONTINUATION, fragment, fin=False)
        sock.send_frame(CONTINUATION, b'"}')
        assert closed_code(sock) == 4413


def test_an_oversized_frame_before_hello_closes_4413(small):
    with connect(small) as sock:
        sock.send_frame(TEXT, padded(1 << 20))
        assert closed_code(sock) == 4413
