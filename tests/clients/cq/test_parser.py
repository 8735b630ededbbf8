"""What the CQ parser accepts and the tree it builds (docs/cq.md, "Grammar")."""

import pytest

from clients.cq import parse_query
from clients.cq.tree import (
    And,
    Compare,
    Const,
    InList,
    IsNull,
    Like,
    Not,
    Or,
    Path,
    Truth,
)

V = Path("value")
KEY = Path("key")


def cond(text, region="orders"):
    return parse_query(text, region=region).condition


def num(n):
    return Const("number", n)


def text(s):
    return Const("string", s)


@pytest.mark.parametrize(
    ("query", "path"),
    [
        ("key = 'a'", KEY),
        ("value = 'a'", V),
        ("value.a = 'a'", Path("value", ("a",))),
        ("value.a.b = 'a'", Path("value", ("a", "b"))),
        ("value['a b'] = 'a'", Path("value", ("a b",))),
        ("value[0] = 'a'", Path("value", (0,))),
        ("value.a[2]['x''y'].z = 'a'", Path("value", ("a", 2, "x'y", "z"))),
        ("value . a [ 0 ] = 'a'", Path("value", ("a", 0))),
        ("value[''] = 'a'", Path("value", ("",))),
        ("value.ünïcode = 'a'", Path("value", ("ünïcode",))),
        ("value._x1 = 'a'", Path("value", ("_x1",))),
    ],
)
def test_paths_of_every_form(query, path):
    assert cond(query) == Compare("=", path, text("a"))


@pytest.mark.parametrize(
    "word", ["select", "in", "null", "true", "key", "value", "AND"]
)
def test_a_keyword_after_a_dot_is_a_member_name(word):
    assert cond(f"value.{word} = 1") == Compare("=", Path("value", (word,)), num(1))


@pytest.mark.parametrize(
    ("literal", "expected"),
    [
        ("0", num(0)),
        ("42", num(42)),
        ("-7", num(-7)),
        ("3.25", num(3.25)),
        ("-0.5", num(-0.5)),
        ("1e3", num(1000.0)),
        ("1E+3", num(1000.0)),
        ("2.5e-3", num(0.0025)),
        ("123456789012345678901234567890", num(123456789012345678901234567890)),
        ("'it''s'", text("it's")),
        ("''", text("")),
        ("'a\\b'", text("a\\b")),
        ("'ünï ☃ 😀'", text("ünï ☃ 😀")),
        ("'two\nlines'", text("two\nlines")),
        ("true", Const("boolean", True)),
        ("FALSE", Const("boolean", False)),
        ("Null", Const("null", None)),
    ],
)
def test_literals_of_every_form(literal, expected):
    assert cond(f"value = {literal}") == Compare("=", V, expected)


def test_integers_stay_integers_and_decimals_are_floats():
    assert type(cond("value = 10").right.value) is int
    assert type(cond("value = 10.0").right.value) is float


@pytest.mark.parametrize(
    ("written", "op"),
    [
        ("=", "="),
        ("!=", "!="),
        ("<>", "!="),
        ("<", "<"),
        ("<=", "<="),
        (">", ">"),
        (">=", ">="),
    ],
)
def test_every_comparison_operator(written, op):
    assert cond(f"value.n {written} 5") == Compare(op, Path("value", ("n",)), num(5))


def test_comparison_operators_need_no_spaces():
    assert cond("value.n>=-5") == Compare(">=", Path("value", ("n",)), num(-5))


def test_either_side_of_a_comparison_may_be_a_path_or_a_literal():
    assert cond("5 < value.n") == Compare("<", num(5), Path("value", ("n",)))
    assert cond("value.a = value.b") == Compare(
        "=", Path("value", ("a",)), Path("value", ("b",))
    )
    assert cond("1 = 1") == Compare("=", num(1), num(1))


def test_in_and_not_in():
    assert cond("value IN (1, 'a', true, null)") == InList(
        V, (num(1), text("a"), Const("boolean", True), Const("null", None))
    )
    assert cond("value not in (1)") == InList(V, (num(1),), negated=True)


