"""Children armed to die with their parent: only from the main thread, since the kernel ties
the signal to the starting thread, not the process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from streams.runtime.devstack.child_process import dies_with_parent


def test_no_arming_from_another_thread() -> None:
    got: list[object] = []
    thread = threading.Thread(target=lambda: got.append(dies_with_parent()))
    thread.start()
    thread.join()
    assert got == [None]


def running(pid: int) -> bool:
    """Alive and not a zombie (one that whoever adopted it has not reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(") ", 1)[1].split(" ", 1)[0] != "Z"


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_goes_with_its_killed_parent() -> None:
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess\n"
            "from streams.runtime.devstack.child_process import dies_with_parent\n"
            "child = subprocess.Popen(['sleep', '60'], start_new_session=True,"
            " preexec_fn=dies_with_parent())\n"
            "print(child.pid, flush=True)\n"
            "child.wait()\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    parent.kill()
    parent.communicate(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not running(child):
            return
        time.sleep(0.05)
    os.kill(child, signal.SIGKILL)
    raise AssertionError("the child outlived its killed parent")
