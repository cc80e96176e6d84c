"""A node's Prometheus metrics: a collector that reads the worker's counters
(:class:`~streams.worker.pipeline.IngestStats`, :class:`~streams.worker.timings.WorkerTimings`)
and the consumer's positions when scraped, so the processing path pays nothing per event; plus
the query service's own (:class:`~projections.service.metrics.ServiceMetrics`), in the same
registry.

Consumer lag per partition is the broker's high watermark (as the consumer last fetched it)
minus the next offset the worker will process: what a lag-driven autoscaler scales on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from projections.service.metrics import ServiceMetrics

if TYPE_CHECKING:
    from streams.runtime.node import Node

__all__ = ["NodeCollector", "node_registry"]

log = logging.getLogger("engram.metrics")


def node_registry(node: Node) -> tuple[CollectorRegistry, ServiceMetrics]:
    """A registry of the node's own (not the process-wide default: tests run several nodes
    in one process), holding the service's metrics and the node's collector."""
    registry = CollectorRegistry(auto_describe=True)
    service = ServiceMetrics(registry)
    registry.register(NodeCollector(node))
    return registry, service


class NodeCollector(Collector):
    def __init__(self, node: Node) -> None:
        self._node = node

    def collect(self) -> Iterator[Metric]:
        node = self._node
        version = getattr(node, "version", None)
        if version is not None:
            info = InfoMetricFamily(
                "engram_projection_version", "The projection version this process serves."
            )
            info.add_metric([], {"version": version.label})
            yield info
        if node.recorder is not None:
            failed = CounterMetricFamily(
                "engram_retrieval_records_failed",
                "Answered retrievals whose record on memory.access was lost.",
            )
            failed.add_metric([], node.recorder.failed)
            yield failed
        if node.pipeline is not None and node.processor is not None:
            yield from self._worker(node)

    def _worker(self, node: Node) -> Iterator[Metric]:
        assert node.pipeline is not None
        assert node.processor is not None
        stats, timings, topics = node.pipeline.stats, node.processor.timings, node.topics
        for name, help_text, value in (
            ("engram_worker_batches", "Batches processed.", stats.batches),
            ("engram_worker_events", "Input records processed (every input topic).", stats.events),
            ("engram_worker_skipped", "Redelivered records already derived.", stats.skipped),
            ("engram_worker_projection_retries", "Store writes retried.", stats.projection_retries),
            (
                "engram_worker_held_back",
                "Records held back to be read again: records before them were not derived yet.",
                stats.held_back,
            ),
            (
                "engram_worker_forgotten_records",
                "Records skipped: sealed with a forgotten agent's key.",
                stats.forgotten_records,
            ),
            ("engram_worker_takeovers", "Partition takeovers.", timings.takeovers),
            (
                "engram_worker_takeover_records",
                "Derived events read back from the log on takeover.",
                timings.takeover_records,
            ),
        ):
            counter = CounterMetricFamily(name, help_text)
            counter.add_metric([], value)
            yield counter
        takeover = CounterMetricFamily(
            "engram_worker_takeover_seconds", "Time spent reading the derived log on takeover."
        )
        takeover.add_metric([], timings.takeover_seconds)
        yield takeover

        derived = CounterMetricFamily(
            "engram_worker_derived", "Derived events written, by topic.", labels=["topic"]
        )
        derived.add_metric([topics.items], stats.memories)
        derived.add_metric([topics.lifecycle], stats.lifecycle_events)
        yield derived

        dead = CounterMetricFamily(
            "engram_worker_dead_letters", "Records dead-lettered, by error kind.", labels=["kind"]
        )
        for kind, count in sorted(stats.dead_letter_kinds.items()):
            dead.add_metric([kind], count)
        yield dead

        batch = HistogramMetricFamily("engram_worker_batch_seconds", "Time to process a batch.")
        batch.add_metric([], timings.cumulative_buckets(), sum_value=timings.batch_seconds)
        yield batch

        if stats.last_batch_at is not None:
            last = GaugeMetricFamily(
                "engram_worker_last_batch_timestamp_seconds", "When the last batch ended."
            )
            last.add_metric([], stats.last_batch_at)
            yield last
        yield from self._positions(node)

    def _positions(self, node: Node) -> Iterator[Metric]:
        assert node.pipeline is not None
        assert node.processor is not None
        applied = dict(node.pipeline.stats.applied)
        offset = GaugeMetricFamily(
            "engram_worker_input_offset",
            "The last input offset processed, by topic and partition (its rate: events in).",
            labels=["topic", "partition"],
        )
        for (topic, partition), value in sorted(applied.items()):
            offset.add_metric([topic, str(partition)], value)
        yield offset
        lag = GaugeMetricFamily(
            "engram_worker_consumer_lag",
            "Records on the broker not processed yet, by topic and partition.",
            labels=["topic", "partition"],
        )
        for topic, partition, behind in _lags(node.processor.app, applied):
            lag.add_metric([topic, str(partition)], behind)
        yield lag


def _lags(app: Any, applied: dict[tuple[str, int], int]) -> Iterator[tuple[str, int, int]]:
    """Per assigned partition this worker has processed a record of: high watermark minus
    the next offset to process. A partition not read yet has no known position, so no lag."""
    try:
        assigned = sorted(app.consumer.assignment())
    except Exception:  # no consumer yet (starting) or none any more (stopping)
        return
    for tp in assigned:
        done = applied.get((tp.topic, tp.partition))
        if done is None:
            continue
        try:
            highwater = app.consumer.highwater(tp)
        except Exception:
            log.debug("no high watermark for %s", tp, exc_info=True)
            continue
        if highwater is not None:
            yield tp.topic, tp.partition, max(0, int(highwater) - (done + 1))
