"""What a read of what an agent learned costs as its fact history grows: seed 002's tool
selection and plan lookup (``LearnedMemory.select_tool`` and ``lookup_plan``, as the query
service runs them per prompt), against a fresh redis-server, for an agent with two skills, a
cached plan and 0, then ``--facts`` ... restatements of one fact (each supersedes the one
before, which stays with its embedding).

    python -m tests.benchmarks.bench_learned_reads [--facts 2000 8000] [--reads 20]

The agent's events go through the processors' own rules (:func:`processors.learning.learn`)
and are applied by the Redis store, as a worker applies them.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import UTC, datetime, timedelta

from processors.config import load_processing_config
from processors.embedding import HashingEmbedder
from processors.learning import learn
from processors.lifecycle import Deriving
from processors.recording import AgentMemoryState
from processors.summarising import ExtractiveSummariser
from projections.learned.reads import LearnedMemory
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import AgentEvent, Decision, Feedback, Observation
from schemas.memory_events import DerivedEvent, SourcePosition
from streams.runtime.devstack.redis_server import RedisServer

EMBEDDER = HashingEmbedder()
CTX = Deriving(load_processing_config(), EMBEDDER, ExtractiveSummariser(), "bench")
T0 = datetime(2026, 1, 1, tzinfo=UTC)
AGENT = "P1"
PROMPT = "Protect the house from the spring flood"


class Learner:
    """One agent's events through the learning rules, positions and all."""

    def __init__(self) -> None:
        self.state = AgentMemoryState()
        self.n = 0

    def envelope(self) -> dict[str, object]:
        self.n += 1
        return {"agent_id": AGENT, "event_id": f"e{self.n}", "occurred_at": T0 + timedelta(self.n)}

    def events(self, *made: AgentEvent) -> list[DerivedEvent]:
        out: list[DerivedEvent] = []
        for event in made:
            position = SourcePosition(topic="agent.bench", partition=0, offset=self.n)
            learned, self.state = learn(event, self.state, CTX, position)
            out.extend(learned)
        return out


def skills(agent: Learner) -> list[DerivedEvent]:
    elevate = Decision.model_validate(
        {
            **agent.envelope(),
            "skill": "elevate",
            "content": "Elevate the house above the flood line",
            "prompt": PROMPT,
            "actions": [{"tool": "contractor", "input": "raise 2 m", "observation": "booked"}],
        }
    )
    insure = Decision.model_validate(
        {**agent.envelope(), "skill": "insure", "content": "Buy flood insurance for the house"}
    )
    upvote = Feedback.model_validate(
        {**agent.envelope(), "target_event_id": elevate.event_id, "signal": 1.0}
    )
    return agent.events(elevate, insure, upvote)


def moves(agent: Learner, start: int, stop: int) -> list[AgentEvent]:
    return [
        Observation.model_validate(
            {
                **agent.envelope(),
                "content": f"The family now lives at number {i}",
                "fact": {"subject": "family", "attribute": "address", "value": f"number {i}"},
            }
        )
        for i in range(start, stop)
    ]


async def main(histories: list[int], reads: int) -> None:
    with RedisServer() as redis:
        store = RedisWorkingMemory.from_url(redis.url, namespace="bench")
        try:
            agent = Learner()
            await store.apply(skills(agent))
            memory = LearnedMemory(lambda: store, EMBEDDER)
            stated = 0
            print(f"reads={reads} (select_tool + lookup_plan each)")
            for facts in [0, *histories]:
                made = moves(agent, stated, facts)
                for i in range(0, len(made), 500):
                    await store.apply(agent.events(*made[i : i + 500]))
                stated = max(stated, facts)
                for _ in range(3):  # warm: connections, the embedder's cache
                    await memory.select_tool(AGENT, PROMPT)
                started = time.perf_counter()
                for _ in range(reads):
                    await memory.select_tool(AGENT, PROMPT)
                    await memory.lookup_plan(AGENT, PROMPT)
                took = (time.perf_counter() - started) / reads * 1000
                print(f"fact history {stated:>6,}: {took:7.2f} ms a select_tool + lookup_plan")
        finally:
            await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--facts", type=int, nargs="+", default=[2_000, 8_000])
    parser.add_argument("--reads", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(main(sorted(args.facts), args.reads))
