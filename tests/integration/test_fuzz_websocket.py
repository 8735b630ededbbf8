"""Fuzz the subscriber socket of a real node with generated frames.

Frames are built structurally (seeded, ``FUZZ_SEED``; ``FUZZ_FRAMES`` of
them): valid and near-valid frames of every type, with fields of the wrong
type, U+0000, escaped lone surrogates, numbers out of range, deep nesting,
long strings and bad regexes; binary frames, JSON that is not an object,
text that is not JSON, text that is not UTF-8, fragments, frames over the
size limit, and bursts of bad frames. After every frame a barrier frame
(always answered, with its id) marks where the frame's answers end, and:

* a frame that is a JSON object with a readable ``id`` (a string of at
  most 128 characters at its top level) is answered with that id: by an
  error, or by its reply; only a successful ``ack`` or ``ready`` has no
  reply of its own (docs/protocol.md, "Hostile input");
* every error has a code docs/protocol.md names ("Errors and close
  codes"), and a reply is valid UTF-8 JSON;
* the socket is closed only with a code docs/protocol.md names, for the reason
  that code means (4413 after a frame over the limit, 4400 after an error,
  1000 after ``closed``, 4403/4409 after a ``hello``); it is dropped
  without a close frame only after a text frame that is not UTF-8;
* a witness, another user's durable client subscribed to the region the
  fuzzer writes into, receives every write made meanwhile through REST;
* a ``register_cq`` frame left whole is answered by ``bad_query``,
  ``bad_field`` or ``no_such_region`` — or, for a query of ``CQ_VALID``,
  by image chunks naming the CQ then ``cq_registered``;
* the node logs no traceback and still answers.
"""

import json
import os
import random
import time
from dataclasses import dataclass
from typing import Any

import pytest

from clients.cq import QueryError, compile_query
from tests.integration.harness import Cluster, create_region
from tests.integration.rawws import BINARY, CONTINUATION, TEXT, Closed, RawSocket

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SEED = int(os.environ.get("FUZZ_SEED", "27"))
FRAMES = int(os.environ.get("FUZZ_FRAMES", "10000"))
LIMIT = 65536  # DURABLECACHE_MAX_FRAME_BYTES of the node under test
WRITE_EVERY = 20  # fuzz frames between two REST writes the witness must get
REGION = "fz"
WITNESS_ID = "witness-1"

