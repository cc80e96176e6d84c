"""What the lifecycle rules cost: ingest throughput and publish-to-queryable latency with the
consolidation, summary and pruning rules off, on, and on with wall-clock ticks every second.

The workload is the households of ``workload.py`` over ten simulated years, so every agent
crosses nine year ends (consolidation, L1 summaries, an L2 at year 10, pruning) during the run.
``--wall-clock-share`` of the agents publish without a year, so the ticks have sessions to close.

    python -m tests.benchmarks.bench_lifecycle [--events 60000] [--rate 500] [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from processors.config import (
    ConsolidationRules,
    LifecycleRules,
    PruningRules,
    SummaryRules,
)
from streams.runtime.devstack.stack import DevStack
from tests.benchmarks import workload
from tests.benchmarks.bench_ingest import engram_rate
from tests.benchmarks.bench_latency import measure
from tests.benchmarks.servers import percentile

OFF = LifecycleRules(
    consolidation=ConsolidationRules(enabled=False),
    summaries=SummaryRules(enabled=False),
    pruning=PruningRules(enabled=False),
)
CONFIGS: dict[str, dict[str, Any]] = {
    "lifecycle off": {"lifecycle": OFF, "schedule_interval": 0},
    "lifecycle on, no ticks": {"lifecycle": LifecycleRules(), "schedule_interval": 0},
    "lifecycle on, ticks every 1 s": {"lifecycle": LifecycleRules(), "schedule_interval": 1.0},
}


async def main(events: int, agents: int, rate: float, seconds: float) -> None:
    rates: dict[str, float] = {}
    stack = DevStack(Path(tempfile.mkdtemp(prefix="engram-bench-lifecycle-")))
    endpoints = stack.start()
    try:
        for name, overrides in CONFIGS.items():
            measured = await engram_rate(stack, endpoints, events, agents, 1, **overrides)
            rates[name] = measured.per_second
            print(f"ingest, {name}: {rates[name]:,.0f} events/s", flush=True)
    finally:
        stack.stop()
        shutil.rmtree(stack.data_dir, ignore_errors=True)
    lags: dict[str, list[float]] = {}
    for name, overrides in CONFIGS.items():
        lags[name] = await measure(rate, seconds, agents, **overrides)
    print(f"\nevents={events} agents={agents} (1 worker); latency at {rate:.0f} events/s")
    print("| configuration | ingest events/s | latency p50 ms | latency p99 ms |")
    print("|---|---|---|---|")
    for name in CONFIGS:
        p50, p99 = percentile(lags[name], 50), percentile(lags[name], 99)
        print(f"| {name} | {rates[name]:,.0f} | {p50:.0f} | {p99:.0f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--agents", type=int, default=1_000)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--wall-clock-share", type=float, default=0.2)
    args = parser.parse_args()
    os.environ[workload.WALL_CLOCK_SHARE_VARIABLE] = str(args.wall_clock_share)
    asyncio.run(main(args.events, args.agents, args.rate, args.seconds))
