"""What an agent takes in Redis and Qdrant after the ingest benchmark's workload.

    ENGRAM_ARCHIVE=false python -m tests.benchmarks.bench_footprint [--events 60000] [--agents 1000]

One in-process worker applies the workload to the dev stack's redis-server and a Qdrant Edge
shard; then Redis's ``MEMORY USAGE`` of every key of the namespace is summed by kind (working
memory, agent index) and the episodic points are counted. The capacity plan in
deploy/README.md is worked from these figures. At 60 events an agent is far below the agent
index's cap (``ENGRAM_AGENT_INDEX_CAP``, 10,000 places): the figures are its growth per event,
which the plan scales up to the cap.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import uuid
from pathlib import Path

import redis.asyncio as aioredis

from streams.runtime.devstack.stack import DevStack
from streams.runtime.node import Node
from streams.settings import EngramSettings
from tests.benchmarks.bench_ingest import applied_everywhere, publish_backlog


async def key_sizes(client: aioredis.Redis, namespace: str) -> dict[str, int]:
    """Bytes by kind of key, and the agent index's members."""
    sizes = {"working": 0, "index": 0, "index_members": 0}
    async for key in client.scan_iter(f"{namespace}:*", count=1000):
        name = key.decode()
        size = await client.memory_usage(key) or 0
        if ":idx:" in name:
            sizes["index"] += size
            sizes["index_members"] += await client.zcard(key)
        elif ":idx#from:" in name:
            sizes["index"] += size  # the watermark of an agent the cap trimmed
        elif ":wm:" in name:
            sizes["working"] += size
    return sizes


async def main(events: int, agents: int) -> None:
    stack = DevStack(Path(tempfile.mkdtemp(prefix="engram-bench-footprint-")))
    endpoints = stack.start()
    prefix = f"f{uuid.uuid4().hex[:6]}."
    namespace = prefix.rstrip(".")
    settings = EngramSettings(
        data_dir=stack.data_dir / prefix,
        qdrant_path=stack.edge_path / prefix,
        partitions=4,
        topic_prefix=prefix,
        redis_namespace=namespace,
        schedule_interval=0,
    )
    client = aioredis.from_url(endpoints.redis_url)
    try:
        async with Node(settings, endpoints, run_processors=True, run_service=False) as node:
            done = await asyncio.to_thread(
                publish_backlog, endpoints.kafka_bootstrap, prefix, events, agents
            )
            await applied_everywhere(node, done, 900)
            sizes = await key_sizes(client, namespace)
            assert node.episodic is not None
            points = await node.episodic.count()
    finally:
        await client.aclose()
        stack.stop()
        shutil.rmtree(stack.data_dir, ignore_errors=True)
    members = sizes["index_members"]
    print(f"events={events} agents={agents} archive={settings.archive}")
    print(f"working memory in Redis: {sizes['working'] / agents:,.0f} B per agent")
    print(
        f"agent index: {sizes['index'] / agents:,.0f} B per agent, "
        f"{members / events:.2f} members per event, {sizes['index'] / max(members, 1):.0f} B each"
    )
    print(f"episodic points: {points / agents:.1f} per agent")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--agents", type=int, default=1_000)
    args = parser.parse_args()
    asyncio.run(main(args.events, args.agents))
