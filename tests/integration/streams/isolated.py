"""Settings for an Engram node that shares the session's servers but nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streams.settings import EngramSettings


def isolated_settings(prefix: str, data_dir: Path, **overrides: Any) -> EngramSettings:
    """Own topics (and so consumer group), Redis namespace and Edge shard; an ephemeral port."""
    values: dict[str, Any] = {
        "topic_prefix": prefix,
        "redis_namespace": prefix.rstrip("."),
        "qdrant_path": data_dir / "edge",
        "data_dir": data_dir,
        "partitions": 2,
        "http_port": 0,
        "batch_within": 0.02,
    }
    return EngramSettings(**(values | overrides))
