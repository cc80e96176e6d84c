"""How ``bench_latency --phases`` times a worker's batches (tests/benchmarks/batch_phases.py).

The pipeline here is a plain object with the same method names, each sleeping a known time:
what is under test is the timing and the report, not the pipeline.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

from streams.worker.pipeline import IngestPipeline
from tests.benchmarks.batch_phases import BatchPhases


class SlowStore:
    async def apply(self, events: Any) -> None:
        await asyncio.sleep(0.02)


class Pipeline:
    """The steps of a batch, in the order ``IngestPipeline._handle`` runs them."""

    def __init__(self) -> None:
        self.store = SlowStore()

    @property
    def stores(self) -> list[SlowStore]:
        return [self.store]

    def derive(self, records: Any) -> list[Any]:
        time.sleep(0.01)
        return list(records)

    async def _send(self, events: Any) -> list[Any]:
        return []

    async def _log_markers(self, markers: Any) -> list[Any]:
        return await self._await_deliveries([], 0)

    @staticmethod
    async def _await_deliveries(sent: Any, count: int) -> list[Any]:
        await asyncio.sleep(0.005)
        return []

    async def apply(self, events: Any) -> None:
        await self.store.apply(events)

    async def _handle(self, records: Any) -> list[Any]:
        derived = self.derive(records)
        await self._await_deliveries(await self._send(derived), len(derived))
        await self._log_markers([])
        await self.apply(derived)
        return derived


def test_each_phase_of_each_batch_is_timed_and_reported() -> None:
    pipeline = Pipeline()
    phases = BatchPhases()
    phases.watch(cast(IngestPipeline, pipeline))

    async def two_batches() -> None:
        assert await pipeline._handle([1, 2, 3]) == [1, 2, 3]
        await pipeline._handle([4])

    asyncio.run(two_batches())

    assert phases.sizes == [3, 1]
    for batch in phases.batches:
        assert batch["derive"] >= 10.0
        assert batch["apply"] >= 20.0
        assert batch["SlowStore"] >= 20.0
        # Both waits for delivery count: the records' and, inside the markers', theirs.
        assert batch["_await_deliveries"] >= 10.0
        assert batch["_log_markers"] >= 5.0
        assert batch["batch"] >= batch["derive"] + batch["apply"] + batch["_log_markers"]
    report = phases.report()
    assert report.startswith("2 batches of")
    assert "| deriving |" in report
    assert "| of which SlowStore.apply |" in report


def test_a_report_without_batches_says_so() -> None:
    assert BatchPhases().report() == "no batch was timed"
