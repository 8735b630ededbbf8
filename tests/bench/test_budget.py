"""bench.budget's reading of trace files and common.trace's lines (the
figures themselves are measured by ``python -m bench.live --budget``, not
by the suite)."""

import pytest

from bench import budget
from common import trace


def _write(path, lines):
    path.write_text("".join(f"{line}\n" for line in lines))


def test_each_stage_costs_the_time_since_the_one_before(tmp_path):
    # One event, seq 7, sent at 100.000 and delivered by node-1.
    _write(
        tmp_path / "node-1-1.trace",
        [
            "100.003 node-1 committed 0 7",
            "100.004 node-1 rung 0 0",
            "100.005 node-1 popped 0 0",
            "100.006 node-1 claimed 5 9",
            "100.008 node-1 appended 5 9",
            "100.0081 node-1 rang_sockets 5 9",
            "100.009 node-1 woken 0 0",
            "100.011 node-1 read 7 7",
            "100.0112 node-1 written 7 7",
        ],
    )
    samples = [[7, 100.0, 100.012, 0], [7, 100.0, 100.014, 0]]
    got = budget.budget(tmp_path, samples, ["node-1"])["node-1"]
    assert got["committed"]["p50_ms"] == pytest.approx(3.0)
    assert got["rung"]["p50_ms"] == pytest.approx(1.0)
    assert got["appended"]["p50_ms"] == pytest.approx(2.0)
    assert got["read"]["p50_ms"] == pytest.approx(2.0)
    assert got["first frame received"]["p50_ms"] == pytest.approx(0.8)
    assert got["last frame received"]["p50_ms"] == pytest.approx(2.8)
    assert got["total (first subscriber)"]["p50_ms"] == pytest.approx(12.0)
    assert got["total (last subscriber)"]["p50_ms"] == pytest.approx(14.0)


def test_a_stage_without_seqs_is_the_first_mark_after_the_stage_before(tmp_path):
    # An earlier ring (for an earlier event) is not this event's ring.
    _write(
        tmp_path / "t.trace",
        [
            "99.0 node-1 rung 0 0",
            "100.001 node-1 committed 0 3",
            "100.002 node-1 rung 0 0",
        ],
    )
    marks = budget._read_marks(tmp_path)
    assert budget._after(marks[("rung", "node-1")], 100.001) == pytest.approx(100.002)
    assert budget._covering(marks[("committed", "*")], 3) == pytest.approx(100.001)
    assert budget._covering(marks[("committed", "*")], 4) is None


def test_an_event_a_node_never_delivered_is_left_out_of_its_figures(tmp_path):
    _write(tmp_path / "t.trace", ["100.003 node-1 committed 0 7"])
    got = budget.budget(tmp_path, [[7, 100.0, 100.01, 0]], ["node-1"])
    assert got == {"node-1": {}}


def test_statements_are_counted_from_each_process_first_mark(tmp_path):
    _write(
        tmp_path / "a.trace",
        ["1 node-1 stmts:node:db 10 10", "2 node-1 stmts:node:db 30 30"],
    )
    _write(
        tmp_path / "b.trace",
        ["1 node-1 stmts:node:db 5 5", "2 node-1 stmts:node:db 15 15"],
    )
    assert budget.statements(tmp_path, 10) == {"node-1 node:db": 3.0}


def test_a_trace_mark_is_one_line_in_the_process_file(tmp_path, monkeypatch):
    monkeypatch.setattr(trace, "DIR", str(tmp_path))
    monkeypatch.setattr(trace, "enabled", True)
    monkeypatch.setattr(trace, "_file", {})
    trace.mark("read", "node-1", 4, 9)
    (path,) = tmp_path.glob("node-1-*.trace")
    _, node, stage, first, last = path.read_text().split()
    assert (node, stage, first, last) == ("node-1", "read", "4", "9")


def test_off_a_trace_mark_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(trace, "DIR", str(tmp_path))
    monkeypatch.setattr(trace, "enabled", False)
    trace.mark("read", "node-1", 4, 9)
    assert not list(tmp_path.iterdir())
