"""The Faust settings Engram needs that Faust does not expose: the consumer's fetch wait, topic
configs for the topics Faust declares itself, and a cheaper handoff of each fetched record to the
streams (:mod:`streams.worker.faust_handoff`).

Faust's aiokafka driver hardcodes ``fetch_max_wait_ms=1500``. Kafka answers a fetch as soon as
data arrives, so there it costs nothing; the Tansu broker of the dev stack holds the fetch for
most of that wait (measured: median 445 ms from produce to consume at 1500 ms, 4 ms at 50 ms),
which would put half a second into every publish-to-queryable latency. A shorter wait is
harmless on Kafka (a few more empty fetches when idle), so Engram sets it everywhere.

Faust creates its internal topics (the assignor's leader topic) and any missing topic an agent
reads with ``topic_replication_factor`` replicas but no way to ask for ``min.insync.replicas``;
:class:`TunedFaustApp` adds ``topic_configs`` to every topic it describes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import faust
from faust.transport.drivers import aiokafka as driver
from faust.types import TP, TopicT
from mode.services import WaitResults

from streams.worker.faust_handoff import wait_first_started


class _ConsumerThread(driver.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        wait_ms = getattr(self.app, "fetch_max_wait_ms", None)
        if wait_ms is not None:
            # Read by AIOKafkaConsumer.start() when it builds its fetcher.
            consumer._fetch_max_wait_ms = wait_ms
        return consumer


CommitCeiling = Callable[[str, int], int | None]
"""``(topic, partition)`` -> the highest offset the consumer may commit there (-1: none at all;
None: no ceiling, a topic the worker does not derive from)."""


def capped_commits(offsets: Mapping[TP, int], ceiling: CommitCeiling) -> dict[TP, int]:
    """``offsets`` no higher than ``ceiling`` allows; a partition with no room left out."""
    capped: dict[TP, int] = {}
    for tp, offset in offsets.items():
        top = ceiling(tp.topic, tp.partition)
        if top is None:
            capped[tp] = offset
        elif top >= 0:
            capped[tp] = min(offset, top)
    return capped


class _Consumer(driver.Consumer):
    def _new_consumer_thread(self) -> _ConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def _filter_committable_offsets(self, tps: Iterable[TP]) -> dict[TP, int]:
        # Faust counts a jump in the offsets it reads as acknowledged (its gap tracking, for
        # transactions' control records), so after the worker held records back and rewound
        # (processors/source_order.py) it would commit past records not derived yet. The
        # worker's ceiling is the offset after the last one derived.
        offsets = super()._filter_committable_offsets(tps)
        ceiling: CommitCeiling | None = getattr(self.app, "commit_ceiling", None)
        if ceiling is None:
            return offsets
        return {
            tp: offset
            for tp, offset in capped_commits(offsets, ceiling).items()
            if self._should_commit(tp, offset)
        }

    async def wait_first(self, *coros: Any, timeout: Any = None) -> WaitResults:
        # Faust's fetcher awaits this once per record (the handoff to the streams).
        stopped, crashed = self._stopped.is_set, self._crashed.is_set
        return await wait_first_started(
            super().wait_first, lambda: stopped() or crashed(), *coros, timeout=timeout
        )


class _Transport(driver.Transport):
    Consumer = _Consumer


class TunedFaustApp(faust.App):
    """A Faust app whose Kafka consumer waits at most ``fetch_max_wait`` seconds per fetch, and
    whose topics, when Faust creates them, get ``topic_configs`` besides their own."""

    def __init__(
        self,
        *args: Any,
        fetch_max_wait: float = 0.05,
        topic_configs: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        self.fetch_max_wait_ms = max(1, int(fetch_max_wait * 1000))
        self.topic_configs = dict(topic_configs or {})
        self.commit_ceiling: CommitCeiling | None = None
        """Set by the worker: how far its consumer may commit each partition."""
        super().__init__(*args, **kwargs)

    def topic(self, *topics: str, config: Mapping[str, Any] | None = None, **kwargs: Any) -> TopicT:
        return super().topic(*topics, config={**self.topic_configs, **(config or {})}, **kwargs)

    def _new_transport(self) -> Any:
        return _Transport(self.conf.broker_consumer, self)
