"""A batch's memories are checked against the store's dimension before any is written, and
their decoded vectors kept for the points (each decoded once)."""

from __future__ import annotations

import base64
from collections.abc import Callable

import numpy as np
import pytest

from projections.episodic.changes import episodic_changes
from schemas.memory_events import MemoryForgotten, MemoryRecorded, encode_vector
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


def forgetting(memory_id: str, seq: int | None) -> MemoryForgotten:
    return MemoryForgotten(
        agent_id="a",
        memory_id=memory_id,
        seq=seq,
        destination="episodic",
        reason="capacity",
        caused_by="e",
        config_version="c",
    )


def test_a_forgetting_of_an_earlier_memory_under_the_id_leaves_the_later_one() -> None:
    """Its event id used again, m-episodic is seq 7; a forgetting of seq 2 applied again (in the
    same batch, or a later one) must not reach it."""
    later = with_embedding(encode_vector([1.0, 0.0, 0.0])).model_copy(update={"seq": 7})
    same_batch = episodic_changes([later, forgetting("m-episodic", 2)], dim=3)
    assert list(same_batch.upserts) == ["m-episodic"]
    assert not same_batch.deletes
    alone = episodic_changes([forgetting("m-episodic", 2)], dim=3)
    assert (alone.deletes, alone.bounds) == ({"m-episodic"}, {"m-episodic": 2})
    archived = episodic_changes([forgetting("m-episodic", 2)], dim=3, archive=True)
    assert (archived.retired, archived.bounds) == ({"m-episodic"}, {"m-episodic": 2})


def test_a_forgetting_without_a_seq_deletes_whatever_the_id_holds() -> None:
    """A forgetting of schema version 1 names no seq: as before, the id goes."""
    both = episodic_changes([forgetting("m", 2), forgetting("m", None)], dim=3)
    assert (both.deletes, both.bounds) == ({"m"}, {})
    twice = episodic_changes([forgetting("m", 2), forgetting("m", 9)], dim=3)
    assert twice.bounds == {"m": 9}
