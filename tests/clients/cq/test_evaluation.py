"""How a compiled condition judges one entry (docs/cq.md, "Evaluation")."""

import json

import pytest

from clients.cq import compile_query


def holds(condition, value, key="k"):
    return compile_query(condition, region="r").matches(key, value)


DOC = {
    "n": 5,
    "f": 2.5,
    "s": "abc",
    "t": True,
    "no": False,
    "z": None,
    "arr": [1, "two", [3], {"four": 4}],
    "obj": {"a": {"b": {"c": 7}}, "a b": 1, "": "empty", "0": "zero"},
    "Case": 1,
}


# -- paths --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("value.n", 5),
        ("value.obj.a.b.c", 7),
        ("value.obj['a b']", 1),
        ("value.obj['']", "empty"),
        ("value.obj['0']", "zero"),
        ("value.arr[0]", 1),
        ("value.arr[1]", "two"),
        ("value.arr[2][0]", 3),
        ("value.arr[3].four", 4),
        ("value['arr'][3]['four']", 4),
        ("value.Case", 1),
    ],
)
def test_a_path_reads_members_and_elements(path, expected):
    assert holds(f"{path} = {json.dumps(expected).replace(chr(34), chr(39))}", DOC)


@pytest.mark.parametrize(
    "path",
    [
        "value.missing",
        "value.missing.deeper",
        "value.case",  # paths are case-sensitive
        "value.n.x",  # a member of a number
        "value.s[0]",  # an element of a string
        "value.s.length",
        "value.arr[4]",  # past the end
        "value.arr[99999999999999999999]",
        "value.arr.x",  # a member name on an array
        "value.arr['0']",  # a member name on an array, even a digit one
        "value.obj[0]",  # an index on an object, even with a '0' member
        "value.z.a",
        "value.t.a",
        "value.__class__",
        "value.obj.__class__",
        "value.s.__len__",
        "value.obj.keys",
        "value.obj.items",
    ],
)
def test_a_missing_path_is_null(path):
    assert holds(f"{path} IS NULL", DOC)
    assert holds(f"{path} = null", DOC)
    assert not holds(f"{path} IS NOT NULL", DOC)


def test_member_names_are_json_members_not_python_attributes():
    assert holds("value.__class__ = 5", {"__class__": 5})
    assert holds("value.keys = 'k'", {"keys": "k"})


def test_key_is_the_entry_key():
    assert holds("key = 'order-1'", {"a": 1}, key="order-1")
    assert holds("key LIKE 'order-%'", {"a": 1}, key="order-1")
    assert not holds("key = 'order-2'", {"a": 1}, key="order-1")


def test_value_is_the_whole_value():
    assert holds("value = 5", 5)
    assert holds("value = 'x'", "x")
    assert holds("value", True)
    assert not holds("value", {"a": 1})


def test_the_alias_reads_the_value():
    query = compile_query("SELECT * FROM /r o WHERE o.qty > 5", region="r")
    assert query.matches("k", {"qty": 6})
    assert not query.matches("k", {"qty": 5})


# -- = and != -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("1", "1"),
        ("1", "1.0"),
        ("1.0", "1"),
        ("0", "-0.0"),
        ("1e2", "100"),
        ("0.1", "0.1"),
        ("'a'", "'a'"),
        ("''", "''"),
        ("true", "true"),
        ("false", "false"),
        ("null", "null"),
    ],
)
def test_equal_literals_are_equal(left, right):
    assert holds(f"{left} = {right}", 1)
    assert not holds(f"{left} != {right}", 1)
    assert not holds(f"{left} <> {right}", 1)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("1", "2"),
        ("1", "'1'"),
        ("1", "true"),
        ("0", "false"),
        ("0", "null"),
        ("''", "null"),
        ("false", "null"),
        ("true", "false"),
        ("'a'", "'A'"),
        ("'a'", "'a '"),
    ],
)
def test_different_literals_are_not_equal(left, right):
    assert not holds(f"{left} = {right}", 1)
    assert holds(f"{left} != {right}", 1)
    assert holds(f"{left} <> {right}", 1)


