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
def engram_process(
    args: list[str], data_dir: Path, *, session: bool = False
) -> Iterator[subprocess.Popen[str]]:
    """``engram <args>`` with its data in ``data_dir``, as it starts; killed on leaving if it
    still runs, and with it whatever processes of its stack a failed test left (they would load
    the machine for every test after it). ``session``: in a process group of its own, as a
    terminal starts a command (see :func:`signal_as_a_user`)."""
    process = subprocess.Popen(
        [*ENGRAM, *args],
        env={**os.environ, "ENGRAM_DATA_DIR": str(data_dir)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=session,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        if process.stdout is not None:
            process.stdout.close()
        for pid in stack_processes(data_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def signalled_once_started(
    args: list[str],
    data_dir: Path,
    delay: float = 0.0,
    sig: signal.Signals = signal.SIGTERM,
    times: int = 1,
) -> tuple[int, str, list[int]]:
    """``sig`` to ``engram <args>`` ``delay`` seconds after its broker runs (``times`` times,
    0.3 s apart): its exit code, its output, and the processes of its stack still there once it
    ended (sent as :func:`signal_as_a_user` sends it)."""
    with engram_process(args, data_dir, session=True) as process:
        deadline = time.monotonic() + 60
        while not set(stack_processes(data_dir)) - {process.pid}:  # the broker comes first
            assert process.poll() is None
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(delay)
        for n in range(times):
            time.sleep(0.3 if n else 0.0)
            signal_as_a_user(process, sig)
        code = process.wait(120)
        assert process.stdout is not None
        return code, process.stdout.read(), stack_processes(data_dir)


def signal_as_a_user(process: subprocess.Popen[str], sig: signal.Signals) -> None:
    """SIGINT and SIGHUP as a terminal sends them (Ctrl-C, the terminal closed), to the whole
    process group (``process`` started with ``session=True``): whatever of the stack is in that
    group gets them too. Other signals to the process alone, as ``kill`` or an orchestrator
    sends them."""
    if sig in (signal.SIGINT, signal.SIGHUP):
        os.killpg(process.pid, sig)
    else:
        process.send_signal(sig)


@contextlib.contextmanager
def engram_up(
    data_dir: Path, port: int, workers: int
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``engram up`` running until its banner says it is up (:func:`engram_process`)."""
    with engram_process(["up", "--port", str(port), "--workers", str(workers)], data_dir) as up:
        yield up, output_until(up, "Ctrl-C stops")


def output_until(process: subprocess.Popen[str], marker: str, within: float = 90) -> str:
    """The output of ``process`` up to the first line holding ``marker`` (at most ``within``
    seconds; a process that exits first fails the test with its output)."""
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + within
    while not any(marker in line for line in lines):
        assert time.monotonic() < deadline, "".join(lines)
        assert process.poll() is None, "".join(lines) + process.stdout.read()
        lines.append(process.stdout.readline())
    return "".join(lines)


def stack_processes(data_dir: Path) -> list[int]:
    """``engram up`` of ``data_dir`` and the processes it started (the broker, redis-server, the
    workers), found by the data directory in their environment, or in their working directory
    (redis-server rewrites its process title over its environment): they outlive an ``up``
    killed or ended at once by a signal."""
    marker = f"ENGRAM_DATA_DIR={data_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        inside = cwd == str(data_dir) or cwd.startswith(f"{data_dir}/")
        if inside or any(v == marker or v.startswith(marker + b"/") for v in environ.split(b"\0")):
            found.append(int(entry.name))
    return found
