"""A batch's memories are checked against the store's dimension before any is written, and
their decoded vectors kept for the points (each decoded once)."""

from __future__ import annotations

import base64
from collections.abc import Callable

import numpy as np
import pytest

from projections.episodic.changes import episodic_changes
from schemas.memory_events import MemoryRecorded, encode_vector
from tests.unit.projections.test_event_dispatch import recorded

Encoder = Callable[[list[float]], str]


def with_embedding(embedding: str) -> MemoryRecorded:
    return recorded("episodic").model_copy(update={"embedding": embedding})


def float32(vector: list[float]) -> str:
    """The embedding as logs written before half precision hold it."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


@pytest.mark.parametrize("encode", [encode_vector, float32])
def test_a_memory_of_the_stores_dimension_is_folded(encode: Encoder) -> None:
    changes = episodic_changes([with_embedding(encode([0.5, -0.25, 1.0]))], dim=3)
    assert list(changes.upserts) == ["m-episodic"]
    assert changes.vectors["m-episodic"].tolist() == [0.5, -0.25, 1.0]


@pytest.mark.parametrize("encode", [encode_vector, float32])
@pytest.mark.parametrize("size", [2, 4, 5])
def test_a_memory_of_another_dimension_is_refused_by_name(encode: Encoder, size: int) -> None:
    memory = with_embedding(encode([0.5] * size))
    with pytest.raises(ValueError, match=r"the embedding of m-episodic has shape \(\d+,\)"):
        episodic_changes([memory], dim=3)
