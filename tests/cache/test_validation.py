"""cache.validation: json_text refuses exactly what
validate_json_value refuses, and stores what json.dumps makes."""

import json

import pytest

from cache.validation import (
    MAX_DEPTH,
    json_text,
    loads_storable,
    loads_strict,
    validate_json_value,
)
from common.errors import ValidationError


def nested(depth):
    value = 1
    for _ in range(depth):
        value = [value]
    return value


GOOD = [
    0,
    -1.5,
    True,
    "plain",
    "caf\u00e9",
    "\U0001f600 astral (escaped as a surrogate pair)",
    "a literal backslash-u0000: \\u0000",
    "a literal backslash-ud800: \\ud800",
    {"i": 1, "s": "abc", "n": None, "l": [1, {"x": [2]}]},
    [],
    {},
    nested(MAX_DEPTH),
    {"k": nested(MAX_DEPTH - 1)},
    "[" * (MAX_DEPTH + 5),  # brackets inside a string are not nesting
]

BAD = [
    float("nan"),
    {"x": [float("inf")]},
    "a\u0000b",
    {"k\u0000": 1},
    "lone \ud800 surrogate",
    {"\udc00": 1},
    nested(MAX_DEPTH + 1),
    {1: "integer key"},
    {"a": {None: 1}},
    {"set": {1, 2}},
    b"bytes",
]


@pytest.mark.parametrize("value", GOOD)
def test_a_storable_value_is_its_json_text(value):
    assert validate_json_value(value) is value
    assert json_text(value) == json.dumps(value)


def test_null_is_stored_as_null():
    assert json_text(None) is None


@pytest.mark.parametrize("value", BAD)
def test_what_validation_refuses_json_text_refuses_too(value):
    with pytest.raises(ValidationError) as expected:
        validate_json_value(value)
    with pytest.raises(ValidationError) as got:
        json_text(value)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("value", GOOD)
def test_a_storable_values_text_parses_back_to_it(value):
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        assert loads_storable(text) == value


@pytest.mark.parametrize(
    "text",
    [
        '"a\\u0000b"',
        '{"k\\u0000": 1}',
        '"lone \\ud800"',
        '"lone \\uDC00, upper case"',
        '{"\\uD83D": 1}',
        json.dumps(nested(MAX_DEPTH + 1)),
        '"raw lone \ud800"',  # a str that holds one, not JSON's escape
    ],
)
def test_parsed_text_holding_what_validation_refuses_is_refused(text):
    with pytest.raises(ValidationError):
        loads_storable(text)


@pytest.mark.parametrize(
    "text", ["NaN", '{"x": [Infinity]}', "-Infinity", "1e999", "[-2e400]"]
)
def test_non_finite_numbers_are_not_json(text):
    with pytest.raises(ValueError, match="not"):
        loads_storable(text)


def test_bytes_are_parsed_in_their_detected_encoding():
    assert loads_strict('{"é": 1.5}'.encode("utf-16")) == {"é": 1.5}
    with pytest.raises(ValueError, match="not a finite number"):
        loads_strict(b"1e999")
