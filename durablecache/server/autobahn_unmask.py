"""Unmask small incoming websocket frames, and check text, without cffi.

A client's frames are masked (RFC 6455, 5.3) and a text frame must be valid
UTF-8. autobahn does both with its NVX extension, through cffi: for every
frame it builds a masker (``ffi.new``, ``ffi.gc``, two calls into C), copies
the payload into a cffi buffer and out again, and runs the validator, each
call into C releasing and retaking the GIL. For the ~60-byte ``put`` and
``ack`` frames that make up a writer's or a replaying client's traffic that
is ~8 µs per frame, and worse under load: every release hands the GIL to the
process's other threads (the write round, the doorbell), and the event loop
waits to get it back: with put frames in flight the masker and the
validator take a tenth of Daphne's main thread
(docs/decisions/0003-autobahn-unmask-without-cffi.md).

Here a frame of at most ``SMALL_FRAME`` bytes is unmasked with one XOR of
two Python integers (~1.3 µs for 70 bytes, no GIL release); larger frames
keep autobahn's masker, whose SIMD loop is faster there (4 MB: 4 ms
against 21 ms). Text of any size is validated with Python's incremental
UTF-8 decoder (~1 µs for a small frame; 4 MB in 0.5 ms of ASCII to 4 ms
of two-byte characters, holding the GIL, where autobahn's validator takes
11 ms for either, releasing it), which rejects what RFC 3629 rejects (overlong forms,
surrogates, code points beyond U+10FFFF); a message that ends inside a
code point is still refused at its end. One difference: the first two
bytes of a surrogate (``ED A0``) are refused when the third arrives
rather than at once.
"""

import codecs
from typing import Any

# Largest payload unmasked here; larger frames go to autobahn's masker.
SMALL_FRAME = 4096


class SmallFrameMasker:
    """autobahn's masker interface (``pointer``, ``reset``, ``process``) for
    one frame's payload, which may arrive in several reads."""

    __slots__ = ("_mask", "_ptr")

    def __init__(self, mask: bytes) -> None:
        if len(mask) != 4:
            raise ValueError("a websocket mask is 4 bytes")
        self._mask = bytes(mask)
        self._ptr = 0

    def pointer(self) -> int:
        return self._ptr

    def reset(self) -> None:
        self._ptr = 0

    def process(self, data: bytes) -> bytes:
        size = len(data)
        if not size:
            return b""
        shift = self._ptr & 3
        mask = self._mask[shift:] + self._mask[:shift]
        key = (mask * ((size >> 2) + 1))[:size]
        self._ptr += size
        plain = int.from_bytes(data, "little") ^ int.from_bytes(key, "little")
        return plain.to_bytes(size, "little")


class Utf8Validator:
    """autobahn's incremental validator: ``validate`` answers (valid so far,
    ends on a code point, bytes of this call taken, bytes of the message
    taken), as autobahn's does; once invalid, invalid until ``reset``."""

    __slots__ = ("_decoder", "_failed", "_held", "_total")

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self.reset()

    def reset(self) -> None:
        self._decoder.reset()
        self._total = 0
        self._held = 0  # a code point's first bytes, held by the decoder
        self._failed: tuple[bool, bool, int, int] | None = None

    def validate(self, data: bytes) -> tuple[bool, bool, int, int]:
        if self._failed is not None:
            return self._failed
        try:
            self._decoder.decode(data)
        except UnicodeDecodeError as exc:
            # exc.start is where the bad sequence starts, counting the held
            # bytes (which the last call took and counted).
            start = exc.start - self._held
            self._failed = (False, False, max(start, 0), self._total + start)
            return self._failed
        self._total += len(data)
        self._held = len(self._decoder.getstate()[0])
        return (True, not self._held, len(data), self._total)


def small_frames_without_cffi() -> None:
    """Swap autobahn's masker factory and validator in its protocol module
    (idempotent)."""
    from autobahn.websocket import protocol

    original = getattr(
        protocol.create_xor_masker, "wrapped", protocol.create_xor_masker
    )

    def create_xor_masker(mask: bytes, length: int | None = None) -> Any:
        if length is not None and length <= SMALL_FRAME:
            return SmallFrameMasker(mask)
        return original(mask, length)

    create_xor_masker.wrapped = original  # type: ignore[attr-defined]
    protocol.create_xor_masker = create_xor_masker
    protocol.Utf8Validator = Utf8Validator  # type: ignore[misc, assignment]
