"""Recall over a long conversation, with Engram's defaults: BM25 alone against the engine.

    python -m tests.benchmarks.bench_long_conversation [--turns 500] [--seed 7]

The hand-written set of :mod:`tests.benchmarks.bench_retrieval_quality` (5 people, their turns
and 149 questions, asked in other words than their answers) is stretched to ``--turns`` turns per
person: small talk drawn with a fixed seed from a vocabulary that shares words with the real
turns (weather, food, work, weekends) is spread over the person's dated sessions, so the
answers sit among ~10 times as many turns as in the hand-written set. The questions and their
labels are those of the set.

Engram runs as a new user would: every turn published as an Observation *without* an
importance (the processors score it with the default agent type, and capacities are the
defaults, 10 working and 50 episodic), recorded into a real redis-server and Qdrant Edge, and
each question asked with ``query`` and nothing else (relevance over every memory the agent has
lived: the archive included). ``engine, active only`` asks the same in ``scope`` ``active``:
what the seeds' capacities leave. ``assistant profile, active only`` publishes every turn with
``agent_type`` ``assistant`` (the built-in chat profile: its importance for conversation, 20
working and 1,000 episodic) and asks in ``scope`` ``active``. ``semantic`` (the MiniLM extra)
is left out, with a note, when the extra is not installed. R@k is the share of a question's
answering turns among the first k, MRR the mean of 1 / rank of the first; R@10 is also printed
per question category (single-hop, paraphrase, knowledge-update, multi-hop, temporal,
preference).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path

from processors.embedding import Embedder, HashingEmbedder
from processors.semantic_embedding import (
    MiniLMEmbedder,
    SemanticExtraMissingError,
    semantic_extra_missing,
)
from projections.episodic.scope import Scope
from projections.memory import StoredMemory
from streams.settings import EngramSettings
from tests.benchmarks.bench_retrieval_quality import Dataset, Question, bm25_scorer, load, ranked

KS = (5, 10, 20)
SMALL_TALK = [
    "the weather was grey again this morning",
    "I had pasta for lunch, nothing special",
    "work was busy, lots of meetings today",
    "we stayed in and watched a film on Saturday",
    "the train was late so I read on the platform",
    "I need to call the bank about a form",
    "my neighbour's dog barked all evening",
    "we tried a new coffee place near the station",
    "I cleaned the kitchen and did the laundry",
    "the traffic on the way home was terrible",
    "I'm a bit tired, slept badly last night",
    "we talked about the news for a while",
    "I went for a short walk after dinner",
    "the shop was out of bread again",
    "I finished a puzzle with my family",
    "the heating in the office is broken",
]


def stretched(dataset: Dataset, turns: int, seed: int) -> Dataset:
    """Each person's turns with small talk added up to ``turns``, dated within their sessions
    and the gaps between them; the order of the real turns is kept."""
    rng = random.Random(seed)
    memories: dict[str, list[StoredMemory]] = {}
    for persona, real in dataset.memories.items():
        extra = max(turns - len(real), 0)
        first, last = real[0].occurred_at, real[-1].occurred_at
        span = max((last - first).total_seconds(), 1.0)
        filler = []
        for i in range(extra):
            when = first + timedelta(seconds=rng.random() * span)
            speaker = rng.choice([persona.capitalize(), "Friend"])
            text = f"{speaker}: {rng.choice(SMALL_TALK)}"
            filler.append((when, 1, i, text))
        timeline = [(m.occurred_at, 0, m.seq, m) for m in real] + filler
        timeline.sort(key=lambda item: (item[0], item[1], item[2]))
        group: list[StoredMemory] = []
        for seq, (when, kind, number, item) in enumerate(timeline):
            if kind == 0:
                assert isinstance(item, StoredMemory)
                group.append(item.model_copy(update={"seq": seq}))
            else:
                group.append(
                    StoredMemory(
                        memory_id=f"{persona}-talk-{number:04d}",
                        agent_id=persona,
                        content=str(item),
                        importance=0.5,
                        destination="episodic",
                        seq=seq,
                        occurred_at=when,
                        source_event_id=f"{persona}-talk-{number:04d}",
                        source_event_type="observation",
                    )
                )
        memories[persona] = group
    return Dataset(memories, dataset.questions)


async def engine_rankings(
    dataset: Dataset,
    embedder: Embedder,
    scope: Scope | None,
    redis_url: str,
    edge: Path,
    agent_type: str = "default",
) -> dict[str, list[str]]:
    """Every turn through the processors with the default configuration, published with
    ``agent_type``, then each question as a bare query (``scope`` None) or in ``scope``; the
    memory ids it returns, best first."""
    from processors.config import load_processing_config
    from processors.recording import AgentMemoryState, record
    from projections.episodic.factory import open_episodic_store
    from projections.retrieval.engine import RetrievalEngine
    from projections.retrieval.models import RetrievalRequest
    from projections.working.redis_store import RedisWorkingMemory
    from schemas.agent_events import Observation
    from schemas.memory_events import DerivedEvent, SourcePosition

    config = load_processing_config()
    namespace = f"long-{embedder.id}-{scope}-{agent_type}"
    working = RedisWorkingMemory.from_url(redis_url, namespace=namespace)
    episodic = await open_episodic_store(
        qdrant_url=None, qdrant_path=edge, collection=namespace, dim=embedder.dim
    )
    rankings: dict[str, list[str]] = {}
    try:
        ids: dict[str, str] = {}
        offset = 0
        active = 0
        for persona, memories in dataset.memories.items():
            state = AgentMemoryState()
            batch: list[DerivedEvent] = []
            for memory in memories:
                event = Observation(
                    agent_id=persona,
                    agent_type=agent_type,
                    content=memory.content,
                    occurred_at=memory.occurred_at,
                )
                ids[event.event_id] = memory.memory_id
                out = record(
                    event,
                    state,
                    config=config,
                    embedder=embedder,
                    config_version=config.version(embedder.id),
                    position=SourcePosition(topic="long", partition=0, offset=offset),
                )
                offset += 1
                state = out.state
                batch.extend([out.memory, *out.forgotten])
            active += len(state.working) + len(state.episodic)
            await working.apply(batch)
            await episodic.apply(batch)
        turns = sum(len(group) for group in dataset.memories.values())
        print(f"agent type {agent_type}: {active} of {turns} turns active after the conversation")
        engine = RetrievalEngine(working, episodic, embedder)
        for question in dataset.questions:
            body: dict[str, object] = {"query": question.text, "top_k": max(KS)}
            if scope is not None:
                body |= {"mode": "relevance", "scope": scope}
            response = await engine.retrieve(
                question.persona, RetrievalRequest.model_validate(body)
            )
            rankings[question.question_id] = [ids[r.source_event_id] for r in response.results]
    finally:
        await working.clear()
        await working.close()
        await episodic.close()
    return rankings


Scores = tuple[dict[int, float], float, dict[str, float]]
"""R@k by k, MRR, and R@10 by question category."""


def scores(dataset: Dataset, rankings: Mapping[str, Sequence[str]] | None) -> Scores:
    """R@k and MRR of a ranking per question (None: BM25 over the person's turns), and R@10
    per category."""
    recall = dict.fromkeys(KS, 0.0)
    reciprocal = 0.0
    by_category: dict[str, list[float]] = {}
    for question in dataset.questions:
        ids = (
            list(rankings[question.question_id])
            if rankings is not None
            else bm25_ranking(question, dataset.memories[question.persona])
        )
        for k in KS:
            recall[k] += len(question.answers & set(ids[:k])) / len(question.answers)
        found = len(question.answers & set(ids[:10])) / len(question.answers)
        by_category.setdefault(question.category, []).append(found)
        first = next((rank for rank, key in enumerate(ids, 1) if key in question.answers), None)
        reciprocal += 1.0 / first if first else 0.0
    n = len(dataset.questions)
    categories = {name: sum(found) / len(found) for name, found in by_category.items()}
    return {k: total / n for k, total in recall.items()}, reciprocal / n, categories


def bm25_ranking(question: Question, memories: Sequence[StoredMemory]) -> list[str]:
    return ranked(bm25_scorer(question, memories), memories)


async def run(turns: int, seed: int) -> None:
    from streams.runtime.devstack.redis_server import RedisServer

    dataset = stretched(load(), turns, seed)
    total = sum(len(group) for group in dataset.memories.values())
    print(f"{len(dataset.memories)} people, {total} turns, {len(dataset.questions)} questions")
    rows: list[tuple[str, dict[int, float], float, dict[str, float]]] = [
        ("BM25 alone", *scores(dataset, None))
    ]
    embedders: list[tuple[str, Embedder]] = [("default (hashing)", HashingEmbedder())]
    missing = semantic_extra_missing()
    if missing:
        print(f"semantic left out: the 'semantic' extra is not installed ({', '.join(missing)})")
    else:
        try:
            settings = EngramSettings()  # ENGRAM_MINILM_PRECISION, ENGRAM_MINILM_RUNTIME
            model = MiniLMEmbedder(settings.minilm_precision, settings.minilm_runtime)
            embedders.append(("semantic (MiniLM)", model))
        except SemanticExtraMissingError as exc:
            print(f"semantic left out: {exc}")
    with RedisServer() as redis, tempfile.TemporaryDirectory(prefix="engram-long-") as edge:
        for name, embedder in embedders:
            runs: tuple[tuple[Scope | None, str, str], ...] = (
                (None, "default", "Engram"),
                ("active", "default", "Engram, active only"),
                ("active", "assistant", "Engram, assistant profile, active only"),
            )
            for scope, agent_type, label in runs:
                got = await engine_rankings(
                    dataset, embedder, scope, redis.url, Path(edge), agent_type
                )
                rows.append((f"{label}, {name}", *scores(dataset, got)))
    print("| signal | R@5 | R@10 | R@20 | MRR |\n|---|---|---|---|---|")
    for name, recall, mrr, _ in rows:
        cells = " | ".join(f"{recall[k]:.3f}" for k in KS)
        print(f"| {name} | {cells} | {mrr:.3f} |")
    counts = Counter(question.category for question in dataset.questions)
    names = sorted(counts, key=lambda name: (-counts[name], name))
    print("\nR@10 by category:\n")
    print("| signal | " + " | ".join(f"{name} ({counts[name]})" for name in names) + " |")
    print("|---|" + "---|" * len(names))
    for name, _, _, categories in rows:
        print(f"| {name} | " + " | ".join(f"{categories[c]:.3f}" for c in names) + " |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500, help="per person")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(run(args.turns, args.seed))
