"""How long the worker's batches and takeovers take, kept as plain counts by the Faust shell
(:mod:`streams.worker.app`) and exported by the metrics collector at scrape time: a batch costs
one bisect, and nothing here depends on the metrics library."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

BATCH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Upper bounds (seconds) of the batch duration histogram; a batch of the tuned worker takes
tens of milliseconds, a takeover's first batch seconds."""


@dataclass
class WorkerTimings:
    batch_counts: list[int] = field(default_factory=lambda: [0] * (len(BATCH_BUCKETS) + 1))
    """Batches per bucket of :data:`BATCH_BUCKETS` (not cumulative); the last is +Inf."""
    batch_seconds: float = 0.0
    takeovers: int = 0
    takeover_seconds: float = 0.0
    """Spent reading partitions' derived log back on takeover, all takeovers together."""
    takeover_records: int = 0
    """Derived events read back on takeover."""

    def batch(self, seconds: float) -> None:
        self.batch_counts[bisect_left(BATCH_BUCKETS, seconds)] += 1
        self.batch_seconds += seconds

    def takeover(self, seconds: float, records: int) -> None:
        self.takeovers += 1
        self.takeover_seconds += seconds
        self.takeover_records += records

    def cumulative_buckets(self) -> list[tuple[str, int]]:
        """``(le, count)`` pairs as Prometheus histograms expose them."""
        total, pairs = 0, []
        for bound, count in zip((*BATCH_BUCKETS, float("inf")), self.batch_counts, strict=True):
            total += count
            pairs.append(("+Inf" if bound == float("inf") else repr(bound), total))
        return pairs
