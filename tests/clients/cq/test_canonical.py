"""The normal form, canonical text and fingerprint of a query."""

import pytest

from clients.cq import canonical_text, fingerprint, normalize, parse_query, same_query
from clients.cq.tree import Compare, Const, InList, Like, Not, Path, Truth


def cond(text):
    return parse_query(text, region="r").condition


def canon(text, region="r"):
    return canonical_text(parse_query(text, region=region).condition)


def test_normalize_puts_the_path_on_the_left():
    assert normalize(cond("5 < value.n")) == cond("value.n > 5")
    assert normalize(cond("'a' = key")) == cond("key = 'a'")


def test_normalize_folds_exact_negations_only():
    assert normalize(cond("NOT value.a = 1")) == cond("value.a != 1")
    assert normalize(cond("NOT value.a <> 1")) == cond("value.a = 1")
    assert normalize(cond("NOT value.a IN (1)")) == cond("value.a NOT IN (1)")
    assert normalize(cond("NOT value.a LIKE 'x'")) == cond("value.a NOT LIKE 'x'")
    assert normalize(cond("NOT value.a IS NULL")) == cond("value.a IS NOT NULL")
    assert normalize(cond("NOT NOT value.a")) == cond("value.a")
    # NOT a < b is not a >= b: both are false for a number and a string.
    n = Path("value", ("n",))
    assert normalize(cond("NOT value.n < 5")) == Not(
        Compare("<", n, Const("number", 5))
    )
    assert normalize(cond("NOT value.a")) == Not(Truth(Path("value", ("a",))))


def test_normalize_flattens_nested_and_and_or():
    assert normalize(cond("value.a AND (value.b AND (value.c))")) == cond(
        "value.a AND value.b AND value.c"
    )
    assert normalize(cond("(value.a OR value.b) OR value.c")) == cond(
        "value.a OR value.b OR value.c"
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("value.a = 1 AND value.b", "value.a = 1 and value.b"),
        ("value.a = 1", "  value . a=1 "),
        ("value.a = 1", "value['a'] = 1"),
        ("value.a = 1", "value.a = 1.0"),
        ("value.a = 100", "value.a = 1e2"),
        ("value.a <> 1", "value.a != 1"),
        ("value.a <> 1", "NOT value.a = 1"),
        ("5 < value.n", "value.n > 5"),
        ("value.a AND value.b", "value.b AND value.a"),
        ("value.a AND value.b", "value.a and (value.b and value.a)"),
        ("value.a OR value.b AND value.c", "value.c AND value.b OR value.a"),
        ("value.a IN (1, 2)", "value.a IN (2, 1, 1.0, 2)"),
        ("NOT NOT value.a", "value.a"),
        ("value.a is not null", "NOT value.a IS NULL"),
        ("value.a", "SELECT * FROM /r WHERE value.a"),
        ("value.a", "select * from /r o where o.a"),
    ],
)
def test_queries_that_differ_only_in_form_share_a_canonical_text(first, second):
    assert canon(first) == canon(second)
    assert fingerprint(parse_query(first, region="r")) == fingerprint(
        parse_query(second, region="r")
    )
    assert same_query(parse_query(first, region="r"), parse_query(second, region="r"))


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("value.a = 1", "value.a = true"),
        ("value.a = 0", "value.a = false"),
        ("value.a = 1", "value.a = '1'"),
        ("value.a = 1", "value.A = 1"),
        ("value.a = 1", "value[0] = 1"),
        ("value['0'] = 1", "value[0] = 1"),
        ("value.a < 5", "NOT value.a >= 5"),
        ("value.a AND value.b OR value.c", "value.a AND (value.b OR value.c)"),
        ("key = 'a'", "value = 'a'"),
        ("value.a LIKE 'a%'", "value.a LIKE 'a\\%'"),
    ],
)
def test_queries_that_differ_in_meaning_do_not(first, second):
    assert canon(first) != canon(second)
    assert not same_query(
        parse_query(first, region="r"), parse_query(second, region="r")
    )


def test_the_region_is_part_of_the_fingerprint():
    on_a = parse_query("value.a", region="a")
    on_b = parse_query("value.a", region="b")
    assert fingerprint(on_a) != fingerprint(on_b)
    assert not same_query(on_a, on_b)


def test_canonical_text_reads_back_as_the_same_query():
    text = (
        "NOT (value['a b'] = 'it''s' OR value.arr[2] IN (true, null, -1.5e-7)) "
        "AND (key LIKE 'x\\_%' OR value.t) AND NOT value.n < 3 "
        "AND value.x IS NOT NULL AND value.s NOT LIKE '%'"
    )
    once = canon(text)
    assert canon(once) == once
    assert normalize(cond(once)) == normalize(parse_query(once, region="r").condition)


def test_canonical_text_examples():
    assert canon("5 < value.n AND key <> 'x'") == "key != 'x' AND value.n > 5"
    assert canon("value.a IN (2, 1)") == "value.a IN (1, 2)"
    assert canon("value['a b'][0]") == "value['a b'][0]"
    assert canon("NOT (value.a OR value.b)") == "NOT (value.a OR value.b)"
    assert (
        canon("(value.a OR value.b) AND value.c") == "(value.a OR value.b) AND value.c"
    )
    assert canon("value.a LIKE 'x'") == "value.a LIKE 'x'"
    assert canon("value.f = 0.5") == "value.f = 0.5"


def test_parsed_trees_compare_literals_by_kind():
    assert Const("number", 1) == Const("number", 1.0)
    assert Const("number", 1) != Const("boolean", True)
    assert InList(Path("value"), (Const("number", 1),)) != InList(
        Path("value"), (Const("boolean", True),)
    )
    assert Like(Path("key"), "a") != Like(Path("key"), "a", negated=True)
