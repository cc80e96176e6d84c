"""Embeddings of a whole batch in one call.

Recording embeds each event's content one event at a time, in the order the rules decide; an
embedder pays a fixed cost per call (numpy's bookkeeping for the hashing embedder, a forward
pass for a model), so the batch's texts are embedded together first and recording picks its
rows. A text's row does not depend on the batch it came in (the embedders promise it, the
tests hold them to it), so a batch cut elsewhere derives the same events.

The texts the rules make as they go (summaries, promoted copies, procedures' descriptions) are
not known before the batch is derived. For an embedder whose call is dear (a model:
``batches_misses``), :func:`processors.batch.process_batch` derives the batch twice: the first
pass only notes those texts (answered with zero rows, and thrown away), one call embeds them
all, and the second pass finds every row prepared. Deriving is pure and costs ~0.2 ms an
event, a model's call of one text ~8 ms.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import numpy as np

from processors.embedding import Embedder, EmbedsMany


class PreparedEmbedder:
    """An :class:`~processors.embedding.Embedder` that answers from the rows of the texts it
    was prepared with, and embeds anything else (summaries, promotions) as it comes."""

    def __init__(self, embedder: Embedder) -> None:
        self.inner = embedder
        self._rows: dict[str, np.ndarray] = {}
        self._noted: list[str] | None = None

    @property
    def batches_misses(self) -> bool:
        """Whether the texts the rules make are worth a second derivation of the batch: an
        embedder that embeds many at once and says so (``batches_misses``: a model)."""
        return isinstance(self.inner, EmbedsMany) and bool(
            getattr(self.inner, "batches_misses", False)
        )

    @property
    def id(self) -> str:
        return self.inner.id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def prepare(self, texts: Iterable[str]) -> None:
        """Embed the batch's texts in one call; the rows of the batch before are dropped, so
        what is held is bounded by one batch."""
        self._rows = {}
        self.add(texts)

    def add(self, texts: Iterable[str]) -> None:
        """Embed ``texts`` in one call and keep their rows beside the batch's."""
        unique = [text for text in dict.fromkeys(texts) if text not in self._rows]
        if not unique:
            return
        inner = self.inner
        if isinstance(inner, EmbedsMany):
            self._rows.update(zip(unique, inner.embed_many(unique), strict=True))
        else:
            self._rows.update((text, inner.embed(text)) for text in unique)

    @contextmanager
    def noting_misses(self) -> Iterator[list[str]]:
        """Meanwhile a text not prepared is noted in the list yielded and answered with a row
        of zeros, which a derivation run to find those texts throws away."""
        noted: list[str] = []
        self._noted = noted
        try:
            yield noted
        finally:
            self._noted = None

    def embed(self, text: str) -> np.ndarray:
        row = self._rows.get(text)
        if row is not None:
            return row
        if self._noted is not None:
            self._noted.append(text)
            return np.zeros(self.inner.dim, dtype=np.float32)
        return self.inner.embed(text)
