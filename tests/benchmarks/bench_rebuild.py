"""Rebuild rate against live ingest, in one run: ingest the household workload through a live
worker, then rebuild both projections from the derived log into fresh stores.

    python -m tests.benchmarks.bench_rebuild [--events 60000] [--agents 1000] [--batch-size 20000]
                                             [--keyring redis|off]

``--keyring off`` runs without sealing (the derived log in clear), to measure what sealing costs.

The rebuild is the bulk path of ``engram replay`` (:func:`streams.rebuild.replay.replay_pass`): one
partition number at a time, the next one read while this one is applied.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from projections.episodic.edge import EdgeEpisodicMemory
from projections.working.redis_store import RedisWorkingMemory
from schemas.topics import Topics
from streams.privacy.keyring import RedisKeyring
from streams.privacy.sealing import RecordSealer
from streams.rebuild.from_log import rebuild_projections
from streams.rebuild.replay import DerivedLogCursor
from streams.runtime.devstack.stack import DevStack
from streams.runtime.node import Node
from streams.settings import EngramSettings
from tests.benchmarks.bench_ingest import applied_everywhere, publish_backlog


async def read_only(
    bootstrap: str, topics: Topics, partitions: int, sealer: RecordSealer
) -> tuple[int, float]:
    """Reading, opening and decoding the derived log alone, partition by partition: the
    rebuild's floor."""
    started = time.perf_counter()
    cursor = DerivedLogCursor(bootstrap, topics, range(partitions), sealer=sealer)
    await cursor.start_at(None)
    count = 0
    for partition in range(partitions):
        count += len(await cursor.read(partition))
    return count, time.perf_counter() - started


async def main(events: int, agents: int, batch_size: int, keyring: str) -> None:
    data = Path(tempfile.mkdtemp(prefix="engram-bench-rebuild-"))
    stack = DevStack(data)
    endpoints = stack.start()
    prefix = f"r{uuid.uuid4().hex[:6]}."
    topics = Topics(prefix)
    settings = EngramSettings(
        topic_prefix=prefix,
        redis_namespace=prefix.rstrip("."),
        qdrant_path=data / "live",
        data_dir=data,
        partitions=4,
        keyring=keyring,
    )
    try:
        node = await Node(settings, endpoints, run_service=False).start()
        try:
            warm = await asyncio.to_thread(
                publish_backlog, endpoints.kafka_bootstrap, prefix, 800, agents
            )
            await applied_everywhere(node, warm, 120)
            assert node.pipeline is not None
            before = node.pipeline.stats.events
            publishing = asyncio.create_task(
                asyncio.to_thread(
                    publish_backlog, endpoints.kafka_bootstrap, prefix, events, agents
                )
            )
            # The clock starts when the worker sees the first record, not while the generator
            # builds a million events in memory.
            for _ in range(60_000):  # at most ten minutes
                if node.pipeline.stats.events != before or publishing.done():
                    break
                await asyncio.sleep(0.01)
            start = time.perf_counter()
            done = await publishing
            await applied_everywhere(node, done, 3600)
            live = events / (time.perf_counter() - start)
        finally:
            await node.stop()

        keys = (
            RedisKeyring.from_url(endpoints.redis_url, settings.redis_namespace)
            if keyring == "redis"
            else None
        )
        sealer = RecordSealer(keys)
        read_count, read_s = await read_only(endpoints.kafka_bootstrap, topics, 4, sealer)
        working = RedisWorkingMemory.from_url(endpoints.redis_url, "rebuilt")
        episodic = EdgeEpisodicMemory.open(data / "rebuilt", node.embedder.dim)
        try:
            started = time.perf_counter()
            applied = await rebuild_projections(
                endpoints.kafka_bootstrap,
                topics,
                range(4),
                [working, episodic],
                batch_size=batch_size,
                sealer=RecordSealer(keys),
            )
            rebuild_s = time.perf_counter() - started
        finally:
            await working.close()
            await episodic.close()
            if keys is not None:
                await keys.close()
    finally:
        stack.stop()
        shutil.rmtree(stack.data_dir, ignore_errors=True)
    source = events + 800
    print(
        f"events={events} (+800 warm-up) agents={agents} keyring={keyring}, "
        f"derived events in the log: {applied}"
    )
    print(f"live ingest (1 worker, both projections): {live:,.0f} agent events/s")
    print(
        f"rebuild (read + apply, batches of {batch_size:,}): {rebuild_s:.1f}s = "
        f"{applied / rebuild_s:,.0f} derived events/s = {source / rebuild_s:,.0f} agent events/s "
        f"({source / rebuild_s / live:.1f}x live); reading the log alone: {read_s:.1f}s "
        f"for {read_count:,} events"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--agents", type=int, default=1_000)
    parser.add_argument("--batch-size", type=int, default=20_000)
    parser.add_argument(
        "--keyring", choices=["redis", "off"], default="redis", help="off: nothing sealed"
    )
    args = parser.parse_args()
    asyncio.run(main(args.events, args.agents, args.batch_size, args.keyring))
