"""The embedded dev stack: a local broker and a local redis-server, started and stopped together.

Qdrant Edge needs no server: it runs inside the Engram process on a directory. The broker keeps
its log in memory, so the stack starts its projections empty too: projections must never hold
what the log does not (DESIGN.md, invariant 1).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from streams.devstack.broker import TansuBroker
from streams.devstack.redis_server import RedisServer
from streams.runtime import Endpoints


@dataclass
class DevStack:
    data_dir: Path
    broker: TansuBroker = field(init=False)
    redis: RedisServer = field(init=False)

    def start(self) -> Endpoints:
        stack_dir = (self.data_dir / "stack").resolve()
        if stack_dir.exists():
            shutil.rmtree(stack_dir)
        stack_dir.mkdir(parents=True)
        self.broker = TansuBroker().start()
        try:
            (stack_dir / "redis").mkdir()
            self.redis = RedisServer(stack_dir / "redis").start()
        except Exception:
            self.broker.stop()
            raise
        return Endpoints(kafka_bootstrap=self.broker.bootstrap, redis_url=self.redis.url)

    @property
    def edge_path(self) -> Path:
        return (self.data_dir / "stack" / "qdrant-edge").resolve()

    def stop(self) -> None:
        try:
            self.redis.stop()
        finally:
            self.broker.stop()

    def __enter__(self) -> Endpoints:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
