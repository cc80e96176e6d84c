"""Retrieval quality: which memory answers a question, per relevance signal (recall@k and MRR).

    python -m tests.benchmarks.bench_retrieval_quality [--signals keyword hashing minilm bm25
        hybrid-hashing hybrid-minilm blend-hashing blend-minilm engine-hashing engine-minilm]
        [--bare-turns]
        [--no-categories] [--json results.json]

The set (``tests/benchmarks/data/conversation_*.jsonl``) is hand-written in the style of the
public conversational-memory benchmarks (LoCoMo, LongMemEval): five people, each in a year of
chat sessions with a friend (47 to 55 dialogue turns, 257 in all: jobs, pets, trips, hobbies,
family, health, preferences, and facts that change over time), and 149 questions asked in other
words than the turn that answers them (synonyms, paraphrase, a question word where the answer
is), each labelled with the ids of the turns that answer it. Nothing in it comes from the flood
demo, and nothing was tuned to a signal: the questions were written before any signal was run.

Each question is asked of its own person's memories only, as an agent asks its own memory. A
memory's text is ``"Speaker: turn"``. A signal scores the memories; a memory without a score
(no shared keyword for the lexical signals) is not retrieved at all, and equal scores go to the
earlier memory. recall@k is the share of a question's answering turns among the first k, MRR
the mean of 1 / rank of the first answering turn (0 if none is retrieved).

Signals: ``keyword`` is the overlap coefficient over ``keywords()`` (weighted mode's Rel, seed
003); ``hashing`` and ``minilm`` the cosine of the two embedders; ``bm25`` the lexical half of
hybrid search (``projections.retrieval.relevance.lexical_scores``); ``hybrid-*`` the RRF fusion
of the stores' hybrid search (``hybrid_relevance``) with that embedder's cosine as the dense
half, ``blend-*`` the score blend the engine ranks by (``blended_scores`` with the
embedder's default dense share); ``engine-*``
(asked for by name) the whole read path: the processors record every turn into a real
redis-server and Qdrant Edge with that embedder, and ``RetrievalEngine`` answers in mode
``relevance``, so they follow whatever relevance the engine uses. ``minilm`` needs the
``semantic`` extra and is left out, with a note, without it. ``--bare-turns`` stores turns
without the speaker's name. ms/q is wall time per question on a shared machine: indicative.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from processors.embedding import Embedder, HashingEmbedder, keywords
from processors.semantic_embedding import SemanticExtraMissingError, semantic_extra_missing
from projections.memory import StoredMemory
from projections.retrieval.scoring import overlap
from streams.settings import EngramSettings

DATA = Path(__file__).parent / "data"
KS = (1, 5, 10)
SIGNALS = (
    "keyword",
    "hashing",
    "minilm",
    "bm25",
    "hybrid-hashing",
    "hybrid-minilm",
    "blend-hashing",
    "blend-minilm",
)
PIPELINES = ("engine-hashing", "engine-minilm")


@dataclass(frozen=True, slots=True)
class Question:
    question_id: str
    persona: str
    text: str
    answers: frozenset[str]
    category: str


@dataclass(frozen=True, slots=True)
class Dataset:
    memories: dict[str, list[StoredMemory]]
    """Each person's memories in recording order."""
    questions: list[Question]


def load(directory: Path = DATA, *, speakers: bool = True) -> Dataset:
    """The set; ``speakers=False`` stores each turn without its ``"Speaker: "`` prefix."""
    memories: dict[str, list[StoredMemory]] = defaultdict(list)
    with (directory / "conversation_memories.jsonl").open() as lines:
        for line in lines:
            row = json.loads(line)
            persona = row["persona"]
            memories[persona].append(
                StoredMemory(
                    memory_id=row["memory_id"],
                    agent_id=persona,
                    content=f"{row['speaker']}: {row['text']}" if speakers else row["text"],
                    importance=0.5,
                    destination="episodic",
                    seq=len(memories[persona]),
                    occurred_at=datetime.fromisoformat(row["date"]).replace(tzinfo=UTC),
                    step=row["session"],
                    source_event_id=row["memory_id"],
                    source_event_type="observation",
                )
            )
    questions = []
    with (directory / "conversation_questions.jsonl").open() as lines:
        for line in lines:
            row = json.loads(line)
            questions.append(
                Question(
                    question_id=row["question_id"],
                    persona=row["persona"],
                    text=row["question"],
                    answers=frozenset(row["answers"]),
                    category=row["category"],
                )
            )
    known = {m.memory_id for group in memories.values() for m in group}
    for question in questions:
        if not question.answers or not question.answers <= known:
            raise ValueError(f"{question.question_id} is labelled with unknown memories")
    return Dataset(dict(memories), questions)