CLOSE_CODES = {1000, 4400, 4401, 4403, 4409, 4410, 4413, 4503}
MAX_QUEUED_DEFAULT = 1000000  # the hello's max_queued that never overflows here
ERROR_CODES = {
    "bad_json",
    "unknown_type",
    "bad_field",
    "no_such_region",
    "bad_regex",
    "bad_query",
    "not_ready",
    "since_too_old",
}
TYPES = [
    "hello",
    "register_interest",
    "unregister_interest",
    "register_cq",
    "close_cq",
    "put",
    "ready",
    "ack",
    "close",
]
# Query strings for register_cq (docs/protocol.md, continuous queries;
# docs/cq.md): CQ_VALID the language accepts (at its limits, and hostile
# text it reads as data: code in string literals, regex bombs as LIKE
# patterns, unicode); CQ_HOSTILE it refuses, each limit one past, things
# that look like code, quotes gone wrong. A register_cq frame left whole is
# answered by exactly one of CQ_REFUSALS, or (a valid query, once the node
# has CQs) by its image and cq_registered.
NEST = 32  # the nesting limit
CQ_VALID = [
    "key = 'a'",
    "value.price > 10 AND key LIKE 'E%'",
    f"SELECT * FROM /{REGION} p WHERE p.qty >= 1",
    "value['a b'] IN (1, 2, 'x') OR NOT (value IS NULL)",
    "value[0] <> 1.5e3",
    "(" * NEST + "key = 'a'" + ")" * NEST,
    "NOT " * NEST + "key = 'a'",
    "key IN (" + ", ".join(str(n) for n in range(64)) + ")",
    " OR ".join(f"key = '{n}'" for n in range(64)),
    "value" + ".a" * 16 + " = 1",
    "key = '" + "x" * 512 + "'",
    "key = '" + "''" * 512 + "'",
    "value.名前 = 'é€😀' AND key <> '\u2028'",
    "key = 'it''s' OR key = ''''",
    "value.__class__ = 1 OR value['__import__'] IS NOT NULL",
    "key = '__import__(''os'').system(''id'')'",
    "key = '; DROP TABLE x; --'",
    "key = '$(rm -rf /)' OR key = '`id`' OR key = '{{7*7}}'",
    "key LIKE '" + "%a" * 40 + "%b'",
    "value.s LIKE '" + "%_" * 250 + "'",
    "key LIKE '(a+)+$' OR key NOT LIKE '\\%\\_\\\\'",
    "select * from /fz WHERE TRUE",
]
CQ_HOSTILE = [
    "SELECT DISTINCT * FROM /fz",
    "SELECT * FROM /other WHERE key = 'a'",
    "key = ",
    "",
    "(" * (NEST + 1) + "key = 'a'" + ")" * (NEST + 1),
    "NOT " * (NEST + 1) + "key = 'a'",
    "(" * 5000,
    " OR ".join(f"key = '{n}'" for n in range(65)),
    "key IN (" + ", ".join(str(n) for n in range(65)) + ")",
    "key IN (" + ",".join("1" for n in range(2000)) + ")",
    "value" + ".a" * 17 + " = 1",
    "key = '" + "x" * 513 + "'",
    "key = 'a' OR " * 400 + "key = 'b'",
    "x" * 5000,
    " " * 4090 + "key = 'a'",
    "key = \u2019a\u2019",  # curly quotes
    "key\u200b = 'a'",
    "key = 'it's'",
    "key = '''",
    'key = "a"',
    "__import__('os')",
    "__import__('os').system('id')",
    "value.__class__.__bases__[0].__subclasses__()",
    "key = 'a'; DROP TABLE clients_client",
    "$(rm -rf /)",
    "key = `id`",
    "key = 'a' -- comment",
    "key = 'a' /* c */",
    "value.a = ?",
    "value.a = :x",
    "key LIKE 'x\\'",
    "key LIKE value.s",
    "length(key) > 3",
    "SELECT * FROM /fz WHERE key = 'a' ORDER BY key",
    "SELECT key FROM /fz WHERE true",
    "SELECT COUNT(*) FROM /fz WHERE true",
    "SELECT * FROM /fz a, /fz b WHERE true",
    "value[-1] = 1",
    "value.0 = 1",
    "value.a = 07",
    "value.a = 1e999",
    "5",
    "value.a IN ()",
]
# Refused by the door's field check (U+0000, a lone surrogate), not the parser.
CQ_DOOR_REFUSED = ["key = '\x00'", "key = '\ud800'"]
CQ_QUERIES = CQ_VALID + CQ_HOSTILE + CQ_DOOR_REFUSED
CQ_REFUSALS = {"bad_query", "bad_field", "no_such_region"}
BAD_REGEXES = [
    "(",
    "a{1001}",
    "(a)\\1",
    "(?=a)b",
    "(?<!a)b",
    "(a{100}){100}",
    "",
    "x" * 1025,
    "[z-a]",
    "a**",
    "\x00",
    "\ud800",
]
ODD_VALUES: list[Any] = [
    0,
    -1,
    1.5,
    True,
    False,
    None,
    [],
    {},
    "",
    "s",
    [1, "a", None],
    {"x": [{"y": None}]},
]
ODD_STRINGS = ["", " ", "é€😀", "a/b", "%2F", "..", "\n\t", "\u2028", "x" * 129]


@dataclass(frozen=True)
class Raw:
    """JSON text written as it is: ``is_json`` false when it is not JSON."""

    text: str
    is_json: bool = True


def dump(value: Any) -> tuple[str, bool]:
    """``value``'s JSON text (ASCII: U+0000 and lone surrogates escaped),
    and whether it is JSON (no Raw that is not)."""
    valid = True

    def walk(item: Any) -> str:
        nonlocal valid
        if isinstance(item, Raw):
            valid = valid and item.is_json
            return item.text
        if isinstance(item, dict):
            members = (f"{json.dumps(k)}: {walk(v)}" for k, v in item.items())
            return "{" + ", ".join(members) + "}"
        if isinstance(item, list):
            return "[" + ", ".join(walk(v) for v in item) + "]"
        return json.dumps(item)

    return walk(value), valid


