"""Fuzz the entry paths of a real node with odd keys (seeded: FUZZ_SEED).

Each key is a path segment built from pieces: every control character
percent-encoded (``%00``-``%1F``, ``%7F``, C1 as ``%C2%80``-``%C2%9F``),
``%2F``, ``%25``, dot segments (``.``, ``..``, ``%2E%2E``), escapes that
are not UTF-8, plain characters, and raw bytes that HTTP does not allow
in a request line. Requests go out byte for byte (no client normalises
or refuses anything). Each key must either round-trip as itself (PUT, GET,
invalidate and DELETE name the same key, with the value sent) or be
refused with 400 ``{error: {code, message}}`` by every door; ``putall``
with such keys is all or nothing; and in the end the region lists exactly
the keys accepted, with their values: no other key appeared.

A raw control byte or a raw non-ASCII byte in the request line is not
HTTP: the HTTP server refuses it (400, no JSON body) before any view.
"""

import json
import os
import random
import socket
import time
from typing import Any
from urllib.parse import quote, unquote_to_bytes, urlsplit

import pytest

from tests.integration.harness import create_region

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SEED = int(os.environ.get("FUZZ_SEED", "27"))
KEYS = int(os.environ.get("FUZZ_KEYS", "3000"))
REGION = "odd"
BASE = f"/api/v1/regions/{REGION}"

ENCODED = [
    *(f"%{byte:02X}" for byte in range(0x20)),
    *(f"%{byte:02x}" for byte in (0x1F, 0x0A, 0x00)),
    "%7F",
    *(f"%C2%{byte:02X}" for byte in range(0x80, 0xA0)),
    "%2F",
    "%2f",
    "%25",
    "%252F",
    "%251F",
    "%2E",
    "%20",
    "%3F",
    "%23",
    "%E2%80%A8",
    "%F0%9F%98%80",
    "%EF%BF%BD",
    "%FF",
    "%C0%AF",
    "%ED%A0%80",
    "%E2%82",
]
PLAIN = ["a", "k", "Z9", "-", "_", "~", ".", "..", ":", "@", "!", "$", "&", "'"]
PLAIN += ["(", ")", "*", "+", ",", ";", "="]
# Raw bytes, each a character of a latin-1 string (the segment's bytes).
RAW = ["\x00", "\x01", "\x09", "\x1f", "\x7f", "\xc3\xa9", "\xff"]
DOTS = [".", "..", "%2E", "%2E%2E", ".%2E", "%2e.", "...", "%2E%2E%2F%2E%2E"]


# Sent first, whatever the seed: each control character alone and inside a
# key, each dot segment, each odd escape.
FIXED = [
    *ENCODED,
    *(f"a{piece}b" for piece in ENCODED),
    *DOTS,
    *RAW,
    *(f"a{raw}b" for raw in RAW),
    "a%2Fb",
    "%2F%2F",
    "a%2F..%2Fb",
    "%2E%2E%2Fx",
]


