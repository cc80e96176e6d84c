"""Retrieval over HTTP, every mode: agents x memories (10 working, the rest episodic).

    python -m tests.benchmarks.bench_retrieval [--agents 1000] [--memories 100]
        [--requests 2000] [--clients 1 8] [--overhead]

Memories are made by the real processors (importance, routing, capacities, the episodic capacity
raised to hold them) and applied to a real redis-server and Qdrant Edge; the query service then
runs as ``engram serve`` in its own process, recording every retrieval on ``memory.access``.
Every agent is read once first (its first read after the service opened the stores is slower,
and is reported apart), and again in each mode before it is measured (a mode's first read of
an agent pays for what it alone touches; also reported apart). Then, for each mode and each
client count, that many clients send requests to random agents one after another each: latency
percentiles are per request, queries/s for all clients together.

``--overhead`` measures what API keys and metrics cost instead: the service is started four
times on the same stores, alternately with neither (``ENGRAM_METRICS=false``, no keys file) and
with both (a keys file of 100 keys, every request presenting the last one; ``/metrics`` timing
every retrieval), and each start measures the modes asked with one client.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import hashlib
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import httpx

from processors.config import load_processing_config
from processors.embedding import HashingEmbedder
from processors.recording import AgentMemoryState, record
from projections.episodic.factory import open_episodic_store
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import Observation
from schemas.memory_events import DerivedEvent, SourcePosition
from streams.runtime.devstack.ports import free_port, wait_for_port
from tests.benchmarks.servers import fresh_servers, percentile, scratch_dir

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


WORKING = 10


async def load(redis_url: str, edge: Path, agents: int, memories: int) -> None:
    config = load_processing_config(episodic_capacity=max(memories - WORKING, 1))
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
                # Important memories (episodic), then 10 routine ones (working).
                episodic_count = memories - WORKING
                for i in range(memories):
                    text = " ".join(rng.choices(WORDS, k=10))
                    event = Observation(
                        agent_id=f"A{a:05d}",
                        year=1 + i * 10 // memories,
                        content=text,
                        importance=0.75 + rng.random() / 4 if i < episodic_count else 0.3,
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


def serve(
    bootstrap: str,
    redis_url: str,
    data: Path,
    port: int,
    memories: int,
    extra: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """The query service as deployed: every retrieval also goes to memory.access."""
    env = {
        **(extra or {}),
        **os.environ,
        "ENGRAM_KAFKA_BOOTSTRAP": bootstrap,
        "ENGRAM_REDIS_URL": redis_url,
        "ENGRAM_QDRANT_PATH": str(data),
        "ENGRAM_REDIS_NAMESPACE": "bench",
        "ENGRAM_LOG_LEVEL": "warning",
        "ENGRAM_EPISODIC_CAPACITY": str(max(memories - WORKING, 1)),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "streams.cli.main", "serve", "--port", str(port)], env=env
    )


HEADERS: dict[str, str] = {}
"""Sent with every request (``--overhead`` sets the API key here)."""


def timed_retrievals(
    url: str, agent_numbers: Iterable[int], body: dict[str, object]
) -> list[float]:
    """One client's requests, one after another; milliseconds each."""
    took: list[float] = []
    with httpx.Client(base_url=url, timeout=30, headers=HEADERS) as client:
        for number in agent_numbers:
            t = time.perf_counter()
            response = client.post(f"/v1/agents/A{number:05d}/retrieve", json=body)
            took.append((time.perf_counter() - t) * 1000)
            response.raise_for_status()
            assert response.json()["results"], "no memories came back"
    return took


def first_reads(url: str, agents: int) -> dict[str, float]:
    """Every agent read once, in order, before anything is measured. The service opened the
    stores just now, so an agent's first read pays for loading its part of the shard; without
    this pass the first mode measured would pay for it and the next ones, asking for the same
    agents, would not."""
    start = time.perf_counter()
    took = timed_retrievals(url, range(agents), MODES["two_phase"])
    return summary(took, time.perf_counter() - start)


def summary(took: list[float], elapsed: float) -> dict[str, float]:
    return {
        "p50": percentile(took, 50),
        "p99": percentile(took, 99),
        "qps": len(took) / elapsed,
    }