@dataclass
class Frame:
    """One generated frame and what the oracle needs to know of it."""

    payload: bytes
    opcode: int = TEXT
    expected_id: str | None = None  # the id its answer must carry
    frame_type: Any = None  # its ``type`` when it is a JSON object
    fragments: int = 1
    not_utf8: bool = False
    oversized: bool = False
    names_witness: bool = False  # a hello with the witness's durable id
    # A register_cq left whole: its name, and whether its query is valid.
    cq: tuple[str, bool] | None = None

    def __post_init__(self) -> None:
        self.oversized = self.oversized or len(self.payload) > LIMIT


class Generator:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.count = 0
        self.mutated = False  # whether the last structured() spoiled its frame

    # --- pieces ---------------------------------------------------------------

    def key(self) -> Any:
        rng = self.rng
        if rng.random() < 0.8:
            return f"k{rng.randrange(50)}"
        return rng.choice([*ODD_STRINGS, "a\x00", "\ud800", "x" * 513])

    def value(self, depth: int = 0) -> Any:
        rng = self.rng
        roll = rng.random()
        if depth > 2 or roll < 0.5:
            return rng.choice([1, -2.5, "v", None, True, "é" * rng.randrange(5)])
        if roll < 0.75:
            return [self.value(depth + 1) for _ in range(rng.randrange(4))]
        return {f"f{i}": self.value(depth + 1) for i in range(rng.randrange(4))}

    def selector(self) -> dict[str, Any]:
        rng = self.rng
        roll = rng.random()
        if roll < 0.4:
            return {"keys": [self.key() for _ in range(rng.randrange(1, 4))]}
        if roll < 0.7:
            return {"regex": rng.choice(["k.*", "k[0-9]+", "(a|b)c", "k1"])}
        return {"all_keys": True}

    def region(self) -> Any:
        return self.rng.choice([REGION, REGION, REGION, "nope", "FZ", "a" * 129])

    def base(self, frame_type: str) -> dict[str, Any]:
        rng = self.rng
        if frame_type == "hello":
            return {
                "durable_id": rng.choice([None, "fz-a", "fz-b", WITNESS_ID]),
                "timeout": rng.choice([0, 60, 300]),
                "redundancy": rng.choice([0, 1, -1]),
                "conflate": rng.choice(["server", "true", "false", True]),
                "max_queued": rng.choice([1, 100, MAX_QUEUED_DEFAULT]),
            }
        if frame_type in ("register_interest", "unregister_interest"):
            frame = {"region": self.region(), **self.selector()}
            if frame_type == "register_interest":
                frame["durable"] = rng.random() < 0.3
                frame["policy"] = rng.choice(["keys_values", "keys", "none"])
            return frame
        if frame_type == "register_cq":
            return {
                "name": rng.choice(["q1", "q.2", "bad name"]),
                "region": self.region(),
                "query": rng.choice(CQ_QUERIES),
                "durable": rng.random() < 0.3,
            }
        if frame_type == "close_cq":
            return {"name": rng.choice(["q1", "q.2", "nope"])}
        if frame_type == "put":
            return {"region": self.region(), "key": self.key(), "value": self.value()}
        if frame_type == "ack":
            return {"up_to": rng.choice([0, 1, rng.randrange(10**6), 2**62])}
        if frame_type == "close":
            return {"keepalive": rng.random() < 0.5}
        return {}

    def request_id(self) -> tuple[Any, str | None]:
        """An id and what its answer must carry (None: it is not readable)."""
        rng, tag = self.rng, f"f{self.count}"
        roll = rng.random()
        if roll < 0.75:
            return tag, tag
        readable = [tag + "\x00", tag + "\ud800", tag + "\udfff!", tag.ljust(128, "~")]
        if roll < 0.9:
            chosen = rng.choice(readable)
            return chosen, chosen
        return rng.choice([tag.ljust(129, "~"), 7, None, [tag], {"id": tag}]), None

    def mutate(self, frame: dict[str, Any]) -> None:
        """Spoil one field (or the frame's shape), structurally."""
        rng = self.rng
        fields = [name for name in frame if name != "id"] or ["type"]
        name = rng.choice(fields)
        old = frame.get(name)
        how = rng.randrange(11)
        if how == 0:
            frame[name] = rng.choice(ODD_VALUES)
        elif how == 1:
            frame[name] = (old if isinstance(old, str) else "") + "\x00"
        elif how == 2:
            text = old if isinstance(old, str) else "s"
            frame[name] = text + rng.choice(["\ud800", "\udfff", "\udbff"])
        elif how == 3:
            frame[name] = Raw(
                rng.choice(
                    ["1e999", "-1E999", "9" * 5000, "1e308", "18446744073709551616"]
                )
            )
        elif how == 4:
            depth = rng.choice([199, 201, 1500, 20000])
            frame[name] = Raw("[" * depth + "]" * depth)
        elif how == 5:
            frame[name] = "x" * rng.choice([129, 513, 1025, 20000])
        elif how == 6:
            for selector in ("keys", "all_keys"):
                frame.pop(selector, None)
            frame["regex"] = rng.choice(BAD_REGEXES)
        elif how == 7:
            frame.pop(name, None)
        elif how == 8:
            junk = rng.choice(["junk", "j\x00", "\ud800", "since", "ID"])
            frame[junk] = rng.choice([*ODD_VALUES, Raw("1e999"), "\x00"])
        elif how == 9:
            frame["type"] = rng.choice(
                ["nope", "HELLO", "hello ", "re\x00ady", 1, None, ["put"]]
            )
        else:
            frame.pop("type", None)

    # --- frames ---------------------------------------------------------------

    def structured(self, frame_type: str | None = None) -> tuple[dict[str, Any], Any]:
        rng = self.rng
        frame_type = frame_type or rng.choice(TYPES)
        if frame_type == "close" and rng.random() < 0.8:
            frame_type = "ack"  # each close costs a reconnect: fewer of them
        body = {"type": frame_type, **self.base(frame_type)}
        sent_id, expected = self.request_id()
        if sent_id is not None or rng.random() < 0.5:
            body = {"id": sent_id, **body}
        else:
            expected = None  # an explicit null id: none to echo
        self.mutated = rng.random() < 0.6
        if self.mutated:
            for _ in range(rng.randrange(1, 4)):
                self.mutate(body)
        return body, expected

    def frame(self) -> Frame:
        self.count += 1
        rng = self.rng
        roll = rng.random()
        body, expected = self.structured()
        text, is_json = dump(body)
        names_witness = body.get("durable_id") == WITNESS_ID
        whole_cq = is_json and not self.mutated and body["type"] == "register_cq"
        frame = Frame(
            text.encode("ascii"),
            expected_id=expected if is_json else None,
            frame_type=body.get("type") if is_json else None,
            names_witness=names_witness,
            cq=(body["name"], body["query"] in CQ_VALID) if whole_cq else None,
        )
        if roll < 0.70:
            return frame
        if roll < 0.76:  # JSON that is not an object
            return Frame(
                rng.choice(["[]", "1", '"s"', "null", "true", '[{"id": "x"}]']).encode()
            )
        if roll < 0.86:  # text that is not JSON
            broken = rng.choice(
                [
                    text[: rng.randrange(len(text))],
                    text + "}",
                    text.replace(":", "=", 1),
                    "{'id': 'x', 'type': 'ready'}",
                    text[:1] + "\x01" + text[1:],
                    "/* c */" + text,
                    text.replace("}", ", }", 1) if text.endswith("}") else "{,}",
                    '{"id": "x", "type": "ack", "up_to": NaN}',
                ]
            )
            return Frame(broken.encode("utf-8", "surrogatepass"))
        if roll < 0.92:  # binary: a JSON object's id is still echoed
            if rng.random() < 0.5:
                return Frame(rng.randbytes(rng.randrange(1, 200)), opcode=BINARY)
            return Frame(frame.payload, opcode=BINARY, expected_id=frame.expected_id)
        if roll < 0.96 and len(frame.payload) > 8:  # one message in fragments
            frame.fragments = rng.randrange(2, 6)
            return frame
        if roll < 0.975:  # not UTF-8: the transport drops the connection
            return Frame(b'{"type": "ready", "x": "\xff\xfe"}', not_utf8=True)
        if roll < 0.98:
            return Frame(
                b'"' + b"x" * (LIMIT + rng.randrange(1, 4096)) + b'"', oversized=True
            )
        return frame


