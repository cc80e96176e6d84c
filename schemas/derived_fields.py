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


def encode_vector(vector: Sequence[float] | np.ndarray) -> str:
    """A vector as it travels: base64 of little-endian float32 (4x smaller than JSON floats)."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def decode_vector(encoded: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(encoded.encode("ascii")), dtype="<f4")


def _check_vector(value: str) -> str:
    if len(value) % 4:
        raise ValueError("embedding must be base64 of float32 values")
    return value


Embedding = Annotated[str, AfterValidator(_check_vector)]
"""Kept encoded on the model: a hot path that only forwards a vector never unpacks it."""


class SourcePosition(BaseModel):
    """Where the source event sits in the log; projections record it as their applied position."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str
    partition: int = Field(ge=0)
    offset: int = Field(ge=0)
