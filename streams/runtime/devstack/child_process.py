"""Child processes that do not outlive the process that started them.

The dev stack's broker, redis-server and extra workers run in sessions of their own (Ctrl-C in
the terminal is for `engram up`, which stops them in order). So when `engram up` itself was
killed (SIGKILL, the OOM killer), nothing stopped them: the broker and redis-server ran on
orphaned, and the workers retried a broker that held nothing, for good. On Linux the kernel
can send a child a signal when its parent ends (``PR_SET_PDEATHSIG``); a child armed with
SIGKILL goes with `engram up` however it ends. Elsewhere nothing changes.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def dies_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` for :class:`subprocess.Popen` that arms the child with SIGKILL on its
    parent's end; None where it cannot apply. Only from the main thread: the kernel ties the
    signal to the thread that started the child, so a server started from a passing thread
    would die with that thread."""
    if sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the child
    parent = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if os.getppid() != parent:  # the parent ended before the child was armed
            os.kill(os.getpid(), signal.SIGKILL)

    return arm
