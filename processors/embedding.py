"""Turning text into vectors. The default is a hashing embedder: fast, deterministic, no model.

Words are hashed (crc32) into signed bins and the vector is L2-normalised, so the cosine of two
texts grows with the words they share. It knows no synonyms; a semantic embedder can be plugged
in behind the same protocol, and the embedder's id is part of the config version so two
embedding spaces never mix in one projection.
"""

from __future__ import annotations

import itertools
import re
import zlib
from collections.abc import Sequence
from typing import Protocol, cast, runtime_checkable

import numpy as np

TOKEN = re.compile(r"[a-z0-9]+")

STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "but",
        "by",
        "did",
        "do",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "his",
        "i",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "that",
        "the",
        "their",
        "them",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "will",
        "with",
        "you",
        "your",
    ]
)


class Embedder(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, text: str) -> np.ndarray:
        """A float32 vector of length ``dim``."""
        ...


@runtime_checkable
class EmbedsMany(Protocol):
    """An embedder that does a batch in one call: a model pays its per-call cost once per
    batch, and the hashing embedder's numpy work is done once for all rows."""

    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        """One float32 row per text, in order, each equal to ``embed`` of that text."""
        ...


def keywords(text: str) -> list[str]:
    """Lowercased word tokens without stopwords (shared with keyword-overlap relevance)."""
    return [t for t in TOKEN.findall(text.lower()) if t not in STOPWORDS]


class HashingEmbedder:
    """Signed feature hashing of words and word bigrams.

    Hashes are memoised per feature (bounded): agents repeat their vocabulary, and the crc32 of
    a word is most of the cost of embedding a sentence.
    """

    CACHE_LIMIT = 500_000

    def __init__(self, dim: int = 384) -> None:
        if dim < 8:
            raise ValueError("dim must be at least 8")
        self._dim = dim
        self._hashes: dict[str, int] = {}

    def _hash(self, feature: str) -> int:
        h = self._hashes.get(feature)
        if h is None:
            if len(self._hashes) >= self.CACHE_LIMIT:
                self._hashes.clear()
            h = self._hashes[feature] = zlib.crc32(feature.encode("utf-8"))
        return h

    @property
    def id(self) -> str:
        return f"hashing-v1-{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def _hashes_of(self, features: list[str]) -> list[int]:
        cache = self._hashes
        found = list(map(cache.get, features))
        if None not in found:
            return found  # type: ignore[return-value]
        return [self._hash(f) if h is None else h for f, h in zip(features, found, strict=True)]

    def embed(self, text: str) -> np.ndarray:
        """One text without the batch's bookkeeping (queries, summaries): the same row as
        ``embed_many`` gives it, which the tests hold it to."""
        tokens = keywords(text)
        features = tokens + list(map(" ".join, itertools.pairwise(tokens)))
        if not features:
            return np.zeros(self._dim, dtype=np.float32)
        hashes = np.fromiter(self._hashes_of(features), dtype=np.uint64, count=len(features))
        weights = np.where((hashes >> np.uint64(31)) & np.uint64(1), 1.0, -1.0)
        weights[len(tokens) :] *= 0.5
        vector: np.ndarray = np.bincount(
            (hashes % np.uint64(self._dim)).astype(np.intp), weights=weights, minlength=self._dim
        ).astype(np.float64)
        norm = float(np.linalg.norm(vector))
        if norm > 0.0:
            vector = vector / norm
        return vector.astype(np.float32)

    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        """All rows in one pass of numpy: per text, the bins of its features are summed (words
        weigh 1, bigrams 0.5, the sign from bit 31 of the hash) and the row L2-normalised.
        Features are summed in the same order whatever the batch, so a text's row does not
        depend on the batch it came in."""
        dim, n = self._dim, len(texts)
        features: list[str] = []
        counts: list[int] = []
        for text in texts:
            tokens = keywords(text)
            features += tokens
            grams = list(map(" ".join, itertools.pairwise(tokens)))
            features += grams
            counts.append(len(tokens))
            counts.append(len(grams))
        if not features:
            return np.zeros((n, dim), dtype=np.float32)
        h = np.fromiter(self._hashes_of(features), dtype=np.uint64, count=len(features))
        spans = np.asarray(counts, dtype=np.intp)
        weights = np.where((h >> np.uint64(31)) & np.uint64(1), 1.0, -1.0)
        weights *= np.repeat(np.tile([1.0, 0.5], n), spans)
        rows = np.repeat(np.arange(n, dtype=np.intp), spans[0::2] + spans[1::2])
        cells = rows * dim + (h % np.uint64(dim)).astype(np.intp)
        matrix = np.bincount(cells, weights=weights, minlength=n * dim).reshape(n, dim)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix = np.divide(matrix, norms, out=matrix, where=norms > 0.0)
        rows_f32: np.ndarray = matrix.astype(np.float32)
        return rows_f32


MINILM_NAMES = ("minilm", "minilm-l6-v2", "minilm-l6-v2-384")


def embedder_dim(name: str) -> int:
    """The dimensions of the embedder ``name`` gives, without making it (a model takes seconds
    to load): what a store needs to be opened."""
    match = re.fullmatch(r"hashing(?:-(\d+))?", name)
    if match:
        return int(match.group(1) or 384)
    if name in MINILM_NAMES:
        from processors.semantic_embedding import MiniLMEmbedder

        return MiniLMEmbedder.DIM
    raise ValueError(f"unknown embedder {name!r}; known: hashing, hashing-<dim>, minilm")


def embedder_from_name(
    name: str, *, minilm_precision: str = "auto", minilm_runtime: str = "auto"
) -> Embedder:
    """Embedders by configuration name (``ENGRAM_EMBEDDER``); ``minilm_precision`` and
    ``minilm_runtime`` are ``ENGRAM_MINILM_PRECISION`` and ``ENGRAM_MINILM_RUNTIME``
    (:data:`processors.semantic_embedding.PRECISIONS` and ``RUNTIMES``)."""
    dim = embedder_dim(name)  # an unknown name fails here
    if name in MINILM_NAMES:
        from processors.semantic_embedding import MiniLMEmbedder, Precision, Runtime

        # Both are checked there.
        return MiniLMEmbedder(cast(Precision, minilm_precision), cast(Runtime, minilm_runtime))
    return HashingEmbedder(dim)
