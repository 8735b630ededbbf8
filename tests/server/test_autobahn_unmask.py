"""Small incoming frames unmasked and validated without cffi
(durablecache.server.autobahn_unmask)."""

import os

import pytest
from autobahn.nvx._utf8validator import Utf8Validator as NvxValidator
from autobahn.websocket import protocol

from durablecache.server import autobahn_unmask as small_frames
from durablecache.server.autobahn_unmask import SmallFrameMasker, Utf8Validator


def xor(data: bytes, mask: bytes) -> bytes:
    """RFC 6455, 5.3, byte by byte."""
    return bytes(b ^ mask[i % 4] for i, b in enumerate(data))


@pytest.fixture
def installed():
    before = protocol.create_xor_masker, protocol.Utf8Validator
    small_frames.small_frames_without_cffi()
    yield protocol
    protocol.create_xor_masker, protocol.Utf8Validator = before


@pytest.mark.parametrize("size", [1, 3, 4, 5, 70, 4096])
def test_a_payload_is_unmasked_whole(size):
    mask, data = os.urandom(4), os.urandom(size)
    assert SmallFrameMasker(mask).process(data) == xor(data, mask)


@pytest.mark.parametrize("cuts", [[1], [3, 4], [2, 5, 6, 7], [1, 2, 3, 4, 5]])
def test_a_payload_read_in_pieces_is_unmasked_as_if_whole(cuts):
    """The mask goes on from where the last piece stopped."""
    mask, data = os.urandom(4), os.urandom(37)
    masker = SmallFrameMasker(mask)
    pieces, start = [], 0
    for cut in [*cuts, len(data)]:
        pieces.append(masker.process(data[start:cut]))
        start = cut
    assert b"".join(pieces) == xor(data, mask)
    assert masker.pointer() == len(data)
    masker.reset()
    assert masker.process(data[:5]) == xor(data[:5], mask)


def test_an_empty_piece_changes_nothing():
    masker = SmallFrameMasker(b"\x01\x02\x03\x04")
    assert masker.process(b"") == b""
    assert masker.pointer() == 0


def test_leading_zero_bytes_survive():
    """Integers drop leading zeros; the bytes must not."""
    mask = b"\x00\x00\x00\x00"
    assert SmallFrameMasker(mask).process(b"\x00\x00a\x00") == b"\x00\x00a\x00"


def test_small_frames_get_the_python_masker_large_ones_autobahns(installed):
    mask = os.urandom(4)
    small = installed.create_xor_masker(mask, small_frames.SMALL_FRAME)
    large = installed.create_xor_masker(mask, small_frames.SMALL_FRAME + 1)
    assert isinstance(small, SmallFrameMasker)
    assert not isinstance(large, SmallFrameMasker)
    data = os.urandom(small_frames.SMALL_FRAME + 1)
    assert large.process(data) == xor(data, mask)


def test_installing_twice_wraps_autobahns_masker_once(installed):
    first = installed.create_xor_masker
    small_frames.small_frames_without_cffi()
    assert installed.create_xor_masker.wrapped is first.wrapped
    assert installed.Utf8Validator is Utf8Validator


TEXTS = [
    b"",
    b'{"type":"put","key":"k","value":1}',
    "é€😀 mixed".encode(),
    b"\xff",  # never valid
    b"\xc0\xaf",  # overlong "/"
    b"\xed\xa0\x80",  # a surrogate
    b"\xf4\x90\x80\x80",  # beyond U+10FFFF
    b"ok\xe2\x82",  # ends inside a code point
    b"\xe2\x82\xac",
]


@pytest.mark.parametrize("text", TEXTS)
def test_the_validator_agrees_with_autobahns(text):
    ours, theirs = Utf8Validator(), NvxValidator()
    mine, its = ours.validate(text), theirs.validate(text)
    assert mine[:2] == its[:2]
    if mine[0]:
        assert mine[3] == its[3] == len(text)


def test_a_code_point_split_between_frames_is_valid_once_complete():
    validator = Utf8Validator()
    euro = "€".encode()
    assert validator.validate(b"a" + euro[:1]) == (True, False, 2, 2)
    assert validator.validate(euro[1:]) == (True, True, 2, 4)


def test_an_invalid_byte_says_where_in_the_message():
    validator = Utf8Validator()
    validator.validate(b"abc")
    valid, ends, _, at = validator.validate(b"de\xff")
    assert (valid, ends, at) == (False, False, 5)


def test_reset_forgets_the_last_message():
    validator = Utf8Validator()
    validator.validate(b"x\xe2")
    validator.reset()
    assert validator.validate(b"\x82")[0] is False
    validator.reset()
    assert validator.validate(b"fine") == (True, True, 4, 4)


def test_an_invalid_byte_after_a_held_code_point_start_says_where():
    """The decoder's error counts the bytes it held from the last call;
    the index given is the bad sequence's start in the message."""
    validator = Utf8Validator()
    assert validator.validate(b"ab\xe2") == (True, False, 3, 3)
    valid, _, in_call, at = validator.validate(b"\x82x")  # E2 82 "x": bad from E2
    assert (valid, in_call, at) == (False, 0, 2)
    validator.reset()
    validator.validate(b"ab")
    assert validator.validate(b"c\xff") == (False, False, 1, 3)


def test_once_invalid_a_message_stays_invalid():
    validator = Utf8Validator()
    failed = validator.validate(b"\xff")
    assert validator.validate(b"plain") == failed
    validator.reset()
    assert validator.validate(b"plain")[0] is True


def test_a_mask_is_four_bytes():
    with pytest.raises(ValueError, match="4 bytes"):
        SmallFrameMasker(b"\x01\x02\x03")
