"""Fields every derived event shares: where its source sits in the log, and embeddings as they
travel. Apart from :mod:`schemas.memory_events` so the learned events
(:mod:`schemas.learned_events`) use the same types without importing the union they are part of.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Annotated

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

HALF_PRECISION = "f16:"
"""Marks an embedding of little-endian float16 values; one without it is float32 (the form
logs written before half precision hold, still read)."""


def encode_vector(vector: Sequence[float] | np.ndarray) -> str:
    """A vector as it travels: base64 of little-endian float16 (8x smaller than JSON floats,
    half of float32). Embeddings are unit vectors: float16's 11 significant bits move a cosine
    by less than 0.001, far below what separates two memories, and every derived event is
    written to the log, read back by every rebuild and applied to Qdrant."""
    packed = np.asarray(vector, dtype="<f2").tobytes()
    return HALF_PRECISION + base64.b64encode(packed).decode("ascii")


def decode_vector(encoded: str) -> np.ndarray:
    """The float32 vector of either form."""
    if encoded.startswith(HALF_PRECISION):
        half = np.frombuffer(base64.b64decode(encoded[len(HALF_PRECISION) :]), dtype="<f2")
        return half.astype(np.float32)
    return np.frombuffer(base64.b64decode(encoded.encode("ascii")), dtype="<f4")


def _check_vector(value: str) -> str:
    half = value.startswith(HALF_PRECISION)
    body = value[len(HALF_PRECISION) :] if half else value
    if len(body) % 4:
        raise ValueError("embedding must be base64 of float32 values, or 'f16:' and float16")
    return value


Embedding = Annotated[str, AfterValidator(_check_vector)]
"""Kept encoded on the model: a hot path that only forwards a vector never unpacks it."""


class SourcePosition(BaseModel):
    """Where the source event sits in the log; projections record it as their applied position."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str
    partition: int = Field(ge=0)
    offset: int = Field(ge=0)