class Witness:
    """Another user's durable client with interest in REGION: it must get
    every write the test makes through REST while the fuzz runs."""

    def __init__(self, cluster: Cluster, token: str) -> None:
        self.sock = RawSocket(cluster.nodes["node-1"]["port"], token)
        welcome = self.sock.hello(durable_id=WITNESS_ID, conflate="false")
        assert welcome["type"] == "welcome", welcome
        self.sock.send_json(
            type="register_interest",
            id="w",
            region=REGION,
            all_keys=True,
            durable=True,
            policy="none",
        )
        self.seen: dict[str, int] = {}  # key -> highest version received
        self.last_seq = 0
        self.unacked = 0
        self._until(lambda f: f["type"] == "interest_registered")
        self.sock.send_json(type="ready")
        self._until(lambda f: f["type"] == "marker")

    def _until(self, done: Any) -> None:
        while True:
            frame = self.sock.recv_json()
            assert frame["type"] != "error", frame
            if frame["type"] == "event":
                assert frame["seq"] > self.last_seq, frame  # in order, once
                self.last_seq = frame["seq"]
                if frame["key"] is not None:
                    self.seen[frame["key"]] = max(
                        self.seen.get(frame["key"], 0), frame["version"]
                    )
                self.unacked += 1
            if done(frame):
                break
        if self.unacked >= 100:
            self.sock.send_json(type="ack", up_to=self.last_seq)
            self.unacked = 0

    def receives(self, key: str, version: int) -> None:
        if self.seen.get(key, 0) < version:
            self._until(
                lambda f: (
                    f["type"] == "event" and f["key"] == key and f["version"] >= version
                )
            )