Scorer = Callable[[Question, Sequence[StoredMemory]], Mapping[str, float]]
"""A signal: the score of every memory it retrieves for a question, by memory id."""


def keyword_scorer(question: Question, memories: Sequence[StoredMemory]) -> dict[str, float]:
    query = frozenset(keywords(question.text))
    scores = {m.memory_id: overlap(query, frozenset(keywords(m.content))) for m in memories}
    return {key: score for key, score in scores.items() if score > 0.0}


@dataclass
class DenseScorer:
    """Cosine similarity under one embedder; memory vectors are computed once."""

    embedder: Embedder
    _vectors: dict[str, np.ndarray] = field(default_factory=dict)

    def prepare(self, dataset: Dataset) -> None:
        everything = [m for group in dataset.memories.values() for m in group]
        vectors = embed_all(self.embedder, [m.content for m in everything])
        self._vectors = {m.memory_id: vectors[i] for i, m in enumerate(everything)}

    def __call__(self, question: Question, memories: Sequence[StoredMemory]) -> dict[str, float]:
        query = self.embedder.embed(question.text)
        return {m.memory_id: float(query @ self._vectors[m.memory_id]) for m in memories}


def embed_all(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Batched when the embedder can batch (MiniLM), one by one otherwise."""
    many = getattr(embedder, "embed_many", None)
    if many is not None:
        vectors: np.ndarray = many(texts)
        return vectors
    return np.stack([embedder.embed(text) for text in texts])


def bm25_scorer(question: Question, memories: Sequence[StoredMemory]) -> Mapping[str, float]:
    from projections.retrieval.relevance import lexical_scores

    return lexical_scores(question.text, memories)


@dataclass
class HybridScorer:
    """``hybrid_relevance`` with the dense half from ``dense``, as the engine fills it in."""

    dense: DenseScorer

    def __call__(self, question: Question, memories: Sequence[StoredMemory]) -> dict[str, float]:
        from projections.retrieval.relevance import hybrid_relevance

        cosine = self.dense(question, memories)
        pool = [m.model_copy(update={"similarity": cosine[m.memory_id]}) for m in memories]
        return {key: parts.fused for key, parts in hybrid_relevance(question.text, pool).items()}


@dataclass
class BlendScorer:
    """``blended_scores`` with the dense half from ``dense`` and the dense share the engine
    uses for that embedder."""

    dense: DenseScorer

    def __call__(self, question: Question, memories: Sequence[StoredMemory]) -> dict[str, float]:
        from projections.retrieval.relevance import blended_scores, dense_share_for

        cosine = self.dense(question, memories)
        pool = [m.model_copy(update={"similarity": cosine[m.memory_id]}) for m in memories]
        share = dense_share_for(self.dense.embedder.id)
        fused, _ = blended_scores(question.text, pool, dense_share=share)
        return fused


@dataclass
class PipelineScorer:
    """The real read path: each turn is published as an Observation (importance 0.9, so it is
    episodic), recorded by the processors (``record``: importance, routing, capacities, the
    embedder) into a real redis-server and Qdrant Edge, and each question is asked of the
    ``RetrievalEngine`` in mode ``relevance``, which returns its first 10."""

    embedder: Embedder
    rankings: dict[str, list[str]] = field(default_factory=dict)
    ms_per_question: float = 0.0

    async def run(self, dataset: Dataset, redis_url: str, edge: Path) -> None:
        from processors.config import load_processing_config
        from processors.recording import AgentMemoryState, record
        from projections.episodic.factory import open_episodic_store
        from projections.retrieval.engine import RetrievalEngine
        from projections.retrieval.models import RetrievalRequest
        from projections.working.redis_store import RedisWorkingMemory
        from schemas.agent_events import Observation
        from schemas.memory_events import DerivedEvent, SourcePosition

        largest = max(len(group) for group in dataset.memories.values())
        config = load_processing_config(episodic_capacity=largest)
        version = config.version(self.embedder.id)
        namespace = f"quality-{self.embedder.id}"
        working = RedisWorkingMemory.from_url(redis_url, namespace=namespace)
        episodic = await open_episodic_store(
            qdrant_url=None, qdrant_path=edge, collection=namespace, dim=self.embedder.dim
        )
        try:
            ids: dict[str, str] = {}
            offset = 0
            for persona, memories in dataset.memories.items():
                state = AgentMemoryState()
                batch: list[DerivedEvent] = []
                for memory in memories:
                    event = Observation(
                        agent_id=persona,
                        content=memory.content,
                        importance=0.9,
                        step=memory.step,
                        occurred_at=memory.occurred_at,
                    )
                    ids[event.event_id] = memory.memory_id
                    out = record(
                        event,
                        state,
                        config=config,
                        embedder=self.embedder,
                        config_version=version,
                        position=SourcePosition(topic="quality", partition=0, offset=offset),
                    )
                    offset += 1
                    state = out.state
                    batch.extend([out.memory, *out.forgotten])
                await working.apply(batch)
                await episodic.apply(batch)
            engine = RetrievalEngine(working, episodic, self.embedder)
            started = time.perf_counter()
            for question in dataset.questions:
                request = RetrievalRequest(mode="relevance", query=question.text, top_k=max(KS))
                response = await engine.retrieve(question.persona, request)
                self.rankings[question.question_id] = [
                    ids[result.source_event_id] for result in response.results
                ]
            self.ms_per_question = 1000 * (time.perf_counter() - started) / len(dataset.questions)
        finally:
            await working.close()
            await episodic.close()

    def __call__(self, question: Question, memories: Sequence[StoredMemory]) -> dict[str, float]:
        ranking = self.rankings[question.question_id]
        return {key: float(len(ranking) - rank) for rank, key in enumerate(ranking)}


async def run_pipelines(dataset: Dataset, pipelines: Sequence[PipelineScorer]) -> None:
    from streams.runtime.devstack.redis_server import RedisServer

    with RedisServer() as redis, tempfile.TemporaryDirectory(prefix="engram-quality-") as edge:
        for pipeline in pipelines:
            await pipeline.run(dataset, redis.url, Path(edge))


def ranked(scores: Mapping[str, float], memories: Sequence[StoredMemory]) -> list[str]:
    """Retrieved ids, best first; equal scores go to the earlier memory."""
    order = {m.memory_id: m.seq for m in memories}
    return sorted(scores, key=lambda key: (-scores[key], order[key]))


@dataclass
class Result:
    signal: str
    recall: dict[int, float]
    mrr: float
    by_category: dict[str, dict[int, float]]
    ms_per_question: float
    misses: list[str]
    """Questions with no answering memory in the first 10."""


def evaluate(signal: str, scorer: Scorer, dataset: Dataset) -> Result:
    recall_sums = dict.fromkeys(KS, 0.0)
    reciprocal = 0.0
    category_sums: dict[str, dict[int, float]] = defaultdict(lambda: dict.fromkeys(KS, 0.0))
    category_counts: dict[str, int] = defaultdict(int)
    misses = []
    started = time.perf_counter()
    for question in dataset.questions:
        memories = dataset.memories[question.persona]
        ids = ranked(scorer(question, memories), memories)
        for k in KS:
            found = len(question.answers & set(ids[:k])) / len(question.answers)
            recall_sums[k] += found
            category_sums[question.category][k] += found
        category_counts[question.category] += 1
        first = next((rank for rank, key in enumerate(ids, 1) if key in question.answers), None)
        reciprocal += 1.0 / first if first else 0.0
        if first is None or first > max(KS):
            misses.append(question.question_id)
    elapsed = time.perf_counter() - started
    n = len(dataset.questions)
    measured = scorer.ms_per_question if isinstance(scorer, PipelineScorer) else None
    return Result(
        signal=signal,
        recall={k: total / n for k, total in recall_sums.items()},
        mrr=reciprocal / n,
        by_category={
            category: {k: total / category_counts[category] for k, total in sums.items()}
            for category, sums in sorted(category_sums.items())
        },
        ms_per_question=measured if measured is not None else 1000 * elapsed / n,
        misses=misses,
    )


def scorers(signals: Sequence[str], dataset: Dataset) -> tuple[dict[str, Scorer], list[str]]:
    """The scorers asked for, and notes on those that cannot run here."""
    notes = []
    dense: dict[str, DenseScorer] = {}

    def dense_for(name: str) -> DenseScorer | None:
        if name not in dense:
            if name == "hashing":
                dense[name] = DenseScorer(HashingEmbedder(384))
            else:
                missing = semantic_extra_missing()
                if missing:
                    notes.append(f"minilm left out: {', '.join(missing)} not installed")
                    return None
                from processors.semantic_embedding import MiniLMEmbedder

                started = time.perf_counter()
                try:
                    settings = EngramSettings()  # ENGRAM_MINILM_PRECISION and _RUNTIME
                    model = MiniLMEmbedder(settings.minilm_precision, settings.minilm_runtime)
                    dense[name] = DenseScorer(model)
                except SemanticExtraMissingError as error:
                    notes.append(f"minilm left out: {error}")
                    return None
                notes.append(f"minilm model loaded in {time.perf_counter() - started:.1f} s")
            started = time.perf_counter()
            dense[name].prepare(dataset)
            count = sum(len(group) for group in dataset.memories.values())
            notes.append(
                f"{name}: {count} memories embedded in {time.perf_counter() - started:.2f} s"
            )
        return dense[name]

    chosen: dict[str, Scorer] = {}
    for signal in signals:
        if signal == "keyword":
            chosen[signal] = keyword_scorer
        elif signal == "bm25":
            chosen[signal] = bm25_scorer
        elif signal in ("hashing", "minilm"):
            scorer = dense_for(signal)
            if scorer is not None:
                chosen[signal] = scorer
        elif signal.startswith("hybrid-"):
            scorer = dense_for(signal.removeprefix("hybrid-"))
            if scorer is not None:
                chosen[signal] = HybridScorer(scorer)
        elif signal.startswith("blend-"):
            scorer = dense_for(signal.removeprefix("blend-"))
            if scorer is not None:
                chosen[signal] = BlendScorer(scorer)
        elif signal.startswith("engine-"):
            scorer = dense_for(signal.removeprefix("engine-"))
            if scorer is not None:
                chosen[signal] = PipelineScorer(scorer.embedder)
        else:
            raise ValueError(f"unknown signal {signal!r}; known: {', '.join(SIGNALS)}")
    return chosen, notes


def table(results: Sequence[Result], questions: int) -> str:
    header = f"{'signal':<16}" + "".join(f"{f'R@{k}':>8}" for k in KS) + f"{'MRR':>8}{'ms/q':>8}"
    lines = [f"{questions} questions", header, "-" * len(header)]
    for r in results:
        cells = "".join(f"{r.recall[k]:>8.3f}" for k in KS)
        lines.append(f"{r.signal:<16}{cells}{r.mrr:>8.3f}{r.ms_per_question:>8.2f}")
    return "\n".join(lines)


def category_table(results: Sequence[Result], dataset: Dataset, k: int = 5) -> str:
    counts: dict[str, int] = defaultdict(int)
    for question in dataset.questions:
        counts[question.category] += 1
    categories = sorted(counts)
    header = f"{f'R@{k} by category':<18}" + "".join(f"{c[:14]:>15}" for c in categories)
    lines = [header, f"{'(questions)':<18}" + "".join(f"{counts[c]:>15}" for c in categories)]
    for r in results:
        lines.append(
            f"{r.signal:<18}" + "".join(f"{r.by_category[c][k]:>15.3f}" for c in categories)
        )
    return "\n".join(lines)


def main(
    signals: Sequence[str], categories: bool, json_path: Path | None, speakers: bool = True
) -> None:
    dataset = load(speakers=speakers)
    memories = sum(len(group) for group in dataset.memories.values())
    print(
        f"{len(dataset.memories)} people, {memories} memories, {len(dataset.questions)} questions"
    )
    chosen, notes = scorers(signals, dataset)
    pipelines = [scorer for scorer in chosen.values() if isinstance(scorer, PipelineScorer)]
    if pipelines:
        started = time.perf_counter()
        asyncio.run(run_pipelines(dataset, pipelines))
        notes.append(f"pipelines recorded and queried in {time.perf_counter() - started:.1f} s")
    for note in notes:
        print(note)
    results = [evaluate(name, scorer, dataset) for name, scorer in chosen.items()]
    print()
    print(table(results, len(dataset.questions)))
    if categories:
        print()
        print(category_table(results, dataset))
    if json_path is not None:
        json_path.write_text(
            json.dumps(
                [
                    {
                        "signal": r.signal,
                        "recall": {str(k): v for k, v in r.recall.items()},
                        "mrr": r.mrr,
                        "by_category": {
                            c: {str(k): v for k, v in rs.items()} for c, rs in r.by_category.items()
                        },
                        "ms_per_question": r.ms_per_question,
                        "misses": r.misses,
                    }
                    for r in results
                ],
                indent=2,
            )
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--signals",
        nargs="+",
        default=list(SIGNALS),
        choices=SIGNALS + PIPELINES,
        metavar="SIGNAL",
        help=f"any of {', '.join(SIGNALS + PIPELINES)}; engine-* run the real processors, "
        "redis-server and Qdrant Edge (not by default)",
    )
    parser.add_argument(
        "--no-categories", action="store_true", help="leave out the recall@5 table by category"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument(
        "--bare-turns",
        action="store_true",
        help="store each turn without its 'Speaker: ' prefix (the names then match nothing)",
    )
    args = parser.parse_args()
    main(args.signals, not args.no_categories, args.json, speakers=not args.bare_turns)
