"""How an Edge shard is configured: what it stores, how it keeps it, which payload fields it
indexes. :mod:`projections.episodic.edge_segments` holds the policy (the numbers and their
measurements); this module turns it into Edge's configuration, and reads back what an existing
shard was made with, which Edge only tells through the shard's own ``edge_config.json``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from projections.episodic import edge_segments
from projections.episodic.hybrid import LEXICAL_VECTOR
from projections.interfaces import ProjectionError

__all__ = [
    "PAYLOAD_MEMORY",
    "StoredLayout",
    "ensure_indexes",
    "shard_config",
    "stored_layout",
    "stored_size",
]

PAYLOAD_MEMORY = qe.Memory.Cached
"""Payloads kept in RAM rather than read from disk (Edge's default, ``Cold``): a retrieval reads
the payload of a few hundred candidates, and from disk that cost grew with the shard, not the
agent (100 nearest of one agent's 1,000 points with their payload: 1.00 ms in a shard of 20,000
points, 8.26 ms in one of 200,000; 1.43 ms Cached). The price is the payload storage in RAM: on
disk it took ~630 bytes a point (126 MB for 200,000 points). An existing shard is switched
when loaded."""

_DATATYPES = {
    "float16": qe.VectorStorageDatatype.Float16,
    "float32": qe.VectorStorageDatatype.Float32,
}


@dataclass(frozen=True)
class StoredLayout:
    """What an existing shard was made with. Loading it with another datatype fails, and with
    a sparse vector it lacks fails too, so both are read back before it is loaded."""

    lexical: bool
    """Whether it holds the ``lexical`` sparse vector with its IDF modifier (False: a shard
    from before hybrid search)."""
    vectors: str
    """How it stores its dense vectors: ``float32`` for a shard from before the choice."""


def _stored_config(shard_path: Path) -> Any:
    """The shard's ``edge_config.json``: Edge offers no call that returns a shard's vector
    configuration. Raises ``OSError`` (``FileNotFoundError``: no shard) or ``ValueError``."""
    return json.loads((shard_path / "edge_config.json").read_bytes())


def stored_layout(shard_path: Path) -> StoredLayout:
    """The layout of the shard at ``shard_path``; an unreadable config is taken for the oldest
    layout (Edge, loading the shard, then says what is wrong with it)."""
    try:
        config = _stored_config(shard_path)
    except (OSError, ValueError):
        return StoredLayout(lexical=False, vectors="float32")
    return StoredLayout(lexical=_has_lexical(config), vectors=_datatype(config))


def stored_size(shard_path: Path) -> int | None:
    """The dense vector size of the shard at ``shard_path``; None when there is no shard.
    Loading a shard with another size fails, so a config that does not tell it is an error."""
    try:
        size = _stored_config(shard_path)["vectors"][""]["size"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ProjectionError(
            f"Qdrant Edge: the shard at {shard_path} has no readable config"
        ) from exc
    if not isinstance(size, int):
        raise ProjectionError(f"Qdrant Edge: the shard at {shard_path} names no vector size")
    return size


def _has_lexical(config: Any) -> bool:
    try:
        params = config.get("sparse_vectors", {}).get(LEXICAL_VECTOR)
    except AttributeError:
        return False
    return isinstance(params, dict) and params.get("modifier") == "idf"


def _datatype(config: Any) -> str:
    try:
        datatype = config["vectors"][""].get("datatype")
    except (KeyError, TypeError, AttributeError):
        return "float32"
    return datatype if datatype in edge_segments.VECTOR_DATATYPES else "float32"


def shard_config(dim: int, vectors: str, *, lexical: bool, new: bool) -> qe.EdgeConfig:
    """The configuration a shard is created (``new``) or loaded with. A loaded shard's config
    names no sparse vector: Edge keeps the ones the shard has."""
    dense = qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine, datatype=_DATATYPES[vectors])
    sparse = {LEXICAL_VECTOR: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)}
    return qe.EdgeConfig(
        vectors=dense,
        sparse_vectors=sparse if new and lexical else None,
        payload_memory=PAYLOAD_MEMORY,
        # No graph (m=0): see projections.episodic.edge_segments.
        hnsw_config=qe.HnswIndexConfig(
            m=0, ef_construct=100, full_scan_threshold=edge_segments.FULL_SCAN_KB
        ),
        optimizers=qe.EdgeOptimizersConfig(
            max_segment_size=edge_segments.SEGMENT_KB,
            indexing_threshold=edge_segments.INDEXING_KB,
        ),
        max_search_threads=edge_segments.SEARCH_THREADS,
    )


def ensure_indexes(shard: qe.EdgeShard) -> None:
    """agent_id: every read filters on it (``is_tenant`` lets the optimizer group an agent's
    points). seq: ``order_by`` refuses to sort on a field without a range index. level: reads
    that ask for some levels only match it by value. The rest serve a search's
    :class:`~projections.retrieval.filters.MemoryFilter` (see :mod:`projections.episodic.hybrid`
    for what they save); a shard from before them gets them when it is opened."""
    wanted: dict[str, Any] = {
        "agent_id": qe.KeywordIndexParams(is_tenant=True),
        "seq": qe.IntegerIndexParams(lookup=False, range=True),
        "level": qe.IntegerIndexParams(lookup=True, range=False),
        "tags_lc": qe.KeywordIndexParams(),
        "importance": qe.FloatIndexParams(),
        "year": qe.IntegerIndexParams(lookup=False, range=True),
        "step": qe.IntegerIndexParams(lookup=False, range=True),
        "occurred_ts": qe.FloatIndexParams(),
        "archived": qe.IntegerIndexParams(lookup=True, range=False),
    }
    existing = shard.info().payload_schema
    for field_name, params in wanted.items():
        if field_name not in existing:
            shard.update(qe.UpdateOperation.create_field_index(field_name, params))
