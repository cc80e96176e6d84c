"""A memory's relevance lifted by the turns around it in the same conversation.

Why: in a dialogue the words of a question are often in one turn and its answer in the next
("How did Thanksgiving go?" / "My parents hosted in Houston..."), or an answer spans two turns.
Scored alone, the answering turn shares nothing with the question and sinks among unrelated
memories; scored with its neighbour, it rises just behind the turn that names the subject.
This is passage-level evidence for sentence retrieval (Callan, "Passage-level evidence in
document retrieval", SIGIR 1994; the "context window" of conversational memory systems).

Two memories are neighbours when they are consecutive memories of the agent (``seq`` one
apart, same level) that happened within :data:`NEIGHBOUR_WINDOW` of each other: the turns of
one conversation, not the last event of one day and the first of the next. Only memories of
the pool being ranked count, so the work is linear in the pool (a bounded candidate set). A
pool of candidates holds the turns that match the query, not always the turn after one: the
engine reads the turns beside the best memories of each signal (:func:`best_of_each_signal`)
that the pool lacks (:func:`seqs_beside`, one more read of at most 4 * 2 *
:data:`TURNS_READ_BESIDE` points) and ranks them with the pool.

The lifted relevance is ``(own + share * best neighbour's) / (1 + share)``: it stays in
[0, 1], a memory without a relevant neighbour keeps its order against others alike, and a
turn that matches on its own always ranks above a silent neighbour of an equal match (the
neighbour only gets ``share`` of it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta

from projections.memory import StoredMemory
from projections.retrieval.relevance import lexical_scores

__all__ = [
    "NEIGHBOUR_SHARE",
    "NEIGHBOUR_WINDOW",
    "TURNS_READ_BESIDE",
    "best_of_each_signal",
    "neighbours",
    "seqs_beside",
    "with_conversation_context",
]

NEIGHBOUR_SHARE = 0.5
"""How much of its best neighbour's relevance a memory takes on. Measured with the hashing
embedder (``tests/benchmarks/bench_retrieval_quality.py`` and ``bench_long_conversation.py``,
R@10): 0.5 helped both sets; 1.0 made a silent neighbour tie the matching turn and lowered MRR
below no context at all, 0.2 gained about half as much."""
TURNS_READ_BESIDE = 10
"""How many of each signal's best memories have their missing neighbours read. On the
long-conversation benchmark (2,500 turns, hashing embedder, R@10 offline): 5 of each gained
most of it (0.470 -> 0.517), 10 a little more (0.523)."""
NEIGHBOUR_WINDOW = timedelta(hours=1)
"""Consecutive memories further apart in time than this are separate conversations."""


def neighbours(
    memories: Sequence[StoredMemory], window: timedelta = NEIGHBOUR_WINDOW
) -> dict[str, tuple[str, ...]]:
    """Per memory id, the ids of its neighbours within ``memories``: same agent and level,
    ``seq`` one apart, ``occurred_at`` within ``window``. A memory listed twice counts once.

    Two memories may hold the same place: a working memory and the episodic copy promoted
    from it keep its ``seq``, and both are in the pool while the original is still in working
    memory. Each is a neighbour of the turns beside that place (keyed by place alone, one of
    them went missing from the result and a ranking failed on it)."""
    if window < timedelta(0):
        raise ValueError(f"the neighbour window cannot be negative, got {window}")
    by_id = {m.memory_id: m for m in memories}
    by_place: dict[tuple[str, int, int], list[StoredMemory]] = {}
    for memory in by_id.values():
        by_place.setdefault((memory.agent_id, memory.level, memory.seq), []).append(memory)
    found: dict[str, tuple[str, ...]] = {}
    for memory in by_id.values():
        found[memory.memory_id] = tuple(
            other.memory_id
            for step in (-1, 1)
            for other in by_place.get((memory.agent_id, memory.level, memory.seq + step), ())
            if abs(other.occurred_at - memory.occurred_at) <= window
        )
    return found


def with_conversation_context(
    relevance: Mapping[str, float],
    memories: Sequence[StoredMemory],
    *,
    share: float = NEIGHBOUR_SHARE,
    window: timedelta = NEIGHBOUR_WINDOW,
) -> tuple[dict[str, float], dict[str, float]]:
    """Each memory's relevance lifted by its best neighbour's (see the module docstring), and
    that neighbour's relevance by memory id (only where it is positive). ``relevance`` must lie
    in [0, 1]; a memory missing from it has relevance 0. Every memory of ``memories`` gets a
    lifted value."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"the neighbour share must lie in [0, 1], got {share}")
    lifted: dict[str, float] = {}
    context: dict[str, float] = {}
    for memory_id, near in neighbours(memories, window).items():
        best = max((relevance.get(other, 0.0) for other in near), default=0.0)
        if best > 0.0:
            context[memory_id] = best
        lifted[memory_id] = (relevance.get(memory_id, 0.0) + share * best) / (1.0 + share)
    return lifted, context


def best_of_each_signal(
    query: str, memories: Sequence[StoredMemory], top: int = TURNS_READ_BESIDE
) -> list[str]:
    """The ids of the ``top`` memories of highest cosine (as the store filled it in) and the
    ``top`` of highest BM25 over ``memories``, ties to the id: the memories whose neighbours
    are read. Each signal's own best rather than the blend's, which would cost the ranking's
    relevance computation twice per query; on the long-conversation benchmark (offline,
    R@10) 10 of each found as much as the blend's best 20."""
    if top < 0:
        raise ValueError(f"top cannot be negative, got {top}")
    dense = sorted(
        (m for m in memories if m.similarity is not None and m.similarity > 0.0),
        key=lambda m: (-(m.similarity or 0.0), m.memory_id),
    )
    lexical = lexical_scores(query, memories)
    words = sorted(lexical, key=lambda key: (-lexical[key], key))
    return list(dict.fromkeys([*(m.memory_id for m in dense[:top]), *words[:top]]))


def seqs_beside(best: Iterable[str], memories: Sequence[StoredMemory]) -> tuple[int, ...]:
    """The ``seq`` one before and one after each memory of ``best`` (ids of ``memories``)
    that no memory of ``memories`` holds, ascending: the turns a store should be asked for.
    ``memories`` are one agent's."""
    held = {m.seq for m in memories}
    by_id = {m.memory_id: m for m in memories}
    wanted = {by_id[key].seq + step for key in best if key in by_id for step in (-1, 1)}
    return tuple(sorted(seq for seq in wanted - held if seq >= 0))
