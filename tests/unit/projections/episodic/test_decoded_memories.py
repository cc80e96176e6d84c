"""The decoded memories an embedded store keeps: bounded, least recently read dropped first, and
never filled with what a read decoded while a write forgot something."""

from __future__ import annotations

import gc
import uuid
from collections.abc import Iterable, Mapping
from functools import partial

import pytest

from projections.episodic.decoded_memories import DecodedMemories, Kept, point_key
from projections.memory import StoredMemory, with_similarity
from tests.unit.projections import test_relevance

memory = partial(test_relevance.memory, content="the levee held", similarity=None)


def point_id(name: str) -> str:
    """The point id of the memory called ``name`` (a store's point ids are UUIDs)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, name))


def remember(
    decoded: DecodedMemories, generation: int, memories: Mapping[str, StoredMemory]
) -> None:
    decoded.remember(generation, {point_key(point_id(n)): m for n, m in memories.items()})


def known(decoded: DecodedMemories, names: Iterable[str]) -> dict[str, Kept]:
    keys = {point_key(point_id(name)): name for name in names}
    return {keys[key]: values for key, values in decoded.known(keys).items()}


def forget(decoded: DecodedMemories, names: Iterable[str]) -> None:
    decoded.forget(point_id(name) for name in names)


def kept(decoded: DecodedMemories, names: Iterable[str]) -> dict[str, StoredMemory]:
    return {name: decoded.memory(values) for name, values in known(decoded, names).items()}


def test_known_returns_only_what_was_remembered() -> None:
    decoded = DecodedMemories()
    remember(decoded, decoded.generation, {"a": memory("a"), "b": memory("b")})

    assert kept(decoded, ["a", "c"]) == {"a": memory("a")}
    assert len(decoded) == 2


def test_a_kept_memory_comes_back_as_it_was_and_with_a_similarity() -> None:
    decoded = DecodedMemories()
    original = StoredMemory.model_validate_json(memory("a").model_dump_json(exclude_none=True))
    remember(decoded, decoded.generation, {"a": original})

    again = decoded.memory(known(decoded, ["a"])["a"])
    scored = decoded.memory(known(decoded, ["a"])["a"], 0.25)

    assert again == original
    assert again.model_fields_set == original.model_fields_set
    assert scored == original.model_copy(update={"similarity": 0.25})
    assert scored.model_fields_set == with_similarity(original, 0.25).model_fields_set
    assert scored.model_dump_json() == with_similarity(original, 0.25).model_dump_json()


def test_kept_memories_are_not_tracked_by_the_cycle_collector() -> None:
    decoded = DecodedMemories()
    remember(decoded, decoded.generation, {"a": memory("a")})
    # A tuple is untracked at a collection that finds all its items untracked: the values at
    # the first, the pair holding them at the latest at the next.
    gc.collect()
    gc.collect()

    assert not gc.is_tracked(known(decoded, ["a"])["a"])


def test_a_read_that_raced_a_write_keeps_nothing() -> None:
    decoded = DecodedMemories()
    remember(decoded, decoded.generation, {"a": memory("a", content="old words")})
    began = decoded.generation

    forget(decoded, ["a"])  # a write touched "a" while the read ran
    remember(decoded, began, {"a": memory("a", content="old words"), "b": memory("b")})

    assert kept(decoded, ["a", "b"]) == {}
    remember(decoded, decoded.generation, {"a": memory("a", content="new words")})
    assert kept(decoded, ["a"]) == {"a": memory("a", content="new words")}


def test_forget_drops_the_named_and_forget_all_everything() -> None:
    decoded = DecodedMemories()
    remember(decoded, decoded.generation, {key: memory(key) for key in "abc"})

    forget(decoded, ["b", "unknown"])
    assert set(kept(decoded, "abc")) == {"a", "c"}
    decoded.forget_all()
    assert kept(decoded, "abc") == {}
    assert len(decoded) == 0


def test_the_least_recently_read_go_first_past_the_capacity() -> None:
    decoded = DecodedMemories(capacity=2)
    remember(decoded, decoded.generation, {"a": memory("a"), "b": memory("b")})
    known(decoded, ["a"])  # "a" is now the most recently read

    remember(decoded, decoded.generation, {"c": memory("c")})

    assert set(kept(decoded, "abc")) == {"a", "c"}


def test_capacity_zero_keeps_nothing_and_a_negative_one_is_refused() -> None:
    decoded = DecodedMemories(capacity=0)
    remember(decoded, decoded.generation, {"a": memory("a")})
    assert known(decoded, ["a"]) == {}
    with pytest.raises(ValueError, match="negative"):
        DecodedMemories(capacity=-1)


def test_holds_any_of_counts_each_agents_kept_memories() -> None:
    decoded = DecodedMemories(capacity=3)
    bob = test_relevance.memory("b1", "the pumps").model_copy(update={"agent_id": "bob"})
    remember(decoded, decoded.generation, {"a1": memory("a1"), "a2": memory("a2"), "b1": bob})
    remember(decoded, decoded.generation, {"a1": memory("a1")})  # kept again, counted once
    assert decoded.holds_any_of("alice")
    assert decoded.holds_any_of("bob")
    assert not decoded.holds_any_of("carol")

    forget(decoded, ["b1"])
    assert not decoded.holds_any_of("bob")
    remember(
        decoded, decoded.generation, {"b1": bob, "b2": bob.model_copy(update={"memory_id": "b2"})}
    )
    assert len(decoded) == 3  # a2, the least recently read, went
    forget(decoded, ["a1"])
    assert not decoded.holds_any_of("alice")
    decoded.forget_all()
    assert not decoded.holds_any_of("bob")


def test_a_point_id_keys_the_same_memory_as_a_uuid_or_as_the_string_a_write_names() -> None:
    decoded = DecodedMemories()
    written = uuid.uuid4()
    decoded.remember(decoded.generation, {point_key(written): memory("a")})

    assert point_key(written) == point_key(str(written)) == point_key(written.hex)
    assert decoded.known([point_key(written)])
    decoded.forget(["no uuid", str(written).upper()])  # an id no point has is passed over
    assert decoded.known([point_key(written)]) == {}
    with pytest.raises(ValueError, match="hexadecimal"):
        point_key("no uuid")
