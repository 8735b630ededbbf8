"""Membership of an entry in a CQ's result and the ``cq_op`` of a change,
one query at a time and many at once (docs/cq.md, "Membership and `cq_op`")."""

import random

import pytest

from clients.cq import CqSet, compile_query, judge_many, membership_op

QTY = compile_query("SELECT * FROM /orders o WHERE o.qty > 5", region="orders")
IN = {"qty": 7}
OUT = {"qty": 1}


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (False, True, "create"),
        (True, True, "update"),
        (True, False, "destroy"),
        (False, False, None),
    ],
)
def test_membership_op_follows_the_table(before, after, expected):
    assert membership_op(before, after) == expected


def test_an_entry_is_a_member_when_its_value_is_not_null_and_the_condition_holds():
    assert QTY.is_member("k", IN)
    assert not QTY.is_member("k", OUT)
    assert not QTY.is_member("k", None)


def test_a_null_value_is_never_a_member_even_when_the_condition_holds():
    everything = compile_query("value IS NULL OR true", region="r")
    assert everything.matches("k", None)
    assert not everything.is_member("k", None)
    assert everything.is_member("k", 0)


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (None, IN, "create"),  # created into the result
        (OUT, IN, "create"),  # changed into it
        (IN, {"qty": 8}, "update"),  # changed, still in
        (IN, IN, "update"),  # rewritten with the same value
        (IN, OUT, "destroy"),  # changed out of it
        (IN, None, "destroy"),  # destroyed or invalidated while a member
        (None, OUT, None),
        (OUT, {"qty": 2}, None),
        (OUT, None, None),
        (None, None, None),
    ],
)
def test_cq_op_of_a_change(before, after, expected):
    assert QTY.cq_op("k", before, after) == expected


def test_cq_op_reads_the_key_of_the_change():
    by_key = compile_query("key LIKE 'a%'", region="r")
    assert by_key.cq_op("apple", None, 1) == "create"
    assert by_key.cq_op("banana", None, 1) is None


# -- many at once -------------------------------------------------------------


def queries(**texts):
    return {name: compile_query(text, region="r") for name, text in texts.items()}


def test_judge_many_lists_each_moved_query_by_name():
    cqs = queries(
        zeta="value.n > 5",
        alpha="value.n > 1",
        mid="value.n < 3",
        never="value.n > 100",
    )
    assert judge_many(cqs, "k", {"n": 2}, {"n": 6}) == [
        ("alpha", "update"),
        ("mid", "destroy"),
        ("zeta", "create"),
    ]
    assert judge_many(cqs, "k", {"n": 6}, None) == [
        ("alpha", "destroy"),
        ("zeta", "destroy"),
    ]
    assert judge_many(cqs, "k", None, None) == []
    assert judge_many({}, "k", None, {"n": 1}) == []


def test_region_ops_reach_every_query_sorted_by_name():
    cq_set = CqSet(queries(b="value.n > 5", a="false"))
    assert cq_set.region_op("region_clear") == [
        ("a", "region_clear"),
        ("b", "region_clear"),
    ]
    assert cq_set.region_op("region_destroy") == [
        ("a", "region_destroy"),
        ("b", "region_destroy"),
    ]


def test_a_cq_set_answers_threshold_queries_as_each_query_would():
    cqs = {
        f"gt{k:03d}": compile_query(f"value.n > {k}", region="r") for k in range(100)
    }
    cq_set = CqSet(cqs)
    for n in (-1, 0, 0.5, 1, 49, 49.5, 99, 100, 1e9, 10**30):
        assert cq_set.judge("k", {"n": n}, None) == [
            (f"gt{k:03d}", "destroy") for k in range(100) if n > k
        ]