def segment(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.08:
        return rng.choice(DOTS)
    if roll < 0.11:
        return rng.choice(
            ["x" * 512, "x" * 513, "%41" * 512, "%41" * 513, quote("é" * 256)]
        )
    pieces = []
    for _ in range(rng.randrange(1, 6)):
        kind = rng.random()
        if kind < 0.45:
            pieces.append(rng.choice(ENCODED))
        elif kind < 0.97:
            pieces.append(rng.choice(PLAIN))
        else:
            pieces.append(rng.choice(RAW))
    return "".join(pieces)


def valid_key(key: str) -> bool:
    """docs/protocol.md, "Selectors and limits": 1-512 characters, none of
    category Cc, no lone surrogate."""
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return 1 <= len(key) <= 512 and not any(
        ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in key
    )


def expected_key(seg: str) -> str | None:
    """The key ``seg`` (ASCII) spells, or None when no entry can have it."""
    try:
        key = unquote_to_bytes(seg).decode("utf-8")
    except UnicodeDecodeError:
        return None
    return key if valid_key(key) else None


def not_http(seg: str) -> bool:
    """Whether the segment holds a byte HTTP refuses in a request line."""
    return any(ord(ch) < 0x20 or ord(ch) >= 0x80 for ch in seg)


class Http:
    """Requests sent byte for byte to one node, one connection each."""

    def __init__(self, port: int, token: str) -> None:
        self.port, self.token = port, token
        self.sent = 0

    def __call__(self, method: str, target: str, body: Any = None) -> tuple[int, Any]:
        self.sent += 1
        data = b"" if body is None else json.dumps(body).encode()
        head = (
            f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
            f"Authorization: Token {self.token}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
        )
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
            sock.sendall(head.encode("latin-1") + data)  # the segment's bytes
            response = b""
            while chunk := sock.recv(65536):
                response += chunk
        status_line, _, rest = response.partition(b"\r\n")
        _, _, content = rest.partition(b"\r\n\r\n")
        status = int(status_line.split()[1])
        try:
            return status, json.loads(content) if content else None
        except ValueError:
            return status, content


def assert_error(status: int, body: Any, expected: int, context: Any) -> None:
    assert status == expected, (context, status, body)
    assert is_error_body(body), (context, body)


def is_error_body(body: Any) -> bool:
    return (
        isinstance(body, dict)
        and set(body) == {"error"}
        and set(body["error"]) == {"code", "message"}
        and bool(body["error"]["message"])
    )


class Keys:
    """The oracle: what the region holds, by key (value and version)."""

    def __init__(self, http: Http) -> None:
        self.http = http
        self.live: dict[str, Any] = {}
        self.versions: dict[str, int] = {}
        self.accepted = self.refused = 0

    def refused_everywhere(self, seg: str, status: int, body: Any) -> None:
        self.refused += 1
        url = f"{BASE}/entries/{seg}/"
        assert status == 400, (seg, status, body)
        if not_http(seg):
            return  # the HTTP server's own 400: not a request yet
        assert is_error_body(body), (seg, body)
        for method, target in [("GET", url), ("DELETE", url)]:
            status, body = self.http(method, target)
            assert_error(status, body, 400, (method, seg))
        status, body = self.http("POST", f"{url}invalidate/")
        assert_error(status, body, 400, seg)

    def put(self, seg: str, value: Any) -> None:
        key = expected_key(seg)
        url = f"{BASE}/entries/{seg}/"
        status, body = self.http("PUT", url, {"value": value})
        if key is None or not_http(seg):
            self.refused_everywhere(seg, status, body)
            return
        self.accepted += 1
        version = self.versions.get(key, 0) + 1
        assert status == 200, (seg, key, status, body)
        assert (body["key"], body["value"], body["version"]) == (key, value, version)
        self.versions[key], self.live[key] = version, value
        status, body = self.http("GET", url)
        assert status == 200, (seg, body)
        assert (body["key"], body["value"]) == (key, value), (seg, body)

    def invalidate_and_destroy(self, seg: str) -> None:
        key = expected_key(seg)
        assert key is not None
        url = f"{BASE}/entries/{seg}/"
        status, body = self.http("POST", f"{url}invalidate/")
        assert (status, body["key"]) == (200, key), (seg, body)
        status, body = self.http("GET", url)
        assert (status, body["key"], body["value"]) == (200, key, None), (seg, body)
        status, body = self.http("DELETE", url)
        assert (status, body["key"]) == (200, key), (seg, body)
        status, body = self.http("GET", url)
        assert_error(status, body, 404, seg)
        self.versions[key] += 2  # an invalidate and a destroy
        del self.live[key]

    def putall(self, keys: list[str]) -> None:
        entries = {key: f"all-{n}" for n, key in enumerate(keys)}
        status, body = self.http("POST", f"{BASE}/putall/", {"entries": entries})
        if not entries or not all(valid_key(key) for key in entries):
            assert_error(status, body, 400, entries)
            return
        assert status == 200, (entries, body)
        assert sorted(e["key"] for e in body["events"]) == sorted(entries)
        for key, value in entries.items():
            self.versions[key] = self.versions.get(key, 0) + 1
            self.live[key] = value

    def listed(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        target = f"{BASE}/entries/?limit=1000"
        while target:
            status, body = self.http("GET", target)
            assert status == 200, body
            for entry in body["results"]:
                assert entry["key"] not in found
                found[entry["key"]] = entry["value"]
            target = ""
            if body["next"]:
                link = urlsplit(body["next"])
                target = f"{link.path}?{link.query}"
        return found


def test_odd_keys_round_trip_or_are_refused(live):
    started = time.monotonic()
    create_region(live, REGION)
    rng = random.Random(SEED)
    http = Http(live.nodes["node-1"]["port"], live.user)
    keys = Keys(http)
    written: list[str] = []
    try:
        for n in range(len(FIXED) + KEYS):
            seg = FIXED[n] if n < len(FIXED) else segment(rng)
            keys.put(seg, n)
            if expected_key(seg) is not None and not not_http(seg):
                written.append(seg)
                if rng.random() < 0.1:
                    keys.invalidate_and_destroy(seg)
            if n % 50 == 49:
                odd = [rng.choice(["\x00", "\x1f", "\x85", "\ud800", "x" * 513, ""])]
                sample = rng.sample(written, min(3, len(written)))
                picked = [key for s in sample if (key := expected_key(s))]
                keys.putall(picked + (odd if rng.random() < 0.5 else []))
    except AssertionError as exc:
        raise AssertionError(f"seed {SEED}: {exc}") from exc
    assert keys.listed() == keys.live  # exactly the keys accepted, no other
    elapsed = time.monotonic() - started
    print(  # noqa: T201 (the run's summary, shown with -s)
        f"\nrest fuzz: seed {SEED}, {len(FIXED) + KEYS} keys ({keys.accepted} accepted,"
        f" {keys.refused} refused), {http.sent} requests, {elapsed:.1f} s"
    )
