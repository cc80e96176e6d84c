"""Python's cyclic garbage collector, tuned for Engram's processes.

A worker and a query service keep a large heap that lives as long as the process (per-agent
state, decoded memories, Faust, aiokafka, FastAPI) and allocate many short-lived objects per
event and per request, almost none of them in reference cycles: reference counting frees
them, and the collector mostly walks objects that survive. CPython's default thresholds,
(700, 10, 10), start a collection every 700 net allocations, so it runs many times per batch
and per request. Measured on a 2-core machine, back to back (``tests/benchmarks/README.md``,
"The garbage collector tuned"): one worker ingested 8-17% more events per second with the
thresholds below (CPU per event 565-621 -> 523-526 us); a retrieval's first read of an agent
of 10,000 memories lost its tail (p99 93-94 -> 31-34 ms), while steady reads moved within the
noise. Garbage in cycles is still collected, in bigger and rarer sweeps (peak memory of the
ingest benchmark 688 -> 702 MB).
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["COLLECTOR_THRESHOLDS", "tune_collector"]

# A young collection every 10,000 net allocations rather than 700; the middle and old
# generations every 20 and 100 of the younger ones. (50,000, 50, 1,000) measured the same.
COLLECTOR_THRESHOLDS: Final = (10_000, 20, 100)


def tune_collector() -> None:
    """Set :data:`COLLECTOR_THRESHOLDS` for this process: once, at a command's start."""
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
