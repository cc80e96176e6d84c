"""Retrieval over HTTP: 1,000 agents x 60 memories (10 working + 50 episodic), one client.

    python -m tests.benchmarks.bench_retrieval [--agents 1000] [--requests 2000]

Memories are made by the real processors (importance, routing, capacities) and applied to a
real redis-server and Qdrant Edge; the query service then runs as ``engram serve`` in its own
process, and one client sends requests one after another, for each mode.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from processors.config import load_processing_config
from processors.embedding import HashingEmbedder
from processors.recording import AgentMemoryState, record
from projections.episodic.factory import open_episodic_store
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import Observation
from schemas.memory_events import DerivedEvent, SourcePosition
from streams.devstack.ports import free_port, wait_for_port
from tests.benchmarks.servers import fresh_servers, percentile

WORDS = [
    "flood",
    "river",
    "levee",
    "basement",
    "insurance",
    "claim",
    "denied",
    "approved",
    "neighbor",
    "elevated",
    "house",
    "subsidy",
    "premium",
    "storm",
    "rain",
    "warning",
    "evacuate",
    "garden",
    "sunny",
    "quiet",
    "community",
    "meeting",
]


async def load(redis_url: str, edge: Path, agents: int) -> None:
    config = load_processing_config()
    embedder = HashingEmbedder()
    version = config.version(embedder.id)
    working = RedisWorkingMemory.from_url(redis_url, namespace="bench")
    episodic = await open_episodic_store(
        qdrant_url=None, qdrant_path=edge, collection="engram_episodic", dim=embedder.dim
    )
    rng = random.Random(11)
    offset = 0
    try:
        for first in range(0, agents, 100):
            batch: list[DerivedEvent] = []
            for a in range(first, min(first + 100, agents)):
                state = AgentMemoryState()
                # 50 important memories (episodic), then 10 routine ones (working).
                for i in range(60):
                    text = " ".join(rng.choices(WORDS, k=10))
                    event = Observation(
                        agent_id=f"A{a:05d}",
                        year=1 + i // 6,
                        content=text,
                        importance=0.75 + rng.random() / 4 if i < 50 else 0.3,
                        tags=tuple(rng.sample(WORDS, 2)),
                    )
                    out = record(
                        event,
                        state,
                        config=config,
                        embedder=embedder,
                        config_version=version,
                        position=SourcePosition(topic="load", partition=0, offset=offset),
                    )
                    offset += 1
                    state = out.state
                    batch.extend([out.memory, *out.forgotten])
            await working.apply(batch)
            await episodic.apply(batch)
    finally:
        await working.close()
        await episodic.close()


def serve(bootstrap: str, redis_url: str, data: Path, port: int) -> subprocess.Popen[bytes]:
    """The query service as deployed: every retrieval also goes to memory.access."""
    env = {
        **os.environ,
        "ENGRAM_KAFKA_BOOTSTRAP": bootstrap,
        "ENGRAM_REDIS_URL": redis_url,
        "ENGRAM_QDRANT_PATH": str(data),
        "ENGRAM_REDIS_NAMESPACE": "bench",
        "ENGRAM_LOG_LEVEL": "warning",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "serve", "--port", str(port)], env=env
    )


def measure(url: str, agents: int, requests: int, body: dict[str, object]) -> dict[str, float]:
    rng = random.Random(5)
    took: list[float] = []
    with httpx.Client(base_url=url, timeout=10) as client:
        for _ in range(50):  # warm-up
            client.post(f"/v1/agents/A{rng.randrange(agents):05d}/retrieve", json=body)
        start = time.perf_counter()
        for _ in range(requests):
            t = time.perf_counter()
            response = client.post(f"/v1/agents/A{rng.randrange(agents):05d}/retrieve", json=body)
            took.append((time.perf_counter() - t) * 1000)
            response.raise_for_status()
            assert response.json()["results"], "no memories came back"
        elapsed = time.perf_counter() - start
    return {"p50": percentile(took, 50), "p99": percentile(took, 99), "qps": requests / elapsed}


MODES: dict[str, dict[str, object]] = {
    "two_phase": {"top_k": 5, "mode": "two_phase", "current_year": 10},
    "weighted": {"top_k": 5, "mode": "weighted", "current_year": 10, "tags": ["flood"]},
    "weighted + query": {
        "top_k": 5,
        "mode": "weighted",
        "current_year": 10,
        "query": "the levee broke and the basement flooded",
        "weights": {"recency": 0.3, "importance": 0.5, "context": 0.2, "relevance": 0.5},
    },
}


def main(agents: int, requests: int) -> None:
    data = Path(tempfile.mkdtemp(prefix="engram-retrieval-"))
    with fresh_servers() as (bootstrap, redis_url):
        started = time.perf_counter()
        asyncio.run(load(redis_url, data, agents))
        print(f"loaded {agents} agents x 60 memories in {time.perf_counter() - started:.1f}s")
        port = free_port()
        server = serve(bootstrap, redis_url, data, port)
        try:
            if not wait_for_port(port, 60):
                raise RuntimeError("engram serve did not start")
            for name, body in MODES.items():
                r = measure(f"http://127.0.0.1:{port}", agents, requests, body)
                print(
                    f"{name:18} p50 {r['p50']:.2f} ms  p99 {r['p99']:.2f} ms  "
                    f"{r['qps']:,.0f} queries/s"
                )
        finally:
            server.terminate()
            server.wait(20)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=1_000)
    parser.add_argument("--requests", type=int, default=2_000)
    args = parser.parse_args()
    main(args.agents, args.requests)
