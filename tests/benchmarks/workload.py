"""The synthetic agent workload the benchmarks publish: 1,000 households over simulated years.

Records are made before the clock starts, and published from a separate process, so the figures
measure Engram and not the load generator. The clock starts at the first send: the process
writes that moment (``time.monotonic()``, one clock for every process on Linux) with the
positions, so a benchmark does not count the ~0.4 s it takes to start Python, import the
schemas and build the events.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import os
import random
import sys
import time
from datetime import UTC, datetime

from aiokafka import AIOKafkaProducer

from schemas.agent_events import AgentEvent, Decision, Feedback, Observation, PlanAction
from schemas.codec import encode_event
from schemas.topics import Topics

TEMPLATES = [
    ("flood.major", "Year {y}: A major flood caused ${d:,} in damages to my house and the street"),
    ("flood.minor", "Year {y}: A minor flood left {d} cm of water in the basement after the storm"),
    ("neighbor.adaptation", "Year {y}: My neighbor raised their house on stilts after the flood"),
    ("policy.change", "Year {y}: The county announced a new subsidy for elevating houses"),
    (None, "Year {y}: The sun was out all day and I spent the afternoon gardening in the yard"),
    (None, "Year {y}: The community meeting discussed the levee and the insurance premiums"),
]
SKILLS = ["buy_insurance", "elevate_house", "do_nothing", "do_nothing", "relocate"]


WALL_CLOCK_SHARE_VARIABLE = "ENGRAM_BENCH_WALL_CLOCK_SHARE"
"""The share of agents that publish without a simulation year (wall-clock agents)."""

FEEDBACK_VARIABLE = "ENGRAM_BENCH_FEEDBACK"
"""``1``: feedback-heavy traffic. Every decision carries a request and a step (a plan to cache)
and gets one feedback event, published 1-200 events after it; the total stays ``n`` events, so
fewer observations and decisions make room for the feedback."""

PROMPTS = [
    "How do I protect the house from the next flood?",
    "Should I renew the flood insurance this year?",
    "Is it time to move away from the river?",
    "What do I do about the water in the basement?",
]
SIGNALS = [1.0, 1.0, 0.5, -0.5, -1.0]
FEEDBACK_DELAY = 200


def make_events(n: int, agents: int, seed: int = 7) -> list[AgentEvent]:
    events = _mixed_events(n, agents, seed, plans=os.environ.get(FEEDBACK_VARIABLE) == "1")
    if os.environ.get(FEEDBACK_VARIABLE) == "1":
        return one_feedback_per_decision(events, n, random.Random(seed + 1))
    return events


def one_feedback_per_decision(
    events: list[AgentEvent], n: int, rng: random.Random
) -> list[AgentEvent]:
    """The first ``n`` events of ``events`` with, for every decision among them, one feedback
    on it (a signal from :data:`SIGNALS`) 1 to :data:`FEEDBACK_DELAY` events later."""
    out: list[AgentEvent] = []
    due: list[tuple[int, int, Feedback]] = []
    source = iter(events)
    while len(out) < n:
        if due and due[0][0] <= len(out):
            out.append(heapq.heappop(due)[2])
            continue
        event = next(source, None)
        if event is None:
            if not due:
                break
            out.append(heapq.heappop(due)[2])
            continue
        out.append(event)
        if isinstance(event, Decision):
            feedback = Feedback(
                agent_id=event.agent_id,
                agent_type=event.agent_type,
                year=event.year,
                target_event_id=event.event_id,
                signal=rng.choice(SIGNALS),
            )
            heapq.heappush(due, (len(out) + rng.randrange(1, FEEDBACK_DELAY), len(out), feedback))
    return out


def _mixed_events(n: int, agents: int, seed: int, *, plans: bool) -> list[AgentEvent]:
    """The ingest benchmark's mix: a quarter decisions, the rest observations of
    :data:`TEMPLATES`; with ``plans``, each decision carries a request and a step."""
    rng = random.Random(seed)
    events: list[AgentEvent] = []
    wall_clock = int(agents * float(os.environ.get(WALL_CLOCK_SHARE_VARIABLE, "0")))
    for i in range(n):
        number = rng.randrange(agents)
        agent = f"H{number:05d}"
        year: int | None = None if number < wall_clock else 1 + i * 10 // max(n, 1)
        if rng.random() < 0.25:
            skill = rng.choice(SKILLS)
            events.append(
                Decision(
                    agent_id=agent,
                    agent_type="household",
                    year=year,
                    skill=skill,
                    content=f"Year {year}: I decided to {skill.replace('_', ' ')} "
                    f"after thinking about the last floods ({i})",
                    **(_plan(rng, skill) if plans else {}),
                )
            )
        else:
            kind, text = rng.choice(TEMPLATES)
            events.append(
                Observation(
                    agent_id=agent,
                    agent_type="household",
                    year=year,
                    kind=kind,
                    content=text.format(y=year, d=rng.randrange(1_000, 90_000)) + f" ({i})",
                )
            )
    return events


def _plan(rng: random.Random, skill: str) -> dict[str, object]:
    return {
        "prompt": rng.choice(PROMPTS),
        "actions": (PlanAction(tool=skill, input="the house", observation="done"),),
    }


async def publish(
    bootstrap: str,
    prefix: str,
    n: int,
    agents: int,
    rate: float | None,
) -> tuple[dict[tuple[str, int], int], float]:
    """Publish ``n`` events, as fast as possible or at a steady ``rate`` per second; the last
    offset written to every partition, and when the first send began (``time.monotonic()``)."""
    topics = Topics(prefix)
    prepared = [
        (topics.for_event_type(e.event_type), e.agent_id.encode(), e)
        for e in make_events(n, agents)
    ]
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=False,
        linger_ms=5 if rate else 50,
        max_batch_size=1 << 20,
    )
    await producer.start()
    try:
        started = time.monotonic()
        start = time.perf_counter()
        futures = []
        for i, (topic, key, event) in enumerate(prepared):
            if rate:
                due = start + i / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                # occurred_at is the publish time: the latency benchmark measures from it.
                event = event.model_copy(update={"occurred_at": datetime.now(UTC)})
            futures.append(await producer.send(topic, encode_event(event), key=key))
        sent = await asyncio.gather(*futures)
        elapsed = time.perf_counter() - start
        print(f"published {n} in {elapsed:.2f}s ({n / elapsed:,.0f}/s)", file=sys.stderr)
    finally:
        await producer.stop()
    last: dict[tuple[str, int], int] = {}
    for md in sent:
        last[(md.topic, md.partition)] = max(last.get((md.topic, md.partition), -1), md.offset)
    return last, started


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Publish the synthetic household workload.")
    parser.add_argument("bootstrap")
    parser.add_argument("prefix")
    parser.add_argument("events", type=int)
    parser.add_argument("agents", type=int)
    parser.add_argument("rate", type=float, nargs="?")
    parser.add_argument("--positions")
    args = parser.parse_args()
    last, started = asyncio.run(
        publish(args.bootstrap, args.prefix, args.events, args.agents, args.rate)
    )
    if args.positions:
        # "started <monotonic>", then one "topic partition offset" line per partition: where a
        # benchmark waits for.
        with open(args.positions, "w") as out:
            out.write(f"started {started!r}\n")
            out.writelines(f"{t} {p} {o}\n" for (t, p), o in sorted(last.items()))
