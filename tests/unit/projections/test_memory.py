"""``with_similarity`` builds what pydantic's ``model_copy(update=...)`` builds: if a pydantic
release changes what a model instance holds, these comparisons fail."""

from __future__ import annotations

import copy

import pydantic
import pytest

from projections.memory import StoredMemory, with_similarity
from tests.unit.projections.test_relevance import memory

MEMORY = memory("m-1", "the levee held", similarity=None)


@pytest.mark.parametrize("memory", [MEMORY, MEMORY.model_copy(update={"similarity": 0.1})])
def test_with_similarity_equals_pydantic_copy(memory: StoredMemory) -> None:
    expected = memory.model_copy(update={"similarity": 0.25})

    copied = with_similarity(memory, 0.25)

    assert copied == expected
    assert copied.similarity == 0.25
    assert copied.model_dump() == expected.model_dump()
    assert copied.model_dump_json() == expected.model_dump_json()
    assert copied.model_fields_set == expected.model_fields_set
    assert copied.__pydantic_extra__ == expected.__pydantic_extra__
    assert copied.__pydantic_private__ == expected.__pydantic_private__
    assert copy.copy(copied) == expected
    assert hash(copied) == hash(expected)
    assert memory.similarity != 0.25  # the original is left as it was


def test_the_copy_stays_frozen() -> None:
    copied = with_similarity(MEMORY, 0.5)
    with pytest.raises(pydantic.ValidationError):
        copied.similarity = 0.7  # type: ignore[misc]