@pytest.mark.parametrize(
    ("value", "literal", "expected"),
    [
        (1, "1", True),
        (1.0, "1", True),
        (1, "1.0", True),
        (True, "1", False),  # booleans are not numbers (Python: True == 1)
        (False, "0", False),
        (1, "true", False),
        (0, "false", False),
        (True, "true", True),
        (False, "false", True),
        ("1", "1", False),
        (1, "'1'", False),
        (None, "null", True),
        (0, "null", False),
        ([1], "1", False),
        ({"a": 1}, "1", False),
        (10**30, "1000000000000000000000000000000", True),
        (2**53 + 1, "9007199254740992", False),  # exact, no rounding to float
        (float("nan"), "1", False),
    ],
)
def test_equality_needs_the_same_json_kind(value, literal, expected):
    assert holds(f"value.x = {literal}", {"x": value}) is expected
    assert holds(f"value.x != {literal}", {"x": value}) is not expected
    assert holds(f"{literal} = value.x", {"x": value}) is expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([1, 2], [1, 2], True),
        ([1, 2], [1.0, 2.0], True),
        ([1, 2], [2, 1], False),
        ([1, 2], [1, 2, 3], False),
        ([], [], True),
        ([True], [1], False),
        ([None], [], False),
        ({"a": 1, "b": [1, {"c": 2}]}, {"b": [1.0, {"c": 2}], "a": 1}, True),
        ({"a": 1}, {"a": 1, "b": None}, False),
        ({"a": 1}, {"a": True}, False),
        ({"a": [1]}, {"a": {"0": 1}}, False),
        ({}, {}, True),
        ({}, [], False),
        ("x", ["x"], False),
    ],
)
def test_arrays_and_objects_compare_deeply(a, b, expected):
    entry = {"a": a, "b": b}
    assert holds("value.a = value.b", entry) is expected
    assert holds("value.a != value.b", entry) is not expected
    assert holds("value.a <> value.b", entry) is not expected


def test_deep_equality_of_deeply_nested_values_does_not_recurse():
    deep_a, deep_b = [], []
    for _ in range(100_000):
        deep_a, deep_b = [deep_a], [deep_b]
    assert holds("value.a = value.b", {"a": deep_a, "b": deep_b})
    deep_b = [[deep_b]]
    assert not holds("value.a = value.b", {"a": deep_a, "b": deep_b})


def test_two_missing_paths_are_equal_nulls():
    assert holds("value.a = value.b", {})
    assert not holds("value.a = value.b", {"a": None, "b": 0})


# -- < <= > >= ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "op", "literal", "expected"),
    [
        (5, ">", "4", True),
        (5, ">", "5", False),
        (5, ">=", "5", True),
        (5, "<", "5.5", True),
        (5.5, "<=", "5.5", True),
        (-1, "<", "0", True),
        (10**30, ">", "1e29", True),
        ("b", ">", "'a'", True),
        ("B", "<", "'a'", True),  # code-point order, not a collation
        ("a", "<", "'ab'", True),
        ("é", ">", "'z'", True),
        ("😀", ">", "'\uffff'", True),  # code points, not UTF-16 units
        ("", "<", "'a'", True),
        (5, ">", "'4'", False),
        ("5", ">", "4", False),
        (True, ">", "0", False),
        (True, ">=", "true", False),
        (None, "<", "1", False),
        (None, "<=", "null", False),
        ([1], "<", "2", False),
        ({"a": 1}, ">", "0", False),
        (float("nan"), "<", "1", False),
        (float("nan"), ">=", "1", False),
    ],
)
def test_order_compares_two_numbers_or_two_strings(value, op, literal, expected):
    assert holds(f"value.x {op} {literal}", {"x": value}) is expected


@pytest.mark.parametrize(
    ("left", "op", "right"),
    [("1", "<", "2"), ("2", ">", "1"), ("'a'", "<", "'b'"), ("1", "<=", "1.0")],
)
def test_order_of_literals_and_of_paths(left, op, right):
    assert holds(f"{left} {op} {right}", 1)
    assert holds(
        f"value.l {op} value.r",
        {
            "l": json.loads(left.replace("'", '"')),
            "r": json.loads(right.replace("'", '"')),
        },
    )


def test_a_literal_on_the_left_reads_the_same():
    assert holds("5 < value.n", {"n": 6})
    assert not holds("5 < value.n", {"n": 5})
    assert holds("'m' >= key", {}, key="a")


def test_order_between_mixed_kinds_is_false_both_ways():
    for op in ("<", "<=", ">", ">="):
        assert not holds(f"value.a {op} value.b", {"a": 1, "b": "1"})
        assert not holds(f"value.a {op} value.b", {"a": [1], "b": [1]})


