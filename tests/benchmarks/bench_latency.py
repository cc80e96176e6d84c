"""Publish-to-queryable latency at a steady rate (default 500 events/s for 20 s).

    python -m tests.benchmarks.bench_latency [--rate 500] [--seconds 20] [--phases]

Each event's ``occurred_at`` is stamped by the publisher (a separate process) right before it
is sent; an event counts as queryable when both projections have applied its memory. The
difference, per event, is the latency. ``--phases`` also times each phase of the worker's
batches (:mod:`tests.benchmarks.batch_phases`).
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from schemas.memory_events import DerivedEvent, MemoryRecorded
from streams.runtime.node import Endpoints, Node
from streams.settings import EngramSettings
from tests.benchmarks.batch_phases import BatchPhases
from tests.benchmarks.bench_ingest import publish_backlog
from tests.benchmarks.servers import engram_collector, fresh_servers, percentile, scratch_dir


async def measure(
    rate: float,
    seconds: float,
    agents: int,
    phases: BatchPhases | None = None,
    **overrides: Any,
) -> list[float]:
    """Publish-to-queryable latencies (ms) of recordings, the batches' phases into ``phases``
    when given; ``overrides`` are settings fields."""
    events = int(rate * seconds)
    latencies: list[float] = []
    with (
        engram_collector(),
        fresh_servers() as (bootstrap, redis_url),
        scratch_dir("engram-latency-") as data,
    ):
        prefix = f"l{uuid.uuid4().hex[:6]}."
        settings = EngramSettings(
            topic_prefix=prefix,
            redis_namespace=prefix.rstrip("."),
            qdrant_path=data / "edge",
            data_dir=data,
            partitions=4,
            **overrides,
        )
        node = await Node(settings, Endpoints(bootstrap, redis_url), run_service=False).start()
        try:
            pipeline = node.pipeline
            assert pipeline is not None
            apply = pipeline.apply

            async def timed_apply(derived: Sequence[DerivedEvent]) -> None:
                await apply(derived)
                now = datetime.now(UTC)
                latencies.extend(
                    (now - e.occurred_at).total_seconds() * 1000
                    for e in derived
                    if isinstance(e, MemoryRecorded)
                )

            # Warm-up: the first batch of each partition folds its state from the log (~2 s).
            await pipeline.stats.wait_for(
                await asyncio.to_thread(publish_backlog, bootstrap, prefix, 400, agents), 120
            )
            pipeline.apply = timed_apply  # type: ignore[method-assign, assignment]
            if phases is not None:
                phases.watch(pipeline)
            await asyncio.to_thread(publish_backlog, bootstrap, prefix, events, agents, rate)
            deadline = asyncio.get_running_loop().time() + 60
            while len(latencies) < events and asyncio.get_running_loop().time() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        finally:
            await node.stop()
    return latencies


async def main(rate: float, seconds: float, agents: int, timed: bool) -> None:
    events = int(rate * seconds)
    phases = BatchPhases() if timed else None
    steady = await measure(rate, seconds, agents, phases)
    print(f"rate={rate:.0f}/s events={events} measured={len(steady)} (after a warm-up)")
    print(
        f"publish-to-queryable latency: p50 {percentile(steady, 50):.1f} ms, "
        f"p99 {percentile(steady, 99):.1f} ms, max {max(steady):.1f} ms"
    )
    if phases is not None:
        print(phases.report())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--agents", type=int, default=1_000)
    parser.add_argument(
        "--phases", action="store_true", help="also time each phase of the worker's batches"
    )
    args = parser.parse_args()
    asyncio.run(main(args.rate, args.seconds, args.agents, args.phases))
