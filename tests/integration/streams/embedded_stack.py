"""``engram up`` as a subprocess, for the tests that drive the embedded stack as a user does."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ENGRAM = [sys.executable, "-m", "streams.cli.main"]


@contextlib.contextmanager
def up_process(data_dir: Path, port: int, workers: int) -> Iterator[subprocess.Popen[str]]:
    """``engram up`` as it starts; killed on leaving if it still runs, and with it whatever
    processes of its stack a failed test left (they would load the machine for every test
    after it)."""
    up = subprocess.Popen(
        [*ENGRAM, "up", "--port", str(port), "--workers", str(workers)],
        env={**os.environ, "ENGRAM_DATA_DIR": str(data_dir)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield up
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(10)
        if up.stdout is not None:
            up.stdout.close()
        for pid in stack_processes(data_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def engram_up(
    data_dir: Path, port: int, workers: int
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``engram up`` running until its banner says it is up (:func:`up_process`)."""
    with up_process(data_dir, port, workers) as up:
        assert up.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 90
        while not any("Ctrl-C stops" in line for line in lines):
            assert time.monotonic() < deadline, "".join(lines)
            assert up.poll() is None, "".join(lines) + up.stdout.read()
            lines.append(up.stdout.readline())
        yield up, "".join(lines)


def stack_processes(data_dir: Path) -> list[int]:
    """``engram up`` of ``data_dir`` and the processes it started (the broker, redis-server, the
    workers), found by the data directory in their environment: they outlive an ``up`` killed
    or ended at once by a signal."""
    marker = f"ENGRAM_DATA_DIR={data_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if any(v == marker or v.startswith(marker + b"/") for v in environ.split(b"\0")):
            found.append(int(entry.name))
    return found
