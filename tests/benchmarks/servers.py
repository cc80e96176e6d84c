"""Fresh servers for one benchmark run (a new broker each time: Tansu keeps everything in RAM)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from streams.runtime.devstack.broker import TansuBroker
from streams.runtime.devstack.redis_server import RedisServer


@contextlib.contextmanager
def fresh_servers() -> Iterator[tuple[str, str]]:
    with TansuBroker() as broker, RedisServer() as redis:
        yield broker.bootstrap, redis.url


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]