def test_like_and_not_like():
    assert cond("key LIKE 'a%'") == Like(KEY, "a%")
    assert cond("key NOT LIKE 'a\\%'") == Like(KEY, "a\\%", negated=True)


def test_is_null_and_is_not_null():
    assert cond("value.a IS NULL") == IsNull(Path("value", ("a",)))
    assert cond("value.a is not null") == IsNull(Path("value", ("a",)), negated=True)


def test_a_bare_path_or_boolean_is_a_condition():
    assert cond("value.done") == Truth(Path("value", ("done",)))
    assert cond("true") == Truth(Const("boolean", True))


def test_not_and_or_and_parentheses():
    a, b, c = (Truth(Path("value", (name,))) for name in "abc")
    assert cond("value.a AND value.b OR value.c") == Or((And((a, b)), c))
    assert cond("value.a OR value.b AND value.c") == Or((a, And((b, c))))
    assert cond("(value.a OR value.b) AND value.c") == And((Or((a, b)), c))
    assert cond("NOT value.a AND value.b") == And((Not(a), b))
    assert cond("NOT (value.a AND value.b)") == Not(And((a, b)))
    assert cond("NOT NOT value.a") == Not(Not(a))
    assert cond("((value.a))") == a


def test_not_binds_looser_than_a_comparison():
    assert cond("NOT value.n = 1") == Not(Compare("=", Path("value", ("n",)), num(1)))


def test_a_chain_of_and_is_one_flat_node():
    condition = cond(" AND ".join(["value.a"] * 10))
    assert isinstance(condition, And)
    assert len(condition.parts) == 10


def test_keywords_are_case_insensitive():
    lower = parse_query(
        "select * from /orders where value.a in (1) and not value.b like 'x' "
        "or value.c is not null or true or false or value.d = null",
        region="orders",
    )
    upper = parse_query(
        "SELECT * FROM /orders WHERE value.a IN (1) AND NOT value.b LIKE 'x' "
        "OR value.c IS NOT NULL OR TRUE OR FALSE OR value.d = NULL",
        region="orders",
    )
    assert lower.condition == upper.condition


def test_paths_are_case_sensitive():
    assert cond("value.Qty = 1") != cond("value.qty = 1")


def test_the_select_form_means_its_condition():
    query = parse_query("SELECT * FROM /orders WHERE value.qty > 5", region="orders")
    assert query.condition == cond("value.qty > 5")
    assert query.region == "orders"
    assert query.alias is None


def test_the_alias_means_value():
    query = parse_query(
        "SELECT * FROM /orders o WHERE o.qty > 5 AND o['x'] = 1", region="orders"
    )
    assert query.alias == "o"
    assert query.condition == cond("value.qty > 5 AND value['x'] = 1")


def test_with_an_alias_value_and_key_keep_their_meaning():
    query = parse_query(
        "SELECT * FROM /orders o WHERE value.a = o.a AND key = 'k'", region="orders"
    )
    assert query.condition == cond("value.a = value.a AND key = 'k'")


def test_the_alias_may_be_value_itself():
    query = parse_query("SELECT * FROM /orders value WHERE value.a", region="orders")
    assert query.condition == cond("value.a")


def test_region_names_may_hold_dots_colons_and_dashes():
    query = parse_query("SELECT * FROM /a.b:c-d_1 WHERE true", region="a.b:c-d_1")
    assert query.region == "a.b:c-d_1"


def test_the_query_keeps_its_text():
    text = "select *   from /orders   where value.a"
    assert parse_query(text, region="orders").text == text


def test_a_bare_condition_takes_the_region_it_is_given():
    assert parse_query("value.a", region="anything").region == "anything"


def test_whitespace_and_line_breaks_separate_tokens():
    assert cond("\tvalue.a\r\n=\n1 ") == Compare("=", Path("value", ("a",)), num(1))


def test_things_that_look_like_code_are_member_names_or_strings():
    assert cond("value.__class__") == Truth(Path("value", ("__class__",)))
    assert cond("value.a = '; DROP TABLE x; --'") == Compare(
        "=", Path("value", ("a",)), text("; DROP TABLE x; --")
    )
    assert cond("value['__import__(\"os\")'] = 1") == Compare(
        "=", Path("value", ('__import__("os")',)), num(1)
    )