SHAPES = [
    "value.n > {k}",
    "value.n >= {k}",
    "value.n < {k}",
    "value.n <= {k}",
    "{k} < value.n",
    "value.n = {k}",
    "value.n != {k}",
    "value.n <> {k}.0",
    "value.s > 's{k}'",
    "value.s <= 's{k}'",
    "value.s = 's{k}'",
    "value.s != 's{k}'",
    "value.n IN ({k}, 's{k}', true, null)",
    "value.n NOT IN ({k}, 's{k}', true)",
    "value.n IS NULL",
    "value.n IS NOT NULL",
    "value.b",
    "value.b = true",
    "value.b != false",
    "value.n = null",
    "value.n != null",
    "value.n < null",
    "value.n > true",
    "key = 'k{k}'",
    "key > 'k{k}'",
    "value.n > {k} AND value.s LIKE 's%'",
    "NOT value.n > {k}",
    "value.n > {k} OR value.b",
    "value.a = value.n",
    "value.arr[0] >= {k}",
    "value.n IN (1)",
    "true",
    "false",
]
VALUES = [
    None,
    0,
    "s5",
    True,
    [],
    {},
    {"n": None},
    {"n": True},
    {"n": 1},
    {"n": 1.0},
    {"n": 5},
    {"n": "s5"},
    {"n": [5]},
    {"n": {"x": 5}},
    {"n": float("nan")},
    {"s": "s3", "b": True, "a": 3, "n": 3, "arr": [4]},
    {"s": "s7", "b": False, "a": [1], "n": [1], "arr": []},
    {"s": 7, "b": 1, "n": 7.5, "arr": ["x"]},
]


def test_a_cq_set_agrees_with_judging_each_query_alone():
    cqs = {
        f"q{i:03d}.{k}": compile_query(shape.format(k=k), region="r")
        for i, shape in enumerate(SHAPES)
        for k in (1, 3, 5, 7)
    }
    cq_set = CqSet(cqs)
    for key in ("k1", "k5", "k9"):
        for before in VALUES:
            for after in VALUES:
                expected = [
                    (name, op)
                    for name in sorted(cqs)
                    if (op := cqs[name].cq_op(key, before, after)) is not None
                ]
                assert cq_set.judge(key, before, after) == expected, (before, after)


def test_a_cq_set_agrees_with_each_query_on_random_changes():
    rng = random.Random(7)
    cqs = {
        f"c{i}": compile_query(
            rng.choice(SHAPES).format(k=rng.randint(0, 9)), region="r"
        )
        for i in range(300)
    }
    cq_set = CqSet(cqs)

    def random_value():
        return rng.choice(
            [
                None,
                {"n": rng.uniform(-1, 11)},
                {"n": rng.randint(0, 9)},
                {"s": f"s{rng.randint(0, 9)}"},
            ]
        )

    for _ in range(300):
        before, after = random_value(), random_value()
        expected = [
            (name, op)
            for name in sorted(cqs)
            if (op := cqs[name].cq_op("k3", before, after)) is not None
        ]
        assert cq_set.judge("k3", before, after) == expected


def test_a_cq_set_of_2000_equality_queries_finds_the_two_a_change_moves():
    cqs = {
        f"q{k:04d}": compile_query(f"value.n = {k}", region="r") for k in range(2000)
    }
    cq_set = CqSet(cqs)
    assert len(cq_set) == 2000
    for k in range(0, 1999, 7):
        assert cq_set.judge("k", {"n": k}, {"n": k + 1}) == [
            (f"q{k:04d}", "destroy"),
            (f"q{k + 1:04d}", "create"),
        ]
    assert cq_set.judge("k", {"n": 1999}, {"n": 1999.0}) == [("q1999", "update")]


def test_a_cq_set_stays_right_past_its_table_of_remembered_answers():
    rng = random.Random(11)
    cqs = {f"b{i:02d}": compile_query(f"value.b{i}", region="r") for i in range(16)}
    cq_set = CqSet(cqs)
    for _ in range(3000):  # more (before, after) patterns than a table keeps
        before = {f"b{i}": rng.random() < 0.5 for i in range(16)}
        after = {f"b{i}": rng.random() < 0.5 for i in range(16)}
        assert cq_set.judge("k", before, after) == [
            (name, op)
            for name in sorted(cqs)
            if (op := cqs[name].cq_op("k", before, after)) is not None
        ]
