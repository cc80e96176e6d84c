"""A memory as a Qdrant Edge point: its embedding (the unnamed dense vector), the ``lexical``
sparse vector of its content (:mod:`processors.lexical`) where the shard has one, and the
payload of :func:`projections.memory.point_payload`.

Building a point is most of what applying a batch costs in Python (~68 us a memory here:
converting the payload across the Rust boundary ~20 us, the dense vector as a list ~20, the
sparse vector ~15), so it is kept to one pass with no intermediate model.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import qdrant_edge as qe

from processors.lexical import document_vector
from projections.episodic.changes import EpisodicChanges
from projections.episodic.hybrid import LEXICAL_VECTOR
from projections.memory import point_payload
from schemas.memory_events import MemoryWritten

__all__ = ["edge_point", "edge_points"]


def edge_point(
    memory: MemoryWritten, vector: np.ndarray, lexical: bool, *, active: bool = True
) -> qe.Point:
    """``vector`` is the memory's embedding, decoded (``EpisodicChanges.vectors``); ``active``
    False marks a memory kept in the archive only."""
    dense = vector.tolist()
    payload = point_payload(memory, active=active, lexical=lexical)
    if not lexical:
        return qe.Point(memory.memory_id, dense, payload)
    sparse = document_vector(memory.content)
    vectors: dict[str, Any] = {
        "": dense,
        LEXICAL_VECTOR: qe.SparseVector(list(sparse.indices), list(sparse.values)),
    }
    return qe.Point(memory.memory_id, vectors, payload)


def edge_points(changes: EpisodicChanges, lexical: bool) -> list[qe.Point]:
    """The points a batch upserts: its surviving memories, then those kept in the archive
    only, each with the vector the fold decoded."""
    vectors = changes.vectors
    points = [edge_point(m, vectors[k], lexical) for k, m in changes.upserts.items()]
    points += [
        edge_point(m, vectors[k], lexical, active=False) for k, m in changes.archived.items()
    ]
    return points
