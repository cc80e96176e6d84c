"""Hybrid search's fusion (:func:`projections.episodic.hybrid.fuse`) on hand-worked rankings.

Both episodic adapters call ``fuse``, so the contract tests can only show that they agree with
each other; these examples pin what it computes. The definition is Reciprocal Rank Fusion
(Cormack, Clarke and Buettcher, SIGIR 2009): a memory scores ``sum over rankings of
1 / (60 + rank)``, ranks counted from 1, each sub-ranking sorted by score (to four significant
digits), then id, and cut at ``limit`` before fusing; equal fused scores go to the better
single rank, then to the id. The fractions in the docstrings are worked out by hand from that.
"""

from __future__ import annotations

from collections.abc import Sequence

from projections.episodic.hybrid import fuse


def fused(
    dense: Sequence[tuple[str, float]], lexical: Sequence[tuple[str, float]], limit: int
) -> list[tuple[str, float | None]]:
    """The fused hits as (id, lexical score) pairs."""
    return [(hit.memory_id, hit.lexical) for hit in fuse(dense, lexical, limit)]


DENSE = [("a", 0.9), ("b", 0.8), ("c", 0.7)]
LEXICAL = [("c", 3.0), ("d", 2.0), ("e", 1.0)]


def test_each_side_is_cut_at_the_limit_before_fusing() -> None:
    """At limit 2 the sides are [a, b] and [c, d]: c's third place in the dense ranking does
    not count, so a and c both score 1/61, tie on their best rank (1) and go by id; b and d
    (1/62) miss the limit. Uncut, c would lead with 1/61 + 1/63."""
    assert fused(DENSE, LEXICAL, 2) == [("a", None), ("c", 3.0)]


def test_a_memory_both_sides_rank_leads_once_both_cuts_hold_it() -> None:
    """At limit 3 c is in both cuts: 1/61 + 1/63 = 0.03227 beats a's 1/61 = 0.01639; b and d
    tie at 1/62 and on their best rank (2), so b goes first by id, and d misses the limit."""
    assert fused(DENSE, LEXICAL, 3) == [("c", 3.0), ("a", None), ("b", None)]


def test_a_second_place_beats_a_third_place() -> None:
    """Dense [a, b, c], lexical [b, d]: b 1/62 + 1/61 = 0.03252, a 1/61 = 0.01639,
    d 1/62 = 0.01613, c 1/63 = 0.01587."""
    assert fused(DENSE, [("b", 5.0), ("d", 4.0)], 3) == [("b", 5.0), ("a", None), ("d", 4.0)]


def test_fifth_on_both_sides_outranks_first_on_one() -> None:
    """The constant 60 makes agreement count for more than a top place: e, fifth on both
    sides, scores 2/65 = 0.03077, a and v, first on one side, 1/61 = 0.01639 (a first by id),
    b and w 1/62. (With a constant of 2, as qdrant-client's local mode fuses, a and v would
    lead with 1/3 against e's 2/7.)"""
    dense = [("a", 0.9), ("b", 0.8), ("c", 0.7), ("d", 0.6), ("e", 0.5)]
    lexical = [("v", 5.0), ("w", 4.0), ("x", 3.0), ("y", 2.0), ("e", 1.0)]
    assert fused(dense, lexical, 5) == [
        ("e", 1.0),
        ("a", None),
        ("v", 5.0),
        ("b", None),
        ("w", 4.0),
    ]


def test_the_lexical_score_is_reported_even_past_the_lexical_cut() -> None:
    """a ranks by its dense score alone (lexical cut: [c, d]), but the lexical sub-query did
    find it, so its hit carries its lexical score."""
    lexical = [("c", 3.0), ("d", 2.0), ("a", 1.0)]
    assert fused([("a", 0.9), ("b", 0.8)], lexical, 2) == [("a", 1.0), ("c", 3.0)]


def test_without_lexical_hits_the_dense_ranking_alone_decides() -> None:
    """A query text of stopwords only has no lexical side."""
    assert fused([("x", 0.2), ("y", 0.6), ("z", 0.4)], [], 2) == [("y", None), ("z", None)]


def test_without_dense_hits_the_lexical_ranking_alone_decides() -> None:
    """A query vector of zeros has no dense side; a limit past the hits returns them all."""
    assert fused([], [("x", 1.5), ("y", 2.5)], 5) == [("y", 2.5), ("x", 1.5)]


def test_with_neither_side_nothing_is_relevant() -> None:
    assert fused([], [], 5) == []


def test_only_a_positive_cosine_earns_a_dense_rank() -> None:
    """0, a negative cosine and float noise around 0 (at most 1e-6) rank nowhere, so only d
    is left; with b found by its words, b and d both score 1/61 at best rank 1, and the id
    orders them."""
    dense = [("a", 0.0), ("b", -0.5), ("c", 1e-7), ("d", 0.01)]
    assert fused(dense, [], 5) == [("d", None)]
    assert fused(dense, [("b", 1.0)], 5) == [("b", 1.0), ("d", None)]


def test_equal_scores_make_the_cut_by_id_whatever_order_they_came_in() -> None:
    """Three memories scored alike: the limit keeps the smallest ids, however a backend
    ordered them."""
    ties = [("c", 0.5), ("a", 0.5), ("b", 0.5)]
    assert fused(ties, [], 2) == [("a", None), ("b", None)]
    assert fused(ties[::-1], [], 2) == [("a", None), ("b", None)]
    assert fused([], [("z", 2.0), ("y", 2.0), ("x", 2.0)], 1) == [("x", 2.0)]


def test_scores_equal_to_four_significant_digits_tie() -> None:
    """0.53452251 and 0.53452247 (two backends' float32 sums of one cosine) are both 0.5345,
    so the id decides, not the noise; 0.5346 is a higher score than 0.5345."""
    noisy = [("b", 0.53452251), ("a", 0.53452247)]
    assert fused(noisy, [], 1) == [("a", None)]
    assert fused([("b", 0.5346), ("a", 0.5345)], [], 1) == [("b", None)]
