"""bench.split's arithmetic and parsing (its measurements are not tested:
no timing in the suite)."""

from bench import split

DUMP = """Process 5670: /work/main/.venv/bin/python -m daphne -b 127.0.0.1 -p 8000
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 5670 (idle): "MainThread"
    select (selectors.py:468)
Thread 5679 (active): "db-writes_0"
    _worker (concurrent/futures/thread.py:81)
Thread 0x7F3A12345700 (idle): "no native id"
"""


def test_thread_names_are_read_from_py_spy_dump():
    assert split.thread_names(DUMP) == {
        5670: "MainThread",
        5679: "db-writes_0",
        0x7F3A12345700: "no native id",
    }


def test_nothing_to_name_without_thread_lines():
    assert split.thread_names("Error: no such process") == {}


def test_cpu_is_divided_by_the_units_and_a_new_key_starts_at_zero():
    before = {"daphne": 1.0, "worker": 2.0}
    after = {"daphne": 1.5, "worker": 2.0, "new": 0.25}
    assert split.per_unit(before, after, 1000) == {
        "daphne": 500.0,
        "worker": 0.0,
        "new": 250.0,
    }


def test_summary_takes_the_median_of_each_process_and_names_threads():
    runs = [
        {"rate": r, "processes_us": {"daphne": d}, "threads_us": {7: t}}
        for r, d, t in ((100.0, 10.0, 1.0), (300.0, 30.0, 3.0), (200.0, 20.0, 2.0))
    ]
    got = split.summarise(runs, {7: "MainThread"})
    assert got["rate"] == {"median": 200.0, "min": 100.0, "max": 300.0}
    assert got["processes_us"] == {"daphne": 20.0}
    assert got["threads_us"] == {"MainThread": 2.0}


def test_the_table_leaves_out_idle_threads_and_keeps_the_busiest_first():
    results = {
        "put frames, window 1": {
            "rate": {"median": 900.0, "min": 880.0, "max": 950.0},
            "processes_us": {"daphne": 800.0, "worker": 200.0},
            "threads_us": {"MainThread": 300.0, "db-writes_0": 430.0, "http_0": 0.0},
        }
    }
    lines = split.table(results, top=8)
    assert lines[0] == "== put frames, window 1: 900/s [880-950], CPU in us per unit"
    rows = [line.split() for line in lines[1:]]
    names = [row[-2] for row in rows]
    assert names == ["daphne", "worker", "db-writes_0", "MainThread"]
