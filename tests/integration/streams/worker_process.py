"""``engram worker`` as a real process, as a cluster runs it: configured by ``ENGRAM_*``
variables, stopped by signals, its output in a file the test shows when it fails."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from streams.settings import EngramSettings

ENGRAM = Path(sys.executable).with_name("engram")
"""The console script of the venv the tests run in."""


def worker_environment(
    settings: EngramSettings, kafka_bootstrap: str, redis_url: str
) -> dict[str, str]:
    """The variables that make ``engram worker`` run with ``settings`` (what a test computes
    its reference with), JSON logs, and no wall-clock ticks unless the settings ask for them."""
    assert settings.qdrant_path is not None, "a worker test needs its own Edge shard"
    ours = {
        "ENGRAM_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "ENGRAM_REDIS_URL": redis_url,
        "ENGRAM_REDIS_NAMESPACE": settings.redis_namespace,
        "ENGRAM_QDRANT_PATH": str(settings.qdrant_path),
        "ENGRAM_DATA_DIR": str(settings.data_dir),
        "ENGRAM_TOPIC_PREFIX": settings.topic_prefix,
        "ENGRAM_APP_ID": settings.app_id,
        "ENGRAM_PARTITIONS": str(settings.partitions),
        "ENGRAM_SCHEDULE_INTERVAL": str(settings.schedule_interval),
        "ENGRAM_BATCH_WITHIN": str(settings.batch_within),
        "ENGRAM_SESSION_TIMEOUT": str(settings.session_timeout),
        "ENGRAM_LOG_FORMAT": "json",
        "ENGRAM_LOG_LEVEL": "info",
        "ENGRAM_METRICS_PORT": "0",  # tests run several workers on one host
    }
    return {**os.environ, **ours}


class WorkerProcess:
    """One ``engram worker`` process at a time (or another role: ``project``, ``serve``);
    :meth:`start` again after a kill or a stop runs a new one, appending to the same output
    file."""

    def __init__(
        self,
        env: dict[str, str],
        output: Path,
        *,
        role: str = "worker",
        as_user: Sequence[str] = (),
        cwd: Path | None = None,
    ) -> None:
        """``role``: the ``engram`` command (``worker``, ``serve``); ``as_user``: a command
        that runs it as another user (``setpriv ...``); ``cwd``: where it runs (default: beside
        the output file)."""
        self.env = env
        self.output = output
        self.role = role
        self.as_user = list(as_user)
        self.cwd = cwd or output.parent
        self.process: subprocess.Popen[bytes] | None = None
        self._file: TextIO | None = None
        self.started = 0

    def start(self) -> None:
        assert self.process is None or self.process.poll() is not None, "already running"
        self.started += 1
        self._file = self.output.open("a")
        self._file.write(f"----- {self.role} start #{self.started} -----\n")
        self._file.flush()
        self.process = subprocess.Popen(
            [*self.as_user, str(ENGRAM), self.role],
            env=self.env,
            stdout=self._file,
            stderr=subprocess.STDOUT,
            cwd=self.cwd,
        )

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: nothing of the process runs after it, no flush, no commit."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self._close()

    def terminate(self, timeout: float, sig: signal.Signals = signal.SIGTERM) -> int | None:
        """SIGTERM (or ``sig``), then the exit code within ``timeout`` seconds (None: still
        running)."""
        assert self.process is not None
        self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        finally:
            if self.process.poll() is not None:
                self._close()

    def exit_code(self, timeout: float) -> int:
        """The code the process exits with by itself within ``timeout`` seconds; fails with
        the output (a stop still running after 30 s has logged where it waits) otherwise."""
        assert self.process is not None
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the {self.role} had not exited {timeout:.0f} s on:\n{self.tail()}"
            ) from None

    def stop(self) -> None:
        """Whatever state it is in, no process is left behind."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)
        self._close()

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def check_alive(self) -> None:
        """Fail with the output if the process has exited by itself."""
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(
                f"the {self.role} exited with code {self.process.returncode}:\n{self.tail()}"
            )

    def tail(self, lines: int = 60) -> str:
        if not self.output.exists():
            return "(no output)"
        return "\n".join(self.output.read_text(errors="replace").splitlines()[-lines:])

    def log_records(self) -> list[dict[str, Any]]:
        """The JSON log lines of every run so far (Faust's own non-JSON lines are left out)."""
        records: list[dict[str, Any]] = []
        for line in self.output.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    records.append(json.loads(line))
                except ValueError:
                    continue
        return records
