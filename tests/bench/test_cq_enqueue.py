"""bench.cq_enqueue's own logic: its queries, the values and how many
events they queue, the reading of register_cq answers (a node without CQs
is skipped with its reason). The measurement itself is not tested (no
timing in the suite), nor bench.run, which needs the bench's own
requirements (paho-mqtt)."""

import random

import pytest

from bench import cq_enqueue
from clients.cq import compile_query


def test_the_queries_are_valid_distinct_thresholds():
    queries = cq_enqueue.cq_queries()

    assert len(queries) == cq_enqueue.CQS == 100
    assert len({name for name, _ in queries}) == 100
    assert cq_enqueue.thresholds(queries) == [float(k) for k in range(100)]
    for _, query in queries:
        compile_query(query, region="bench")  # raises if refused


def test_each_value_enters_about_half_the_cqs():
    values = cq_enqueue.draw_values(20000, random.Random(5))
    bounds = cq_enqueue.thresholds(cq_enqueue.cq_queries())

    entered = [sum(1 for k in bounds if x > k) for x in values]

    assert 45 <= sum(entered) / len(entered) <= 55
    assert all(0 <= x < 100 for x in values)


def test_only_values_entering_some_cq_are_expected_queued():
    assert cq_enqueue.expected_queued([0.0, 0.5, 99.9, 0.0], [0.0, 1.0]) == 2


def test_cq_registered_for_the_cq_ends_the_wait_and_other_frames_do_not():
    ok = {"type": "cq_registered", "id": "n-gt-1", "name": "n-gt-1", "count": 0}
    image = {"type": "image", "id": "n-gt-1", "cq": "n-gt-1", "entries": []}

    assert cq_enqueue.registered(ok, "n-gt-1")
    assert not cq_enqueue.registered(image, "n-gt-1")
    assert not cq_enqueue.registered({**ok, "id": "n-gt-2"}, "n-gt-1")


def test_bad_query_for_a_valid_query_means_the_node_has_no_cqs():
    refused = {
        "type": "error",
        "id": "n-gt-0",
        "code": "bad_query",
        "message": "continuous queries are not supported yet",
    }

    with pytest.raises(cq_enqueue.CqUnsupportedError) as raised:
        cq_enqueue.registered(refused, "n-gt-0")
    assert "does not support continuous queries" in str(raised.value)
    assert "not supported yet" in str(raised.value)
    with pytest.raises(RuntimeError):
        cq_enqueue.registered({**refused, "code": "bad_field"}, "n-gt-0")
