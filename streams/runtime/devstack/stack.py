"""The embedded dev stack: a local broker and a local redis-server, started and stopped together.

Qdrant Edge needs no server: it runs inside the Engram process on a directory. The broker keeps
its log in memory, so the stack starts its projections empty too: projections must never hold
what the log does not (streams/README.md, invariant 1).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from schemas.errors import EngramError
from streams.runtime.devstack.broker import TansuBroker
from streams.runtime.devstack.child_process import dies_with_parent
from streams.runtime.devstack.data_dir_lock import DataDirLock
from streams.runtime.devstack.redis_server import RedisServer
from streams.runtime.node import Endpoints


class DevStackError(EngramError, RuntimeError):
    """The stack cannot start where it was asked to; the message says what to change."""


_WORKER = re.compile(r"worker-\d+")


def _made_by_a_stack(stack_dir: Path) -> bool:
    """Whether a directory holds only what a stack writes (its Redis, its Qdrant Edge shard,
    its worker processes' directories): the start deletes it, so a directory of the user's
    that happens to be named "stack" must be refused, not deleted."""
    return stack_dir.is_dir() and all(
        entry.is_dir() and (entry.name in ("redis", "qdrant-edge") or _WORKER.fullmatch(entry.name))
        for entry in stack_dir.iterdir()
    )


@dataclass
class DevStack:
    data_dir: Path
    broker: TansuBroker = field(init=False)
    redis: RedisServer = field(init=False)
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    lock: DataDirLock = field(init=False)
    """Held from start to stop: one stack per data directory."""

    def __post_init__(self) -> None:
        self.lock = DataDirLock(self.data_dir)

    def start(self) -> Endpoints:
        self.lock.acquire()
        try:
            return self._start()
        except BaseException:
            self.lock.release()
            raise

    def _start(self) -> Endpoints:
        stack_dir = (self.data_dir / "stack").resolve()
        if stack_dir.exists():
            if not _made_by_a_stack(stack_dir):
                raise DevStackError(
                    f"{stack_dir} exists and was not made by `engram up`, which clears it at "
                    "every start: choose another --data-dir (ENGRAM_DATA_DIR)"
                )
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

    def start_workers(self, count: int, endpoints: Endpoints) -> None:
        """Extra ``engram worker`` processes in the same consumer group. They write working
        memory; episodic memory is then written by the projector of the main process, the one
        that holds the Qdrant Edge shard."""
        for i in range(count):
            env = self.worker_environment(i + 1, endpoints)
            # Out of the terminal's process group (as the broker and redis-server): Ctrl-C is
            # for `engram up`, which stops the workers with SIGTERM; a worker still importing
            # would print a KeyboardInterrupt traceback.
            worker = [sys.executable, "-m", "streams.cli.main", "worker"]
            self.workers.append(
                subprocess.Popen(
                    worker, env=env, start_new_session=True, preexec_fn=dies_with_parent()
                )
            )

    def worker_environment(self, number: int, endpoints: Endpoints) -> dict[str, str]:
        """The environment of extra worker ``number`` (from 1): this process's, pointed at the
        stack."""
        env = {
            **os.environ,
            "ENGRAM_KAFKA_BOOTSTRAP": endpoints.kafka_bootstrap,
            "ENGRAM_REDIS_URL": endpoints.redis_url,
            "ENGRAM_EPISODIC_WRITER": "projector",
            "ENGRAM_METRICS_PORT": "0",  # several workers on one host: each its own port
            "ENGRAM_DATA_DIR": str((self.data_dir / "stack" / f"worker-{number}").resolve()),
        }
        if os.environ.get("ENGRAM_INSTANCE_ID"):
            # One id per member: two members of one id would each take every partition on a
            # broker that does not fence the older one (Tansu does not).
            env["ENGRAM_INSTANCE_ID"] = f"{os.environ['ENGRAM_INSTANCE_ID']}-worker-{number}"
        return env

    def processes(self) -> dict[str, subprocess.Popen[bytes]]:
        """Every process the stack started, by what it is: `engram up` stops when any exits,
        rather than serve on without its broker or its Redis."""
        servers = {"the broker": self.broker.process, "redis-server": self.redis.process}
        named = {name: process for name, process in servers.items() if process is not None}
        named.update({f"worker process {i}": w for i, w in enumerate(self.workers, start=1)})
        return named

    def stop_workers(self, timeout: float = 30.0) -> None:
        """SIGTERM: each worker finishes its batch, flushes and commits; then kill stragglers."""
        for worker in self.workers:
            if worker.poll() is None:
                worker.terminate()
        for worker in self.workers:
            try:
                worker.wait(timeout)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(5)
        self.workers.clear()

    def kill(self) -> None:
        """Every process of the stack down at once (SIGKILL): what the broker holds in memory
        and was not archived is lost."""
        for worker in self.workers:
            worker.kill()
        for server in (getattr(self, "redis", None), getattr(self, "broker", None)):
            if server is not None:
                server.kill()

    def stop(self) -> None:
        try:
            self.stop_workers()
            try:
                self.redis.stop()
            finally:
                self.broker.stop()
        finally:
            self.lock.release()

    def __enter__(self) -> Endpoints:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
