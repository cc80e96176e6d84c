"""End-to-end ingest: publish to applied in both projections, against a naive Faust agent.

    python -m tests.benchmarks.bench_ingest [--events 60000] [--agents 1000] [--workers 2]
    python -m tests.benchmarks.bench_ingest --workers 2 --rate 1000 --events 20000

After a warm-up, the clock runs from the start of publishing (a separate process, as fast as it
can) until the last event is applied: the publisher shares the two cores, as agents would. The
naive baseline is a parse-and-forward Faust agent (one record at a time,
``json.loads`` and ``topic.send``), run on the same broker in the same run.

``--rate`` publishes at a steady rate instead, for what a process spends per event when it
keeps up with the stream rather than drains a backlog (smaller batches and fetches); the naive
baseline is not run then.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faust

from schemas.topics import Topics
from streams.eventlog.publisher import Position
from streams.eventlog.topic_admin import ensure_topics
from streams.runtime.devstack.stack import DevStack
from streams.runtime.node import Endpoints, Node
from streams.settings import EngramSettings
from tests.benchmarks.servers import engram_collector, scratch_dir


def publish_backlog(
    bootstrap: str, prefix: str, events: int, agents: int, rate: float | None = None
) -> list[Position]:
    """Publish from a separate process (at a steady ``rate`` if given); the last offset of every
    partition written."""
    return publish_timed_backlog(bootstrap, prefix, events, agents, rate)[0]


def publish_timed_backlog(
    bootstrap: str, prefix: str, events: int, agents: int, rate: float | None = None
) -> tuple[list[Position], float]:
    """:func:`publish_backlog`, and when the publisher's first send began (``time.monotonic()``):
    where a rate's clock starts, so the publisher's own start (~0.4 s of Python, imports and
    building the events) is no one's time."""
    with tempfile.NamedTemporaryFile("r", suffix=".positions") as positions:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.benchmarks.workload",
                bootstrap,
                prefix,
                str(events),
                str(agents),
                *([str(rate)] if rate else []),
                "--positions",
                positions.name,
            ],
            check=True,
            timeout=600 if rate is None else events / rate * 3 + 60,
        )
        first, *lines = positions
        label, started = first.split()
        if label != "started":
            raise RuntimeError(f"the publisher wrote no start time: {first!r}")
        return [
            Position(topic, int(partition), int(offset))
            for topic, partition, offset in (line.split() for line in lines)
        ], float(started)


@dataclass(frozen=True)
class Rate:
    """Events/s over the wall clock, and the CPU time this process spent meanwhile (all its
    threads: Faust's consumer, Qdrant Edge): per event, that is the cost the shared cores do
    not blur, which is what to compare when other work runs on the machine."""

    per_second: float
    cpu_seconds: float
    events: int

    @property
    def cpu_us_per_event(self) -> float:
        return self.cpu_seconds / self.events * 1e6


async def drain(counter: object, attribute: str, target: int, timeout: float) -> float:
    start = time.perf_counter()
    deadline = start + timeout
    while getattr(counter, attribute) < target:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"only {getattr(counter, attribute)} of {target} in {timeout}s")
        await asyncio.sleep(0.02)
    return time.perf_counter() - start


async def applied_everywhere(node: Node, positions: list[Position], timeout: float) -> None:
    """Until both projections applied every position (read from the stores themselves)."""
    stores = [s for s in (node.working, node.episodic) if s is not None]
    deadline = time.perf_counter() + timeout
    for p in positions:
        for store in stores:
            while True:
                applied = await store.applied_offset(p.topic, p.partition)
                if applied is not None and applied >= p.offset:
                    break
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"{p} not applied within {timeout}s")
                await asyncio.sleep(0.02)


async def engram_rate(
    stack: DevStack,
    endpoints: Endpoints,
    events: int,
    agents: int,
    workers: int,
    rate: float | None = None,
    projector: bool = False,
    **overrides: Any,
) -> Rate:
    """Events/s of Engram over a backlog; ``overrides`` are EngramSettings fields (one worker
    only: worker processes read their settings from the environment). The collector is tuned
    as the ``engram`` commands tune it while Engram runs in this process, not for the naive
    baseline measured after it."""
    projector = projector or workers > 1
    with engram_collector():
        prefix = f"b{uuid.uuid4().hex[:6]}."
        os.environ["ENGRAM_TOPIC_PREFIX"] = prefix  # inherited by the extra worker processes
        os.environ["ENGRAM_REDIS_NAMESPACE"] = prefix.rstrip(".")
        settings = EngramSettings(
            data_dir=stack.data_dir / prefix,
            qdrant_path=stack.edge_path / prefix,
            partitions=4,
            episodic_writer="projector" if projector else "worker",
            **overrides,
        )
        # Above one worker, this process only projects episodic memory (Qdrant Edge holds the GIL
        # while it writes, which would stall a worker sharing the process) and the workers run
        # as processes of their own, as `engram up --workers N` runs them.
        node = Node(
            settings,
            endpoints,
            run_processors=not projector,
            run_service=False,
            run_projector=projector,
        )
        await node.start()
        stack.start_workers(workers if projector else 0, endpoints)
        try:
            # Warm-up: every worker joins the group and folds its partitions' (empty) state.
            warm = await asyncio.to_thread(
                publish_backlog, endpoints.kafka_bootstrap, prefix, 800, agents
            )
            await applied_everywhere(node, warm, 120)
            cpu = time.process_time()
            done, start = await asyncio.to_thread(
                publish_timed_backlog, endpoints.kafka_bootstrap, prefix, events, agents, rate
            )
            await applied_everywhere(node, done, 600)
            return Rate(events / (time.monotonic() - start), time.process_time() - cpu, events)
        finally:
            stack.stop_workers()
            await node.stop()


