"""Memories read back from the points of either episodic store."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from projections.episodic.candidates import CandidateSignals
from projections.interfaces import ProjectionError
from projections.memory import StoredMemory, memory_from_point

__all__ = ["candidate_memories", "clipped", "stored_memory"]


def stored_memory(
    payload: Mapping[str, Any] | None, score: float | None = None, lexical: float | None = None
) -> StoredMemory:
    """A memory read back from its payload; a score becomes the similarity, ``lexical`` the
    keyword score of a hybrid search.

    The score is clipped to [-1, 1]: cosine lies there by definition, and float32 rounding
    can put the score of a vector against itself a hair above 1.
    """
    if payload is None:
        raise ProjectionError("a stored point came back without its payload")
    similarity = None if score is None else clipped(score)
    return memory_from_point(payload, similarity, lexical)


def clipped(score: float) -> float:
    """A cosine clipped to [-1, 1] (see :func:`stored_memory`)."""
    return min(1.0, max(-1.0, float(score)))


def candidate_memories(points: Iterable[Any], signals: CandidateSignals) -> list[StoredMemory]:
    """The memories of a candidates query's points (each with its cosine when the query had a
    direction), those between the wanted ``at_seqs`` left out. The server adapter's reading;
    the Edge store returns the same from the memories it keeps decoded
    (:mod:`projections.episodic.decoded_memories`)."""
    if signals.nearest:
        read = [stored_memory(point.payload, point.score) for point in points]
    else:
        read = [stored_memory(point.payload) for point in points]
    return [memory for memory in read if signals.wanted(memory.seq)]
