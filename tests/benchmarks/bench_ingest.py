"""End-to-end ingest: publish to applied in both projections, against a naive Faust agent.

    python -m tests.benchmarks.bench_ingest [--events 60000] [--agents 1000]

After a warm-up, the clock runs from the start of publishing (a separate process, as fast as it
can) until the last event is applied: the publisher shares the two cores, as agents would. The
naive baseline is what PARTS.md calls a parse-and-forward Faust agent (one record at a time,
``json.loads`` and ``topic.send``), run on the same broker in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import faust

from schemas.topics import Topics
from streams.runtime import Endpoints, Node
from streams.settings import EngramSettings
from streams.topic_admin import ensure_topics
from tests.benchmarks.servers import fresh_servers


def publish_backlog(bootstrap: str, prefix: str, events: int, agents: int) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.benchmarks.workload",
            bootstrap,
            prefix,
            str(events),
            str(agents),
        ],
        check=True,
        timeout=600,
    )


async def drain(counter: object, attribute: str, target: int, timeout: float) -> float:
    start = time.perf_counter()
    deadline = start + timeout
    while getattr(counter, attribute) < target:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"only {getattr(counter, attribute)} of {target} in {timeout}s")
        await asyncio.sleep(0.02)
    return time.perf_counter() - start


async def engram_rate(bootstrap: str, redis_url: str, events: int, agents: int) -> float:
    prefix = f"b{uuid.uuid4().hex[:6]}."
    data = Path(tempfile.mkdtemp(prefix="engram-bench-"))
    settings = EngramSettings(
        topic_prefix=prefix,
        redis_namespace=prefix.rstrip("."),
        qdrant_path=data / "edge",
        data_dir=data,
        partitions=4,
    )
    node = await Node(settings, Endpoints(bootstrap, redis_url), run_service=False).start()
    try:
        stats = node.pipeline.stats if node.pipeline else None
        assert stats is not None
        # Warm-up: the first batch of each partition folds its (empty) state from the log.
        await asyncio.to_thread(publish_backlog, bootstrap, prefix, 400, agents)
        await drain(stats, "events", 400, 60)
        start = time.perf_counter()
        await asyncio.to_thread(publish_backlog, bootstrap, prefix, events, agents)
        await drain(stats, "events", 400 + events, 600)
        return events / (time.perf_counter() - start)
    finally:
        await node.stop()


async def naive_rate(bootstrap: str, events: int, agents: int) -> float:
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
        start = time.perf_counter()
        await asyncio.to_thread(publish_backlog, bootstrap, prefix, events, agents)
        await drain(counter, "n", 400 + events, 600)
        return events / (time.perf_counter() - start)
    finally:
        await app.stop()


async def main(events: int, agents: int) -> None:
    with fresh_servers() as (bootstrap, redis_url):
        engram = await engram_rate(bootstrap, redis_url, events, agents)
        naive = await naive_rate(bootstrap, events, agents)
    print(f"events={events} agents={agents}")
    print(f"engram worker (1 process, Redis + Qdrant Edge applied): {engram:,.0f} events/s")
    print(f"naive Faust parse-and-forward agent:                    {naive:,.0f} events/s")
    print(f"ratio: {engram / naive:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--agents", type=int, default=1_000)
    args = parser.parse_args()
    asyncio.run(main(args.events, args.agents))
