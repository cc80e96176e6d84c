"""One embedded stack per data directory, and never a stale lock: the kernel lets it go with
the process that held it, however that process ended."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from streams.runtime.devstack.data_dir_lock import DataDirError, DataDirInUseError, DataDirLock
from streams.runtime.devstack.stack import DevStack


def test_a_second_holder_is_refused_with_the_first_ones_pid_until_it_lets_go(
    tmp_path: Path,
) -> None:
    first, second = DataDirLock(tmp_path), DataDirLock(tmp_path)
    first.acquire()
    with pytest.raises(DataDirInUseError, match=rf"\(pid {os.getpid()}\) is running on"):
        second.acquire()
    first.release()
    second.acquire()
    second.release()


def test_a_stack_refused_the_directory_leaves_the_running_stacks_files_alone(
    tmp_path: Path,
) -> None:
    (tmp_path / "stack" / "redis").mkdir(parents=True)
    (tmp_path / "stack" / "redis" / "dump.rdb").write_text("the running stack's")
    held = DataDirLock(tmp_path)
    held.acquire()
    try:
        with pytest.raises(DataDirInUseError):
            DevStack(tmp_path).start()
    finally:
        held.release()
    assert (tmp_path / "stack" / "redis" / "dump.rdb").read_text() == "the running stack's"


def test_the_lock_of_a_killed_process_is_free(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from pathlib import Path\n"
            "from streams.runtime.devstack.data_dir_lock import DataDirLock\n"
            f"DataDirLock(Path({str(tmp_path)!r})).acquire()\n"
            "print('held', flush=True)\n"
            "time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(DataDirInUseError, match=rf"\(pid {holder.pid}\)"):
            DataDirLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.communicate(timeout=10)
    lock = DataDirLock(tmp_path)
    lock.acquire()
    lock.release()


def test_a_data_dir_under_a_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "notes").write_text("a file")
    with pytest.raises(DataDirError, match=rf"{tmp_path / 'notes'} is a file"):
        DataDirLock(tmp_path / "notes" / "demo").acquire()
