"""Membership of an entry in a CQ's result and the ``cq_op`` of a change,
one query at a time and many at once (DESIGN.md §3.1)."""

import pytest

from clients.cq import compile_query, membership_op

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