async def naive_rate(bootstrap: str, events: int, agents: int) -> Rate:
    prefix = f"n{uuid.uuid4().hex[:6]}."
    topics = Topics(prefix)
    await ensure_topics(bootstrap, topics, 4)
    data = Path(tempfile.mkdtemp(prefix="engram-naive-"))
    app = faust.App(
        f"{prefix}naive",
        broker=f"kafka://{bootstrap}",
        store="memory://",
        topic_partitions=4,
        broker_session_timeout=6.0,
        web_enabled=False,
        producer_linger=0.005,
        consumer_auto_offset_reset="earliest",
        datadir=str(data),
    )
    source = app.topic(*topics.agent_inputs, value_serializer="raw")
    out = app.topic(topics.items, value_serializer="raw")
    seen = {"n": 0}

    @app.agent(source)
    async def forward(stream: faust.StreamT[bytes]) -> None:
        async for value in stream:
            event = json.loads(value)
            event["importance"] = 0.5
            await out.send(key=event["agent_id"].encode(), value=json.dumps(event).encode())
            seen["n"] += 1

    counter = type("Counter", (), {"n": property(lambda _: seen["n"])})()
    await app.start()
    try:
        await asyncio.to_thread(publish_backlog, bootstrap, prefix, 400, agents)
        await drain(counter, "n", 400, 60)
        cpu = time.process_time()
        _, start = await asyncio.to_thread(publish_timed_backlog, bootstrap, prefix, events, agents)
        await drain(counter, "n", 400 + events, 600)
        return Rate(events / (time.monotonic() - start), time.process_time() - cpu, events)
    finally:
        await app.stop()


async def main(
    events: int,
    agents: int,
    workers: int,
    embedder: str,
    rate: float | None = None,
    projector: bool = False,
) -> None:
    with scratch_dir("engram-bench-") as root:
        stack = DevStack(root)
        endpoints = stack.start()
        try:
            engram = await engram_rate(
                stack, endpoints, events, agents, workers, rate, projector, embedder=embedder
            )
            naive = None if rate else await naive_rate(endpoints.kafka_bootstrap, events, agents)
        finally:
            stack.stop()
    print(
        f"events={events} agents={agents} workers={workers} embedder={embedder}"
        + (" episodic=projector" if projector or workers > 1 else "")
    )
    print(
        f"engram ({workers} worker process(es), Redis + Qdrant Edge applied"
        + (f", published at {rate:,.0f}/s" if rate else "")
        + f"): {engram.per_second:,.0f} events/s, "
        f"{engram.cpu_us_per_event:,.0f} us CPU per event in this process"
        + (" (the projector only)" if projector or workers > 1 else "")
    )
    if naive is None:
        return
    print(
        f"naive Faust parse-and-forward agent (1 process): {naive.per_second:,.0f} events/s, "
        f"{naive.cpu_us_per_event:,.0f} us CPU per event"
    )
    print(f"ratio: {engram.per_second / naive.per_second:.2f}x")
    if workers == 1 and not projector:
        print(f"cpu ratio: {naive.cpu_us_per_event / engram.cpu_us_per_event:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--agents", type=int, default=1_000)
    parser.add_argument(
        "--workers", type=int, default=1, help="worker processes (1 consumer group)"
    )
    parser.add_argument(
        "--embedder",
        default="hashing",
        help="ENGRAM_EMBEDDER of the workers (minilm needs the semantic extra)",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=None,
        help="publish at this steady rate (events/s) instead of as fast as possible; "
        "no naive baseline then",
    )
    parser.add_argument(
        "--projector",
        action="store_true",
        help="one worker process too, with episodic memory written by the projector in this "
        "process (as with several workers) instead of by the worker",
    )
    args = parser.parse_args()
    os.environ["ENGRAM_EMBEDDER"] = args.embedder  # the extra worker processes read it
    asyncio.run(
        main(args.events, args.agents, args.workers, args.embedder, args.rate, args.projector)
    )
