"""Embeddings of a whole batch in one call.

Recording embeds each event's content one event at a time, in the order the rules decide; an
embedder pays a fixed cost per call (numpy's bookkeeping for the hashing embedder, a forward
pass for a model), so the batch's texts are embedded together first and recording picks its
rows. A text's row does not depend on the batch it came in (the embedders promise it, the
tests hold them to it), so a batch cut elsewhere derives the same events.

The texts the rules make as they go (summaries, promoted copies, procedures' descriptions) are
not known before the batch is derived. For an embedder whose call is dear (a model:
``batches_misses``), :func:`processors.batch.process_batch` answers each of them with a
placeholder row while it derives, embeds them all in one call after, and puts each text's row
in the place of its placeholder in the derived events' embedding fields (typed ``Embedding``,
at any depth; :meth:`PreparedEmbedder.filled`). That holds because the rules only carry a row
into an event (encoded); none computes with one, and a test derives with placeholders and
without and compares. A placeholder is no vector a model gives (its first coordinate is
-65504), and only embedding fields are filled, so an agent's text that reads like one is left
alone. Should a placeholder be found fewer or more times than it was handed out, the batch is
derived again with every row prepared, as before: deriving costs ~0.1 ms an event, a model's
call of one text ~8 ms.
"""

from __future__ import annotations

import functools
import typing
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel

from processors.embedding import Embedder, EmbedsMany
from schemas.derived_fields import Embedding, encode_vector

T = TypeVar("T", bound=BaseModel)


class Misses:
    """The texts a derivation asked for and no call had embedded, each answered with a
    placeholder row of its own; :meth:`PreparedEmbedder.filled` puts the real rows in."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.texts: dict[str, np.ndarray] = {}
        self.handed: Counter[str] = Counter()
        """How often each text's placeholder was handed out: it must be found in as many
        embedding fields of the derived events, or the rows are not put in."""

    def placeholder(self, text: str) -> np.ndarray:
        row = self.texts.get(text)
        if row is None:
            # -65504 (float16's lowest) is no coordinate of a unit vector; the next two count.
            row = np.zeros(self.dim, dtype=np.float32)
            row[0], row[1], row[2] = -65504.0, len(self.texts) // 1024, len(self.texts) % 1024
            self.texts[text] = row
        self.handed[text] += 1
        return row

    def __bool__(self) -> bool:
        return bool(self.texts)

    def __iter__(self) -> Iterator[str]:
        return iter(self.texts)


class PreparedEmbedder:
    """An :class:`~processors.embedding.Embedder` that answers from the rows of the texts it
    was prepared with, and embeds anything else (summaries, promotions) as it comes."""

    def __init__(self, embedder: Embedder) -> None:
        self.inner = embedder
        self._rows: dict[str, np.ndarray] = {}
        self._misses: Misses | None = None

    @property
    def batches_misses(self) -> bool:
        """Whether the texts the rules make are worth placeholders and one more call: an
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
    def noting_misses(self) -> Iterator[Misses]:
        """Meanwhile a text not prepared is answered with a placeholder row of its own
        and noted in the :class:`Misses` yielded."""
        misses = Misses(self.inner.dim)
        self._misses = misses
        try:
            yield misses
        finally:
            self._misses = None

    def filled(self, events: Sequence[T], misses: Misses) -> list[T] | None:
        """``events`` with the real row of each missed text in the place of its placeholder,
        once :meth:`add` has embedded them, in their embedding fields (``Embedding``, at any
        depth: a procedure's attached text has one); ``None`` unless each placeholder is
        found exactly as often as it was handed out (then derive again)."""
        filling = _Filling(
            {
                encode_vector(placeholder): (text, encode_vector(self._rows[text]))
                for text, placeholder in misses.texts.items()
            }
        )
        try:
            out = [filling.model(event) for event in events]
        except (NameError, TypeError):  # a model whose field types cannot be resolved
            return None
        return out if filling.found == misses.handed else None

    def embed(self, text: str) -> np.ndarray:
        row = self._rows.get(text)
        if row is not None:
            return row
        if self._misses is not None:
            return self._misses.placeholder(text)
        return self.inner.embed(text)


class _Filling:
    """Puts rows in the place of placeholders, in the embedding fields of models and of the
    models (or tuples of them) they hold, and counts what it found per text."""

    def __init__(self, rows: dict[str, tuple[str, str]]) -> None:
        self.rows = rows
        self.found: Counter[str] = Counter()

    def model(self, model: T) -> T:
        embeddings = _embedding_fields(type(model))
        update: dict[str, Any] = {}
        for name, value in model.__dict__.items():
            if isinstance(value, str):
                if name in embeddings and value in self.rows:
                    text, row = self.rows[value]
                    self.found[text] += 1
                    update[name] = row
            elif isinstance(value, BaseModel | tuple):
                filled = self.value(value)
                if filled is not value:
                    update[name] = filled
        return model.model_copy(update=update) if update else model

    def value(self, value: Any) -> Any:
        if isinstance(value, BaseModel):
            return self.model(value)
        if isinstance(value, tuple):
            items = tuple(self.value(item) for item in value)
            return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
        return value


@functools.cache
def _embedding_fields(model: type[BaseModel]) -> frozenset[str]:
    """The fields of ``model`` typed ``Embedding`` (or ``Embedding | None``)."""
    hints = typing.get_type_hints(model, include_extras=True)
    return frozenset(
        name
        for name in model.model_fields
        if hints[name] == Embedding or Embedding in typing.get_args(hints[name])
    )
