"""What a ranking needs to see of an agent's episodic pool: a bounded set of candidates.

Reading an agent's whole pool and ranking it in Python costs time in the size of the pool;
ranking the candidates the store picks costs time in their number, whatever the pool holds.
Each signal a mode ranks by asks the store for its best ``limit`` memories, all of them in one
query (Qdrant prefetches, one per signal, united by the outer query):

* ``recency``: the ``limit`` newest by ``seq`` (an ``order_by`` on its range index), and the
  oldest, so that the span of ages a mode normalises by is the pool's;
* ``importance``: the ``limit`` most important (``order_by`` on the importance index), and the
  least important, for the same reason;
* ``occurred``: the ``limit`` newest by the event's time, ``occurred_at`` (``order_by`` on the
  index of ``occurred_ts``): what the recent mode ranks by, which ``seq`` orders otherwise when
  events are recorded out of their time's order (a producer's backfill, a late record);
* ``vector``: the ``limit`` nearest to the query embedding; then every candidate, whichever
  signal brought it, carries its cosine with the query (the outer query scores them all);
* ``lexical``: the ``limit`` best BM25 matches of the query's stems (the IDF over the agent's
  memories, as a hybrid search counts it);
* ``tags``: the ``limit`` newest carrying any of these tags (the context of the weighted mode);
* ``at_seqs``: instead of all the above, the memories at these ``seq`` (the turns beside a
  first ranking's best, :mod:`projections.retrieval.conversation_context`), each carrying
  its cosine when there is a query vector; ``limit`` does not apply.

**Exact within the bound.** A pool of at most ``limit`` memories (after the request's levels
and filter) is returned whole by any one of ``recency``, ``importance``, ``occurred`` and
``vector`` (``occurred`` leaves out a point written before ``occurred_ts`` existed, which a
filter on time leaves out as well, and the recent mode always filters on it), so the
ranking of the candidates is the ranking of the pool. Past the bound it is an approximation:
a memory none of the signals puts in its best ``limit`` (say, of middling age *and* middling
importance, in a mode that multiplies the two) is not seen, and what a mode computes over the
pool (BM25's IDF, min-max normalisation, the imputed time of a memory without one) is computed
over the candidates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from processors.lexical import SparseQuery
from projections.episodic.scope import CANDIDATE_LIMIT, RELEVANCE_CANDIDATE_LIMIT, Scope

__all__ = ["CANDIDATE_LIMIT", "RELEVANCE_CANDIDATE_LIMIT", "CandidateSignals", "Scope"]


SEQ_GAP = 2
"""Seqs of ``at_seqs`` this close are read through one range (see
:attr:`CandidateSignals.at_seq_ranges`)."""


@dataclass(frozen=True, slots=True, eq=False)
class CandidateSignals:
    """The signals a ranking asks candidates for, and how many each contributes."""

    limit: int = CANDIDATE_LIMIT
    recency: bool = False
    importance: bool = False
    occurred: bool = False
    vector: np.ndarray | None = None
    lexical: SparseQuery | None = None
    tags: tuple[str, ...] = ()
    at_seqs: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ValueError(f"limit must be at least 1, got {self.limit}")
        if not self.whole_within_limit and not self.at_seqs:
            raise ValueError(
                "candidates need recency, importance, occurred or a query vector that is not all "
                "zeros: the lexical and tag signals alone would leave out a pool's other memories"
            )

    @property
    def nearest(self) -> bool:
        """Whether the query vector has a direction to search by (a text of stopwords only
        embeds to zeros)."""
        return self.vector is not None and bool(np.any(self.vector))

    @property
    def whole_within_limit(self) -> bool:
        """Whether a pool of at most ``limit`` memories comes back whole: some signal reads
        every memory it admits, which the lexical and tag signals do not."""
        return self.recency or self.importance or self.occurred or self.nearest

    @property
    def at_seq_ranges(self) -> tuple[tuple[int, int], ...]:
        """``at_seqs`` as inclusive ranges, ascending: seqs at most :data:`SEQ_GAP` apart share
        one. A store checks every range condition against each of the agent's points, and the
        turns beside a ranking's best come in pairs around a memory already read (``s - 1``
        and ``s + 1``): one range each rather than two (on Edge, the turns beside 20 memories
        of an agent of 1,000 in a shard of 200,000 points: 2.5 ms as 40 ranges, 1.1 ms as 20).
        A range also brings the seqs between, which :meth:`wanted` leaves out again."""
        ranges: list[tuple[int, int]] = []
        for seq in sorted(set(self.at_seqs)):
            if ranges and seq - ranges[-1][1] <= SEQ_GAP:
                ranges[-1] = (ranges[-1][0], seq)
            else:
                ranges.append((seq, seq))
        return tuple(ranges)

    @property
    def at_seqs_limit(self) -> int:
        """How many points the ranges of ``at_seqs`` may hold: a promoted copy shares its
        original's ``seq``, so two per ``seq`` they cover."""
        return 2 * sum(high - low + 1 for low, high in self.at_seq_ranges)

    def wanted(self, seq: int) -> bool:
        """Whether a memory read for ``at_seqs`` is at one of them (not between two)."""
        return not self.at_seqs or seq in self.at_seqs

    @property
    def casefolded_tags(self) -> tuple[str, ...]:
        return tuple(sorted({tag.casefold() for tag in self.tags}))

    @property
    def given_tags(self) -> tuple[str, ...]:
        """The tags as given and casefolded, for a store from before the casefolded field."""
        return tuple(sorted({*self.tags, *self.casefolded_tags}))