class Fuzz:
    """One fuzzing user's sockets, reconnected as often as they are closed."""

    def __init__(self, cluster: Cluster, token: str, gen: Generator) -> None:
        self.cluster, self.token, self.gen = cluster, token, gen
        self.port = cluster.nodes["node-1"]["port"]
        self.sock: RawSocket | None = None
        self.sent = 0
        self.closes: dict[Any, int] = {}
        self.answers: dict[str, int] = {}  # by type, errors by code
        self.cq_outcomes: dict[str, int] = {}  # whole register_cq frames
        self.barriers = 0
        self.bounded = False

    def read(self) -> dict[str, Any]:
        assert self.sock is not None
        opcode, payload = self.sock.recv_frame()
        assert opcode == TEXT, (opcode, payload[:80])
        frame: dict[str, Any] = json.loads(payload.decode("utf-8"))  # valid UTF-8
        if frame["type"] == "error":
            assert frame["code"] in ERROR_CODES, frame
        kind = frame["code"] if frame["type"] == "error" else frame["type"]
        self.answers[kind] = self.answers.get(kind, 0) + 1
        return frame

    def closed(self, code: int | None, allowed: set[Any], context: Any) -> None:
        assert code in allowed, (code, allowed, context)
        assert code is None or code in CLOSE_CODES
        self.closes[code] = self.closes.get(code, 0) + 1
        assert self.sock is not None
        self.sock.sock.close()
        self.sock = None

    def send(self, frame: Frame) -> None:
        assert self.sock is not None
        self.sent += 1
        if frame.fragments > 1:
            cut = sorted(
                self.gen.rng.sample(range(1, len(frame.payload)), frame.fragments - 1)
            )
            parts = [
                frame.payload[a:b]
                for a, b in zip([0, *cut], [*cut, len(frame.payload)], strict=True)
            ]
            self.sock.send_frame(frame.opcode, parts[0], fin=False)
            for part in parts[1:-1]:
                self.sock.send_frame(CONTINUATION, part, fin=False)
            self.sock.send_frame(CONTINUATION, parts[-1])
        else:
            self.sock.send_frame(frame.opcode, frame.payload)

    # --- a socket's start -------------------------------------------------------

    def connect(self) -> None:
        """Open a socket and say hello (or send a fuzz frame first)."""
        self.sock = RawSocket(self.port, self.token)
        # A queue bounded by a small max_queued overflows under the fuzz's
        # writes, and the server closes a socket whose queue overflowed with
        # 4503 so that it resyncs (docs/protocol.md, bounded queues). A first
        # frame from the fuzz may be such a hello too.
        self.bounded = True
        if self.gen.rng.random() < 0.1:
            first = self.gen.frame()
            self.send(first)
            self._answered_before_hello(first)
            return
        self.gen.count += 1
        body, _ = self.gen.structured("hello")
        while body.get("type") != "hello" or body.get("durable_id") == WITNESS_ID:
            body, _ = self.gen.structured("hello")
        body["id"] = f"h{self.gen.count}"
        self.bounded = body.get("max_queued", MAX_QUEUED_DEFAULT) != MAX_QUEUED_DEFAULT
        self.send(Frame(dump(body)[0].encode(), expected_id=body["id"]))
        self._answered_before_hello(
            Frame(b"", expected_id=body["id"], frame_type="hello")
        )

    def _answered_before_hello(self, frame: Frame) -> bool:
        """Read the answer to the socket's first frame; whether the socket
        is still open and has said hello (else it is closed)."""
        if frame.oversized:
            return self._expect_close({4413}, frame)
        if frame.not_utf8:
            return self._expect_close({None}, frame)
        try:
            reply = self.read()
        except Closed as closed:
            allowed = {4403} if frame.names_witness else set()
            if frame.frame_type == "hello":
                allowed |= {4409, 4403}
            self.closed(closed.code, allowed, frame)
            return False
        if frame.expected_id is not None:
            assert reply.get("id") == frame.expected_id, (reply, frame)
        if reply["type"] == "welcome":
            return True
        assert reply["type"] == "error", reply
        # Fatal unless it was a hello with a bad field: a hello tells which.
        self.gen.count += 1
        hello_id = f"h{self.gen.count}"
        assert self.sock is not None
        self.sock.send_json(type="hello", id=hello_id)
        try:
            welcome = self.read()
        except Closed as closed:
            self.closed(closed.code, {4400}, frame)
            return False
        assert (welcome["type"], welcome.get("id")) == ("welcome", hello_id), welcome
        return True

    def _expect_close(self, allowed: set[Any], frame: Frame) -> bool:
        try:
            while True:
                reply = self.read()
                assert reply["type"] in ("event", "marker", "image"), reply
        except Closed as closed:
            self.closed(closed.code, allowed, frame)
        return False

    # --- after hello ------------------------------------------------------------

    def step(self) -> None:
        """Send one fuzz frame (or a burst) and judge what comes back."""
        if self.sock is None:
            self.connect()
            return
        if self.gen.rng.random() < 0.01:
            self.burst()
            return
        frame = self.gen.frame()
        self.send(frame)
        if frame.oversized:
            self._expect_close({4413}, frame)
            return
        if frame.not_utf8:
            self._expect_close({None}, frame)
            return
        self.barriers += 1
        barrier = f"~b{self.barriers}"
        assert self.sock is not None
        self.sock.send_json(
            type="unregister_interest", id=barrier, region=REGION, keys=["~"]
        )
        replies = []
        try:
            while True:
                reply = self.read()
                if reply.get("id") == barrier:
                    assert reply["type"] == "interest_unregistered", reply
                    break
                if reply["type"] not in ("event", "marker", "gap"):
                    replies.append(reply)
        except Closed as closed:
            # Only a close frame ends a socket that has said hello.
            allowed = {1000} if any(r["type"] == "closed" for r in replies) else set()
            if self.bounded:
                allowed.add(4503)
            self.closed(closed.code, allowed, (frame, replies))
            if closed.code != 4503:  # an overflow's close may come before a reply
                self._judge(frame, replies)
            return
        self._judge(frame, replies)

    def _judge(self, frame: Frame, replies: list[dict[str, Any]]) -> None:
        errors = [r for r in replies if r["type"] == "error"]
        assert len(errors) <= 1, (frame, replies)
        if frame.expected_id is None:
            return
        for error in errors:
            assert error.get("id") == frame.expected_id, (frame, error)
        if not any(r.get("id") == frame.expected_id for r in replies):
            # Answered by nothing of its own: a successful ack or ready.
            assert frame.frame_type in ("ack", "ready"), (frame, replies)
            assert not errors, (frame, replies)
        if frame.cq is not None:
            own = [r for r in replies if r.get("id") == frame.expected_id]
            self._judge_cq(frame, frame.cq, own)

    def _judge_cq(
        self, frame: Frame, cq: tuple[str, bool], own: list[dict[str, Any]]
    ) -> None:
        """A whole register_cq: refused with one of CQ_REFUSALS, or (a valid
        query) registered: image chunks of that CQ, then cq_registered."""
        name, valid = cq
        if own and own[-1]["type"] == "error":
            assert len(own) == 1, (frame, own)
            assert own[0]["code"] in CQ_REFUSALS, (frame, own)
            self.cq_outcomes[own[0]["code"]] = (
                self.cq_outcomes.get(own[0]["code"], 0) + 1
            )
            return
        assert valid, ("a refused query was registered", frame, own)
        assert own, frame
        assert own[-1]["type"] == "cq_registered", (frame, own)
        assert own[-1]["name"] == name, (frame, own)
        chunks = own[:-1]
        assert all(r["type"] == "image" and r.get("cq") == name for r in chunks), own
        assert own[-1]["count"] == sum(len(r["entries"]) for r in chunks), own
        self.cq_outcomes["cq_registered"] = self.cq_outcomes.get("cq_registered", 0) + 1

    def burst(self) -> None:
        """Ten bad frames in a row and more: ten errors, then 4400."""
        assert self.sock is not None
        for _ in range(12):
            self.sent += 1
            self.sock.send_text("{" * self.gen.rng.randrange(1, 5))
        errors = 0
        try:
            while True:
                reply = self.read()
                if reply["type"] == "error":
                    assert reply["code"] == "bad_json", reply
                    errors += 1
        except Closed as closed:
            if self.bounded and closed.code == 4503:
                # Its queue overflowed under the fuzz's writes: that close
                # may come before, or among, the burst's errors.
                assert errors <= 10, errors
                self.closed(closed.code, {4503}, "burst")
                return
            assert errors == 10, errors
            self.closed(closed.code, {4400}, "burst")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """One node whose frames may be at most 64 KiB, with the users."""
    c = Cluster(
        tmp_path_factory.mktemp("fuzz-ws"),
        settings={"DURABLECACHE_MAX_FRAME_BYTES": str(LIMIT)},
    )
    try:
        c.migrate()
        c.start_node("node-1")
        c.operator = c.token("ops", operator=True)
        c.fuzzer = c.token("fuzzer")
        c.watcher = c.token("watcher")
        create_region(c, REGION)
        yield c
    finally:
        c.close()


