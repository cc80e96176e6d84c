"""Batch durations kept as bucket counts, exported cumulatively as Prometheus expects."""

from __future__ import annotations

from streams.worker.timings import BATCH_BUCKETS, WorkerTimings


def test_each_batch_lands_in_the_first_bucket_that_holds_it() -> None:
    timings = WorkerTimings()
    for seconds in (0.001, 0.005, 0.007, 0.3, 60.0):
        timings.batch(seconds)
    pairs = dict(timings.cumulative_buckets())
    assert pairs["0.005"] == 2  # an upper bound is inclusive (le)
    assert pairs["0.01"] == 3
    assert pairs["0.25"] == 3
    assert pairs["0.5"] == 4
    assert pairs["10.0"] == 4
    assert pairs["+Inf"] == 5
    assert len(pairs) == len(BATCH_BUCKETS) + 1
    assert abs(timings.batch_seconds - 60.313) < 1e-9


def test_takeovers_add_up() -> None:
    timings = WorkerTimings()
    timings.takeover(1.5, 100)
    timings.takeover(0.5, 20)
    assert (timings.takeovers, timings.takeover_seconds, timings.takeover_records) == (2, 2.0, 120)
