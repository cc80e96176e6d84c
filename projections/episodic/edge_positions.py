"""The applied positions of an Edge store: a JSON file beside its shard, replaced atomically."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from projections.interfaces import ProjectionError

logger = logging.getLogger(__name__)

Positions = dict[tuple[str, int], int]


def read_positions(file: Path) -> Positions:
    """A missing file means nothing applied yet. A damaged one cannot come from the write
    protocol above, but if it does, starting over is safe (apply is idempotent), only slower."""
    try:
        data = json.loads(file.read_bytes())
        return {(str(p["topic"]), int(p["partition"])): int(p["offset"]) for p in data["positions"]}
    except FileNotFoundError:
        return {}
    except (ValueError, KeyError, TypeError) as exc:
        logger.warning(
            "ignoring damaged %s (%s): the log will be replayed from the start", file, exc
        )
        return {}


def write_positions(file: Path, positions: Positions) -> None:
    body = json.dumps(
        {
            "version": 1,
            "positions": [
                {"topic": topic, "partition": partition, "offset": offset}
                for (topic, partition), offset in sorted(positions.items())
            ],
        }
    ).encode()
    temporary = file.with_name(file.name + ".tmp")
    try:
        with temporary.open("wb") as fh:
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temporary, file)
        directory = os.open(file.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    except OSError as exc:
        raise ProjectionError(f"Qdrant Edge: writing positions to {file} failed: {exc}") from exc
