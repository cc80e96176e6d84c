"""``engram worker`` as a process of its own, restarted when it exits, as an orchestrator would.

Workers are crash-only: a batch they cannot finish makes them exit (code 70) without committing
it, and their replacement resumes from the log. In a test that exit must not take pytest down,
and someone must play the orchestrator: :class:`SupervisedWorker` restarts the process (a
bounded number of times) and keeps every run's exit code and log for the assertions and the
failure message.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from streams.settings import EngramSettings


def worker_command() -> list[str]:
    """The installed ``engram`` entry point of this interpreter's environment."""
    script = Path(sys.executable).with_name("engram")
    if script.is_file():
        return [str(script), "worker"]
    return [sys.executable, "-m", "streams.cli.main", "worker"]


def worker_env(settings: EngramSettings, bootstrap: str, redis_url: str) -> dict[str, str]:
    """The ``ENGRAM_*`` variables that make a worker process run with ``settings``."""
    values = {
        "KAFKA_BOOTSTRAP": bootstrap,
        "REDIS_URL": redis_url,
        "REDIS_NAMESPACE": settings.redis_namespace,
        "TOPIC_PREFIX": settings.topic_prefix,
        "APP_ID": settings.app_id,
        "PARTITIONS": str(settings.partitions),
        "QDRANT_PATH": str(settings.edge_path()),
        "DATA_DIR": str(settings.data_dir),
        "BATCH_SIZE": str(settings.batch_size),
        "BATCH_WITHIN": str(settings.batch_within),
        "SCHEDULE_INTERVAL": str(settings.schedule_interval),
        "SESSION_TIMEOUT": str(settings.session_timeout),
        "LOG_LEVEL": "info",
    }
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    return inherited | {f"ENGRAM_{k}": v for k, v in values.items()}


@dataclass
class Run:
    log_path: Path
    exit_code: int | None = None


@dataclass
class SupervisedWorker:
    env: dict[str, str]
    log_dir: Path
    max_restarts: int = 5
    runs: list[Run] = field(default_factory=list)
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _log: IO[bytes] | None = field(default=None, init=False)
    _watcher: asyncio.Task[None] | None = field(default=None, init=False)

    @property
    def restarts(self) -> int:
        return max(0, len(self.runs) - 1)

    @property
    def crash_codes(self) -> list[int]:
        """Exit codes of the runs that ended without being asked to."""
        return [r.exit_code for r in self.runs[:-1] if r.exit_code is not None]

    def _spawn(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        run = Run(self.log_dir / f"worker-{len(self.runs) + 1}.log")
        self._log = run.log_path.open("wb")
        self._process = subprocess.Popen(
            worker_command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.log_dir,
            start_new_session=True,
        )
        self.runs.append(run)

    def start(self) -> SupervisedWorker:
        self._spawn()
        self._watcher = asyncio.create_task(self._watch())
        return self

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            process = self._process
            if process is None or process.poll() is None:
                continue
            self._close_run(process.returncode)
            if self.restarts >= self.max_restarts:
                return
            self._spawn()

    def _close_run(self, code: int) -> None:
        self.runs[-1].exit_code = code
        if self._log is not None:
            self._log.close()
            self._log = None
        self._process = None

    @property
    def gave_up(self) -> bool:
        return self._watcher is not None and self._watcher.done()

    async def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (the worker drains, flushes and commits), SIGKILL if it does not exit."""
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(process.wait, timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                await asyncio.to_thread(process.wait, timeout)
        self._close_run(process.returncode)
        return process.returncode

    def log_tails(self, lines: int = 15) -> str:
        parts = []
        for i, run in enumerate(self.runs, 1):
            text = run.log_path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- run {i} (exit {run.exit_code}) ---\n" + "\n".join(text))
        return "\n".join(parts)

    def grep(self, needle: str) -> int:
        """How many lines of all runs' logs mention ``needle``."""
        return sum(
            needle in line
            for run in self.runs
            for line in run.log_path.read_text(errors="replace").splitlines()
        )