def test_fuzzed_frames_keep_the_contract(node):
    started = time.monotonic()
    rng = random.Random(SEED)
    witness = Witness(node, node.watcher)
    fuzz = Fuzz(node, node.fuzzer, Generator(rng))
    writes = 0
    try:
        while fuzz.sent < FRAMES:
            fuzz.step()
            if fuzz.sent // WRITE_EVERY > writes:
                writes += 1
                key = f"w-{writes}"
                status, body = node.rest(
                    "PUT",
                    f"/api/v1/regions/{REGION}/entries/{key}/",
                    node.operator,
                    {"value": writes},
                )
                assert status == 200, body
                witness.receives(key, body["version"])
    except AssertionError as exc:
        raise AssertionError(f"seed {SEED}, frame {fuzz.sent}: {exc}") from exc
    elapsed = time.monotonic() - started
    print(  # noqa: T201 (the run's summary, shown with -s)
        f"\nws fuzz: seed {SEED}, {fuzz.sent} frames, {writes} witnessed writes,"
        f" closes {fuzz.closes}, answers {fuzz.answers},"
        f" whole register_cq {fuzz.cq_outcomes}, {elapsed:.1f} s"
    )
    assert sum(fuzz.cq_outcomes.values()) > 0  # the CQ oracle judged some
    assert writes >= FRAMES // WRITE_EVERY
    status, _ = node.rest("GET", "/api/v1/nodes/", node.operator)
    assert status == 200
    log = (node.workdir / "node-1.log").read_text(errors="replace")
    assert "Traceback" not in log, node.log_tail("node-1", 80)


def test_cq_corpus_is_labelled_as_the_query_language_reads_it():
    """CQ_VALID compiles and CQ_HOSTILE does not (CQ_DOOR_REFUSED is refused
    before the parser): the oracle's labels are the language's."""
    for query in CQ_VALID:
        compile_query(query, region=REGION)
    for query in CQ_HOSTILE:
        with pytest.raises(QueryError):
            compile_query(query, region=REGION)
