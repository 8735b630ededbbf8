"""bench.recovery's own logic: counting a session's frames up to its
marker, the batches and samples of the overflowing fill, the summary of
the samples and the targets. The measurement itself is not tested (no
timing in the suite)."""

import pytest

from bench import recovery


def test_tally_counts_events_the_gap_and_resync_entries_until_the_marker():
    counts = recovery.new_tally()
    frames = [
        {"type": "gap", "since": 41, "dropped": 3, "reason": "overflow"},
        {
            "type": "image",
            "resync": True,
            "interest": 7,
            "entries": [{"key": "a"}, {"key": "b", "destroyed": True}],
        },
        {"type": "image", "resync": True, "interest": 8, "keys": ["c"]},
        {"type": "event", "seq": 50},
    ]

    assert not any(recovery.tally(f, counts) for f in frames)
    assert recovery.tally({"type": "marker", "resynced": 3}, counts)
    assert counts == {"events": 1, "gaps": 1, "images": 2, "resync_entries": 3}


def test_tally_ignores_an_image_that_is_not_a_resync():
    counts = recovery.new_tally()

    recovery.tally({"type": "image", "id": "r", "entries": [{"key": "a"}]}, counts)

    assert counts == recovery.new_tally()


def test_tally_raises_on_an_error_frame():
    with pytest.raises(RuntimeError, match="queue_gone"):
        recovery.tally({"type": "error", "code": "queue_gone"}, recovery.new_tally())


class FakeRest:
    def __init__(self):
        self.batches = []

    def ok(self, method, path, body=None):
        self.batches.append(body["entries"])


def test_fill_writes_the_keys_in_turn_in_batches_and_samples_at_each_step():
    rest = FakeRest()
    sampled = []

    samples = recovery.fill_overflowing(
        rest,
        "r",
        "k",
        events=5500,
        keys=2000,
        sample=lambda written: sampled.append(written) or written,
        sample_every=2000,
    )

    assert [len(b) for b in rest.batches] == [1000] * 5 + [500]
    assert list(rest.batches[2]) == [f"k{i}" for i in range(1000)]
    assert rest.batches[2]["k0"] == {"i": 2000}
    assert sampled == samples == [2000, 4000, 5500]


def sample(written, queued, rss, gap=False):
    return {"written": written, "queued": queued, "gap": gap, "rss_mib": rss}


def test_summarise_reports_rss_and_the_largest_queue_against_the_cap():
    samples = [
        sample(10, 10, 400.0),
        sample(20, 100, 480.0),
        sample(30, 0, 440.0, gap=True),
    ]

    s = recovery.summarise(samples, cap=100)

    assert s["rss_first_mib"] == 400.0
    assert s["rss_last_mib"] == 440.0
    assert s["rss_max_mib"] == 480.0
    assert s["rss_change"] == pytest.approx(0.1)
    assert s["rss_max_change"] == pytest.approx(0.2)
    assert s["max_queued_seen"] == 100
    assert s["queue_within_cap"]
    assert s["gap_seen_at_written"] == 30
    assert not recovery.summarise(samples, cap=99)["queue_within_cap"]


def result(ratio, rss_change, max_seen, cap=100):
    return {
        "events": 1000,
        "keys": 10,
        "ratio": ratio,
        "rss_change": rss_change,
        "max_queued_seen": max_seen,
        "cap": cap,
        "queue_within_cap": max_seen <= cap,
    }


def test_targets_hold_within_their_bounds_and_fail_past_them():
    good = recovery.targets(result(2.0, -0.2, 100))
    bad = recovery.targets(result(2.01, 0.21, 101))

    assert all(t["met"] for t in good.values())
    assert not any(t["met"] for t in bad.values())
    assert good["recovery_ratio"]["ratio"] == (
        "recovery 1000 events/10 keys vs replay 10 (hello->marker)"
    )


def test_rows_name_each_target_and_whether_it_is_met():
    r = {
        **result(1.5, 0.05, 100),
        "rss_first_mib": 400.0,
        "rss_last_mib": 420.0,
        "rss_max_mib": 430.0,
        "gap_seen_at_written": 110,
        "recovery": {"seconds": 0.3, "resync_entries": 10, "images": 1},
        "replay": {"seconds": 0.2},
    }
    r["target"] = recovery.targets(r)

    lines = recovery.rows(r)

    assert lines[0].startswith("recovery 1000 events/10 keys vs replay 10")
    assert "= 1.50 (target <= 2.0: yes)" in lines[0]
    assert "max 100 seen, cap 100 (yes)" in lines[1]
    assert "(+5.0%)" in lines[2]
    assert lines[2].endswith("(yes)")


def test_table_rows_have_the_bench_table_columns_and_targets():
    r = {
        **result(0.55, 0.042, 99000, cap=100000),
        "rss_first_mib": 388.0,
        "rss_last_mib": 404.2,
        "rss_max_mib": 404.2,
        "gap_seen_at_written": 110000,
        "fill_ev_s": 38526.0,
        "recovery": {
            "seconds": 0.0688,
            "resync_entries": 10,
            "images": 1,
            "gaps": 1,
            "events": 0,
            "gap": {"since": 10, "dropped": 100000, "reason": "overflow"},
        },
        "replay": {"seconds": 0.1241},
    }
    r["target"] = recovery.targets(r)

    rows = recovery.table_rows(r)

    assert all(len(row) == 6 for row in rows)
    assert rows[0] == (
        "recovery 1000 events/10 keys vs replay 10 (hello->marker)",
        "68.8 ms",
        "replay 124.1 ms",
        "0.55",
        "<= 2.0",
        "yes",
    )
    assert rows[1][1:] == ("max 99000 seen", "", "", "<= 100000", "yes")
    assert rows[2][3:] == ("+4.2%", "+-20%", "yes")
    assert "dropped 100000" in recovery.detail(r)
    assert "10 resync entries in 1 images for 10 keys" in recovery.detail(r)
