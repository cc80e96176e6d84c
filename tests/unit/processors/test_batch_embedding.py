"""Embedding a batch at once gives every text the row it gets alone, whatever the batch."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from processors.batch_embedding import PreparedEmbedder
from processors.embedding import EmbedsMany, HashingEmbedder

words = st.sampled_from(
    ["flood", "levee", "the", "insurance", "raised", "house", "42", "storm", "a", "é"]
)
sentences = st.lists(words, max_size=12).map(" ".join)


@given(batch=st.lists(sentences, max_size=20), dim=st.sampled_from([8, 64, 384]))
def test_a_batch_row_is_the_text_embedded_alone(batch: list[str], dim: int) -> None:
    embedder = HashingEmbedder(dim)
    matrix = embedder.embed_many(batch)
    assert matrix.shape == (len(batch), dim)
    assert matrix.dtype == np.float32
    for row, text in zip(matrix, batch, strict=True):
        assert np.array_equal(row, embedder.embed(text))


def test_texts_without_keywords_embed_to_zero_rows_beside_others() -> None:
    matrix = HashingEmbedder(16).embed_many(["the a", "flood house", ""])
    assert not matrix[0].any()
    assert not matrix[2].any()
    assert abs(float(np.linalg.norm(matrix[1])) - 1.0) < 1e-6


class CountingEmbedder:
    """A one-text-at-a-time embedder that counts its calls."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(32)
        self.calls: list[str] = []

    @property
    def id(self) -> str:
        return self.inner.id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, text: str) -> np.ndarray:
        self.calls.append(text)
        return self.inner.embed(text)


def test_a_prepared_embedder_answers_the_batch_from_one_call_and_the_rest_as_it_comes() -> None:
    hashing = HashingEmbedder(32)
    assert isinstance(hashing, EmbedsMany)
    prepared = PreparedEmbedder(hashing)
    prepared.prepare(["flood in the street", "levee broke", "flood in the street"])
    assert np.array_equal(prepared.embed("levee broke"), hashing.embed("levee broke"))
    assert np.array_equal(prepared.embed("a summary"), hashing.embed("a summary"))
    assert (prepared.id, prepared.dim) == (hashing.id, hashing.dim)

    counting = CountingEmbedder()
    assert not isinstance(counting, EmbedsMany)
    one_by_one = PreparedEmbedder(counting)
    one_by_one.prepare(["x storm", "x storm", "y house"])
    assert counting.calls == ["x storm", "y house"]  # each text once
    one_by_one.embed("x storm")
    assert counting.calls == ["x storm", "y house"]
    one_by_one.prepare(["z levee"])  # the batch before is dropped
    one_by_one.embed("x storm")
    assert counting.calls == ["x storm", "y house", "z levee", "x storm"]