def measure(
    url: str, agents: int, requests: int, clients: int, body: dict[str, object]
) -> dict[str, float]:
    def run(seed: int, count: int) -> list[float]:
        rng = random.Random(seed)
        return timed_retrievals(url, (rng.randrange(agents) for _ in range(count)), body)

    # Every agent once in this mode first, reported apart: a mode's first read of an agent
    # pays for what the two_phase pass of first_reads did not touch (relevance: the stems of
    # the candidates' texts, the vectors of the agent's points).
    start = time.perf_counter()
    first = summary(timed_retrievals(url, range(agents), body), time.perf_counter() - start)
    per_client = max(requests // clients, 1)
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        start = time.perf_counter()
        done = list(pool.map(run, range(5, 5 + clients), [per_client] * clients))
        elapsed = time.perf_counter() - start
    measured = summary([t for part in done for t in part], elapsed)
    return {**measured, "first_p50": first["p50"], "first_p99": first["p99"]}


QUERY = "the levee broke and the basement flooded"

MODES: dict[str, dict[str, object]] = {
    "two_phase": {"top_k": 5, "mode": "two_phase", "current_year": 10},
    "weighted": {"top_k": 5, "mode": "weighted", "current_year": 10, "tags": ["flood"]},
    "weighted + query": {
        "top_k": 5,
        "mode": "weighted",
        "current_year": 10,
        "query": QUERY,
        "weights": {"recency": 0.3, "importance": 0.5, "context": 0.2, "relevance": 0.5},
    },
    "saliency": {"top_k": 5, "mode": "saliency", "current_year": 10},
    "basic": {"mode": "basic", "current_year": 10},
    "constrained": {"mode": "constrained", "current_year": 10, "profile": "MILLER_STANDARD"},
    "generative": {"top_k": 5, "mode": "generative", "current_year": 10, "query": QUERY},
    "relevance": {"top_k": 5, "mode": "relevance", "current_year": 10, "query": QUERY},
}


def main(agents: int, memories: int, requests: int, clients: list[int], modes: list[str]) -> None:
    with scratch_dir("engram-retrieval-") as data, fresh_servers() as (bootstrap, redis_url):
        started = time.perf_counter()
        asyncio.run(load(redis_url, data, agents, memories))
        print(
            f"loaded {agents:,} agents x {memories} memories "
            f"in {time.perf_counter() - started:.1f}s"
        )
        port = free_port()
        server = serve(bootstrap, redis_url, data, port, memories)
        try:
            if not wait_for_port(port, 120):
                raise RuntimeError("engram serve did not start")
            first = first_reads(f"http://127.0.0.1:{port}", agents)
            print(
                f"first read of each agent (two_phase, 1 client): p50 {first['p50']:.2f} ms, "
                f"p99 {first['p99']:.2f} ms, {first['qps']:,.0f} q/s"
            )
            print(
                "| mode | clients | p50 ms | p99 ms | queries/s | first read in the mode, "
                "p50 / p99 ms |\n|---|---|---|---|---|---|"
            )
            for name in modes:
                for count in clients:
                    r = measure(f"http://127.0.0.1:{port}", agents, requests, count, MODES[name])
                    print(
                        f"| {name} | {count} | {r['p50']:.2f} | {r['p99']:.2f} | {r['qps']:,.0f} "
                        f"| {r['first_p50']:.2f} / {r['first_p99']:.2f} |",
                        flush=True,
                    )
        finally:
            server.terminate()
            server.wait(20)


def keys_file(directory: Path) -> tuple[Path, str]:
    """100 keys, as a deployment with many callers would have; the one a client presents is
    the last compared."""
    keys = [f"bench-key-{n:03d}-{os.urandom(8).hex()}" for n in range(100)]
    entries = [
        {
            "name": f"caller-{n}",
            "sha256": hashlib.sha256(key.encode()).hexdigest(),
            "agents": [f"B{n}*", "A*"] if n == 99 else [f"B{n}*"],
            "scopes": ["read"],
        }
        for n, key in enumerate(keys)
    ]
    path = directory / "api-keys.json"
    path.write_text(json.dumps({"keys": entries}))
    return path, keys[-1]


def overhead(agents: int, memories: int, requests: int, modes: list[str]) -> None:
    with scratch_dir("engram-retrieval-") as data, fresh_servers() as (bootstrap, redis_url):
        path, key = keys_file(data)
        setups = {
            "off": ({"ENGRAM_METRICS": "false"}, {}),
            "on": ({"ENGRAM_API_KEYS_FILE": str(path)}, {"Authorization": f"Bearer {key}"}),
        }
        asyncio.run(load(redis_url, data, agents, memories))
        print(f"loaded {agents:,} agents x {memories} memories")
        print("| start | auth + metrics | mode | p50 ms | p99 ms | queries/s |")
        print("|---|---|---|---|---|---|")
        for start, name in enumerate(["off", "on", "off", "on"], 1):
            env, headers = setups[name]
            HEADERS.clear()
            HEADERS.update(headers)
            port = free_port()
            server = serve(bootstrap, redis_url, data, port, memories, env)
            try:
                if not wait_for_port(port, 120):
                    raise RuntimeError("engram serve did not start")
                first_reads(f"http://127.0.0.1:{port}", agents)
                for mode in modes:
                    r = measure(f"http://127.0.0.1:{port}", agents, requests, 1, MODES[mode])
                    print(
                        f"| {start} | {name} | {mode} | {r['p50']:.2f} | {r['p99']:.2f} | "
                        f"{r['qps']:,.0f} |",
                        flush=True,
                    )
            finally:
                server.terminate()
                server.wait(20)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=1_000)
    parser.add_argument(
        "--memories", type=int, default=100, help="per agent: 10 working, the rest episodic"
    )
    parser.add_argument("--requests", type=int, default=2_000, help="per mode and client count")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--modes", nargs="+", choices=sorted(MODES), default=list(MODES))
    parser.add_argument(
        "--overhead",
        action="store_true",
        help="API keys and metrics off and on, alternately (1 client; see the docstring)",
    )
    args = parser.parse_args()
    if args.memories <= WORKING:
        parser.error(f"--memories must be above {WORKING} (the working memories)")
    if args.overhead:
        overhead(args.agents, args.memories, args.requests, args.modes)
    else:
        main(args.agents, args.memories, args.requests, args.clients, args.modes)
