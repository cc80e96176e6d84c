"""The query service's Prometheus metrics: retrieval latency per mode, and read-your-writes
waits and their timeouts. Measured around the route, not in the engine, so the figure is what
a caller waits for (the wait for ``after`` included) and the engine stays free of it.

The metrics live in a registry of the caller's (a node's), so several services in one process
(the tests) do not collide, and ``/metrics`` serves that registry: a node adds its workers'
figures to it (:mod:`streams.runtime.node_metrics`).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = ["LATENCY_BUCKETS", "ServiceMetrics"]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ServiceMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.retrieval_seconds = Histogram(
            "engram_retrieval_seconds",
            "Time to answer a retrieval, by mode (as_of: a recall from the log); failed "
            "retrievals included.",
            ["mode"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.ryw_waits = Counter(
            "engram_read_your_writes_waits",
            "Retrievals that waited for positions of `after` to be applied.",
            registry=registry,
        )
        self.ryw_timeouts = Counter(
            "engram_read_your_writes_timeouts",
            "Waits for `after` that ran out of time (answered 504).",
            registry=registry,
        )
