"""Ports and health probes used while processes start: never a self-connect."""

import http.server
import socket
import threading

import pytest

from durablecache.supervision import processes


def _ephemeral_low() -> int:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
        return int(ports.read().split()[0])


def test_free_ports_are_consecutive_bindable_and_below_the_ephemeral_range():
    base = processes.free_ports(3)

    assert base + 3 <= _ephemeral_low()
    with socket.socket() as a, socket.socket() as b, socket.socket() as c:
        for offset, sock in enumerate((a, b, c)):
            sock.bind(("127.0.0.1", base + offset))


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/healthz/" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _Ok)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


def test_http_ok_is_true_only_for_a_200(server):
    assert processes.http_ok(f"{server}/healthz/") is True
    assert processes.http_ok(f"{server}/missing/") is False


def test_http_ok_is_false_while_nobody_listens():
    port = processes.free_ports()

    assert processes.http_ok(f"http://127.0.0.1:{port}/healthz/") is False


class _SelfBoundSocket(socket.socket):
    """A socket whose kernel-chosen source port is the port it will call:
    the case that would connect it to itself."""

    target = 0

    def getsockname(self):
        return ("127.0.0.1", self.target)

    def connect(self, address):
        raise AssertionError("the probe must not connect from the port it calls")


def test_the_probe_never_connects_from_the_port_it_calls(monkeypatch):
    port = processes.free_ports()
    _SelfBoundSocket.target = port
    monkeypatch.setattr(processes.socket, "socket", _SelfBoundSocket)

    assert processes.http_ok(f"http://127.0.0.1:{port}/healthz/") is False


def test_free_ports_stay_below_a_low_ephemeral_range(monkeypatch):
    monkeypatch.setattr(processes, "_ephemeral_low", lambda: 10000)

    base = processes.free_ports(2)

    assert base >= 1024
    assert base + 2 <= 10000
