"""The decoded memories an embedded store keeps: bounded, least recently read dropped first, and
never filled with what a read decoded while a write forgot something."""

from __future__ import annotations

from functools import partial

import pytest

from projections.episodic.decoded_memories import DecodedMemories
from tests.unit.projections import test_relevance

memory = partial(test_relevance.memory, content="the levee held")


def test_known_returns_only_what_was_remembered() -> None:
    decoded = DecodedMemories()
    decoded.remember(decoded.generation, {"a": memory("a"), "b": memory("b")})

    assert decoded.known(["a", "c"]) == {"a": memory("a")}
    assert len(decoded) == 2


def test_a_read_that_raced_a_write_keeps_nothing() -> None:
    decoded = DecodedMemories()
    decoded.remember(decoded.generation, {"a": memory("a", content="old words")})
    began = decoded.generation

    decoded.forget(["a"])  # a write touched "a" while the read ran
    decoded.remember(began, {"a": memory("a", content="old words"), "b": memory("b")})

    assert decoded.known(["a", "b"]) == {}
    decoded.remember(decoded.generation, {"a": memory("a", content="new words")})
    assert decoded.known(["a"]) == {"a": memory("a", content="new words")}


def test_forget_drops_the_named_and_forget_all_everything() -> None:
    decoded = DecodedMemories()
    decoded.remember(decoded.generation, {key: memory(key) for key in "abc"})

    decoded.forget(["b", "unknown"])
    assert set(decoded.known("abc")) == {"a", "c"}
    decoded.forget_all()
    assert decoded.known("abc") == {}
    assert len(decoded) == 0


def test_the_least_recently_read_go_first_past_the_capacity() -> None:
    decoded = DecodedMemories(capacity=2)
    decoded.remember(decoded.generation, {"a": memory("a"), "b": memory("b")})
    decoded.known(["a"])  # "a" is now the most recently read

    decoded.remember(decoded.generation, {"c": memory("c")})

    assert set(decoded.known("abc")) == {"a", "c"}


def test_capacity_zero_keeps_nothing_and_a_negative_one_is_refused() -> None:
    decoded = DecodedMemories(capacity=0)
    decoded.remember(decoded.generation, {"a": memory("a")})
    assert decoded.known(["a"]) == {}
    with pytest.raises(ValueError, match="negative"):
        DecodedMemories(capacity=-1)
