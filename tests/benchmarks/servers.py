"""Fresh servers for one benchmark run (a new broker each time: Tansu keeps everything in RAM)."""

from __future__ import annotations

import contextlib
import gc
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from streams.runtime.collector import tune_collector
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


@contextlib.contextmanager
def engram_collector() -> Iterator[None]:
    """The garbage collector as every ``engram`` command tunes it
    (:mod:`streams.runtime.collector`), for an Engram node run inside a benchmark's process;
    the thresholds from before again afterwards, for what runs next (the naive baseline)."""
    before = gc.get_threshold()
    tune_collector()
    try:
        yield
    finally:
        gc.set_threshold(*before)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]
