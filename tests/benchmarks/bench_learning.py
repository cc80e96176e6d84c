"""What learning from feedback costs: ingest with one feedback per decision, and the lookups.

    python -m tests.benchmarks.bench_learning [--events 60000] [--agents 1000]
        [--lookup-agents 1000] [--requests 2000] [--clients 1 8] [--rounds 2]
        [--skip-ingest] [--skip-lookups]

Ingest: the ingest benchmark's run (``bench_ingest.engram_rate``: one worker, publish to
applied in both projections) on one dev stack, alternately on the ingest benchmark's mix and
on the feedback-heavy mix (``workload.FEEDBACK_VARIABLE``: every decision carries a plan and
gets one feedback event; the same number of events in all), ``--rounds`` times each.

Lookups: ``--lookup-agents`` agents learn from 20 decisions (5 skills, each decision with a
plan), 20 feedback events (one per decision) and 10 stated facts (5 attributes, each stated
twice, so 5 are superseded), derived by the real processors (``processors.learning.learn``)
and applied to a real redis-server; the query service runs as ``engram serve`` in its own
process. Per route and client count, requests to random agents, one after another per
client: procedures for a context, facts for a query, a plan lookup (a cached request: hits).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from processors.config import load_processing_config
from processors.embedding import HashingEmbedder
from processors.learning import learn
from processors.lifecycle import Deriving
from processors.recording import AgentMemoryState
from processors.summarising import ExtractiveSummariser
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import (
    AgentEvent,
    Decision,
    FactStatement,
    Feedback,
    Observation,
    PlanAction,
)
from schemas.memory_events import DerivedEvent, SourcePosition
from streams.runtime.devstack.ports import free_port, wait_for_port
from streams.runtime.devstack.stack import DevStack
from tests.benchmarks.bench_ingest import engram_rate
from tests.benchmarks.bench_retrieval import serve
from tests.benchmarks.servers import fresh_servers, percentile
from tests.benchmarks.workload import FEEDBACK_VARIABLE, PROMPTS, SIGNALS

LOOKUP_SKILLS = ["buy_insurance", "elevate_house", "do_nothing", "relocate", "wait_and_see"]
ATTRIBUTES = ["elevation", "insurer", "premium", "flood zone", "distance to the river"]
CONTEXT = "decided to elevate the house"
QUERY = "flood insurance premium"


TRAFFIC = {"ingest mix": "0", "one feedback per decision": "1"}


async def ingest(events: int, agents: int, rounds: int) -> None:
    """The two mixes alternately, ``rounds`` times each: on shared cores the load of the
    moment moves a run's rate more than the mix does, and alternating spreads it."""
    stack = DevStack(Path(tempfile.mkdtemp(prefix="engram-bench-")))
    endpoints = stack.start()
    print(f"ingest: events={events} agents={agents}, 1 worker, Redis + Qdrant Edge applied")
    print("| round | traffic | events/s | us CPU per event (this process) |")
    print("|---|---|---|---|")
    try:
        for round_number in range(1, rounds + 1):
            for name, feedback in TRAFFIC.items():
                os.environ[FEEDBACK_VARIABLE] = feedback  # read by the publishing process
                rate = await engram_rate(stack, endpoints, events, agents, 1)
                print(
                    f"| {round_number} | {name} | {rate.per_second:,.0f} | "
                    f"{rate.cpu_us_per_event:,.0f} |",
                    flush=True,
                )
    finally:
        os.environ.pop(FEEDBACK_VARIABLE, None)
        stack.stop()
        shutil.rmtree(stack.data_dir, ignore_errors=True)


def agent_events(agent: str, rng: random.Random) -> list[AgentEvent]:
    """One agent's decisions (each followed by its feedback) and stated facts."""
    household = {"agent_id": agent, "agent_type": "household"}
    events: list[AgentEvent] = []
    for i in range(20):
        skill = LOOKUP_SKILLS[i % len(LOOKUP_SKILLS)]
        decision = Decision(
            **household,
            year=1 + i // 4,
            skill=skill,
            content=f"Year {1 + i // 4}: I decided to {skill.replace('_', ' ')} ({i})",
            prompt=PROMPTS[i % len(PROMPTS)] + ("" if i < 8 else f" ({i})"),
            actions=(PlanAction(tool=skill, input="the house", observation="done"),),
        )
        feedback = Feedback(
            **household,
            year=1 + i // 4,
            target_event_id=decision.event_id,
            signal=rng.choice(SIGNALS),
        )
        events.extend([decision, feedback])
    for i in range(10):
        attribute = ATTRIBUTES[i % len(ATTRIBUTES)]
        fact = FactStatement(subject="my house", attribute=attribute, value=f"value {i}")
        events.append(Observation(**household, year=6, content=f"Noted {attribute}", fact=fact))
    return events