# -- IN -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1, True),
        (1.0, True),
        ("a", True),
        (True, True),
        (None, True),
        (2, False),
        ("A", False),
        (False, False),
        ([1], False),
        ({"a": 1}, False),
    ],
)
def test_in_is_equality_with_any_item(value, expected):
    entry = {"x": value}
    assert holds("value.x IN (1, 'a', true, null)", entry) is expected
    assert holds("value.x NOT IN (1, 'a', true, null)", entry) is not expected
    assert holds("NOT value.x IN (1, 'a', true, null)", entry) is not expected


def test_in_tells_booleans_from_numbers():
    assert not holds("value.x IN (1, 0)", {"x": True})
    assert not holds("value.x IN (true)", {"x": 1})


def test_a_missing_path_is_in_a_list_holding_null():
    assert holds("value.missing IN (null)", {})
    assert not holds("value.missing IN (1)", {})


# -- LIKE ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("abc", True),
        ("ab", False),
        ("xabcx", False),
        (123, False),
        (None, False),
        (True, False),
        (["abc"], False),
        ({"abc": 1}, False),
    ],
)
def test_like_is_false_on_a_non_string(value, expected):
    assert holds("value.x LIKE 'a_c'", {"x": value}) is expected
    assert holds("value.x NOT LIKE 'a_c'", {"x": value}) is not expected


def test_like_on_a_literal():
    assert holds("'abc' LIKE 'a%'", 1)
    assert not holds("5 LIKE '5'", 1)


# -- IS NULL ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, True), (0, False), ("", False), (False, False), ([], False), ({}, False)],
)
def test_is_null(value, expected):
    assert holds("value.x IS NULL", {"x": value}) is expected
    assert holds("value.x IS NOT NULL", {"x": value}) is not expected


# -- bare paths, NOT, AND, OR -------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        (False, False),
        (1, False),
        ("true", False),
        (None, False),
        ([True], False),
        ({"t": True}, False),
    ],
)
def test_a_bare_path_is_true_only_for_json_true(value, expected):
    assert holds("value.x", {"x": value}) is expected
    assert holds("NOT value.x", {"x": value}) is not expected


def test_bare_boolean_literals():
    assert holds("true", {})
    assert not holds("false", {})


@pytest.mark.parametrize(
    ("a", "b"), [(True, True), (True, False), (False, True), (False, False)]
)
def test_and_or_not_are_boolean_logic(a, b):
    entry = {"a": a, "b": b}
    assert holds("value.a AND value.b", entry) is (a and b)
    assert holds("value.a OR value.b", entry) is (a or b)
    assert holds("NOT value.a", entry) is (not a)
    assert holds("NOT (value.a AND value.b)", entry) is not (a and b)
    assert holds("NOT NOT value.a", entry) is a
    assert holds("value.a AND value.b AND value.a", entry) is (a and b)
    assert holds("value.a OR value.b OR false", entry) is (a or b)


def test_and_binds_tighter_than_or():
    entry = {"a": True, "b": False, "c": False}
    assert holds("value.a OR value.b AND value.c", entry)
    assert not holds("(value.a OR value.b) AND value.c", entry)


def test_literal_only_conditions_are_decided_once():
    assert holds("1 = 1", {})
    assert not holds("1 = 2", {})
    assert holds("NOT 1 > 2", {})


# -- never fails --------------------------------------------------------------


ODD_VALUES = [
    None,
    True,
    0,
    -1.5,
    10**400,
    "",
    "😀",
    [],
    {},
    [None, [[]]],
    {"a": {"b": [1, {"c": None}]}},
    float("nan"),
    float("inf"),
    ("a", "tuple"),  # not JSON: no kind, equal to nothing
    object(),
]
CONDITIONS = [
    "value.a.b[1].c IS NULL",
    "value.a = value.b",
    "value.a < value.b",
    "value.a > 1e300",
    "value LIKE '%'",
    "value IN (1, 'a', null)",
    "value = value",
    "key < value",
    "value[0][0] = 1",
    "value",
]


@pytest.mark.parametrize("condition", CONDITIONS)
@pytest.mark.parametrize("value", ODD_VALUES, ids=repr)
def test_evaluation_never_fails(condition, value):
    assert holds(condition, value) in (True, False)
    assert holds(condition, {"a": value, "b": value}) in (True, False)


def test_a_value_of_no_json_kind_equals_nothing():
    odd = object()
    assert not holds("value.a = value.b", {"a": odd, "b": odd})
    assert not holds("value.a IS NULL", {"a": odd})
