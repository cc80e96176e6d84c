"""Embeddings of a whole batch in one call.

Recording embeds each event's content one event at a time, in the order the rules decide; an
embedder pays a fixed cost per call (numpy's bookkeeping for the hashing embedder, a forward
pass for a model), so the batch's texts are embedded together first and recording picks its
rows. A text's row does not depend on the batch it came in (the embedders promise it, the
tests hold them to it), so a batch cut elsewhere derives the same events.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from processors.embedding import Embedder, EmbedsMany


class PreparedEmbedder:
    """An :class:`~processors.embedding.Embedder` that answers from the rows of the texts it
    was prepared with, and embeds anything else (summaries, promotions) as it comes."""

    def __init__(self, embedder: Embedder) -> None:
        self.inner = embedder
        self._rows: dict[str, np.ndarray] = {}

    @property
    def id(self) -> str:
        return self.inner.id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def prepare(self, texts: Iterable[str]) -> None:
        """Embed the batch's texts in one call; the rows of the batch before are dropped, so
        what is held is bounded by one batch."""
        unique = list(dict.fromkeys(texts))
        self._rows = {}
        if not unique:
            return
        inner = self.inner
        if isinstance(inner, EmbedsMany):
            matrix = inner.embed_many(unique)
            self._rows = dict(zip(unique, matrix, strict=True))
        else:
            self._rows = {text: inner.embed(text) for text in unique}

    def embed(self, text: str) -> np.ndarray:
        row = self._rows.get(text)
        return self.inner.embed(text) if row is None else row