async def load_learned(redis_url: str, agents: int) -> int:
    """Every agent's learned events, applied to Redis as the worker applies them."""
    config = load_processing_config()
    embedder = HashingEmbedder()
    summariser = ExtractiveSummariser()
    ctx = Deriving(config, embedder, summariser, config.version(embedder.id, summariser.id))
    working = RedisWorkingMemory.from_url(redis_url, namespace="bench")
    rng = random.Random(13)
    offset, applied = 0, 0
    try:
        for first in range(0, agents, 100):
            batch: list[DerivedEvent] = []
            for a in range(first, min(first + 100, agents)):
                state = AgentMemoryState()
                for event in agent_events(f"A{a:05d}", rng):
                    position = SourcePosition(topic="load", partition=0, offset=offset)
                    learned, state = learn(event, state, ctx, position)
                    offset += 1
                    batch.extend(learned)
            await working.apply(batch)
            applied += len(batch)
    finally:
        await working.close()
    return applied


Request = Callable[[httpx.Client, str], httpx.Response]

ROUTES: dict[str, Request] = {
    "procedures (context)": lambda c, a: c.get(
        f"/v1/agents/{a}/procedures", params={"context": CONTEXT, "min_success_rate": 0.0}
    ),
    "facts (query)": lambda c, a: c.get(f"/v1/agents/{a}/facts", params={"query": QUERY}),
    "plans/lookup (a cached request)": lambda c, a: c.post(
        f"/v1/agents/{a}/plans/lookup", json={"prompt": PROMPTS[0]}
    ),
}


def timed(url: str, request: Request, agents: list[str]) -> list[float]:
    took: list[float] = []
    with httpx.Client(base_url=url, timeout=30) as client:
        for agent in agents:
            t = time.perf_counter()
            response = request(client, agent)
            took.append((time.perf_counter() - t) * 1000)
            response.raise_for_status()
    return took


def measure(
    url: str, request: Request, agents: int, requests: int, clients: int
) -> tuple[float, float, float]:
    def run(seed: int, count: int) -> list[float]:
        rng = random.Random(seed)
        return timed(url, request, [f"A{rng.randrange(agents):05d}" for _ in range(count)])

    run(1, 50)  # warm-up of the route's own code path
    per_client = max(requests // clients, 1)
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        start = time.perf_counter()
        done = list(pool.map(run, range(5, 5 + clients), [per_client] * clients))
        elapsed = time.perf_counter() - start
    took = [t for part in done for t in part]
    return percentile(took, 50), percentile(took, 99), len(took) / elapsed


def check_answers(url: str) -> None:
    """The routes answer what was learned: a run that measured empty answers would mislead."""
    with httpx.Client(base_url=url, timeout=30) as client:
        procedures = ROUTES["procedures (context)"](client, "A00000").json()["procedures"]
        facts = ROUTES["facts (query)"](client, "A00000").json()["facts"]
        plan = ROUTES["plans/lookup (a cached request)"](client, "A00000").json()
    if not procedures or len(facts) != 5 or not plan["hit"]:
        raise RuntimeError(f"unexpected answers: {procedures!r} {facts!r} {plan!r}")


def lookups(agents: int, requests: int, clients: list[int]) -> None:
    data = Path(tempfile.mkdtemp(prefix="engram-learning-"))
    with fresh_servers() as (bootstrap, redis_url):
        started = time.perf_counter()
        applied = asyncio.run(load_learned(redis_url, agents))
        print(
            f"lookups: {agents:,} agents, {applied:,} learned events applied "
            f"in {time.perf_counter() - started:.1f}s"
        )
        port = free_port()
        server = serve(bootstrap, redis_url, data, port, memories=100)
        try:
            if not wait_for_port(port, 120):
                raise RuntimeError("engram serve did not start")
            url = f"http://127.0.0.1:{port}"
            check_answers(url)
            print("| route | clients | p50 ms | p99 ms | queries/s |\n|---|---|---|---|---|")
            for name, request in ROUTES.items():
                for count in clients:
                    p50, p99, qps = measure(url, request, agents, requests, count)
                    print(f"| {name} | {count} | {p50:.2f} | {p99:.2f} | {qps:,.0f} |", flush=True)
        finally:
            server.terminate()
            server.wait(20)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--agents", type=int, default=1_000, help="of the ingest workload")
    parser.add_argument("--lookup-agents", type=int, default=1_000)
    parser.add_argument("--requests", type=int, default=2_000, help="per route and client count")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=2, help="ingest runs of each mix")
    parser.add_argument("--skip-ingest", action="store_true")
    parser.add_argument("--skip-lookups", action="store_true")
    args = parser.parse_args()
    if not args.skip_ingest:
        asyncio.run(ingest(args.events, args.agents, args.rounds))
    if not args.skip_lookups:
        lookups(args.lookup_agents, args.requests, args.clients)
