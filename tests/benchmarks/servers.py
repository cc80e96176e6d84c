"""Fresh servers for one benchmark run (a new broker each time: Tansu keeps everything in RAM)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from streams.runtime.devstack.broker import TansuBroker
from streams.runtime.devstack.redis_server import RedisServer


@contextlib.contextmanager
def fresh_servers() -> Iterator[tuple[str, str]]:
    with TansuBroker() as broker, RedisServer() as redis:
        yield broker.bootstrap, redis.url


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A directory for one run's stores, deleted afterwards: a shard of 100,000 points takes
    ~0.4 GB and a million ~3 GB, which runs left behind filled the disk."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]
