"""One embedded stack per data directory: a second `engram up` (or `engram demo`) on the same
directory cleared the running stack's Redis and Qdrant Edge files from under it at its start,
and archived its own log over the first one's at its end.

An advisory ``flock`` on ``DATA_DIR/stack.lock``, held from before the stack's directory is
cleared until the stack has stopped (its log archived). The kernel lets it go with the process,
however that ends, so a stack that was killed never blocks the next start; the file itself
stays, holding the pid of the last holder, which the refusal names.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from schemas.errors import EngramError

LOCK_FILE = "stack.lock"


class DataDirError(EngramError, RuntimeError):
    """The data directory cannot hold a stack; the message says why."""


class DataDirInUseError(DataDirError):
    """Another embedded stack runs on this data directory."""


class DataDirLock:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by children
        except OSError as exc:
            where = self.path.parent
            blocker = next(
                (d for d in (where, *where.parents) if d.exists() and not d.is_dir()), None
            )
            why = exc.strerror if blocker is None else f"{blocker} is a file"
            raise DataDirError(
                f"cannot keep a stack in {self.path.parent} ({why}): give --data-dir "
                "(ENGRAM_DATA_DIR) a directory"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise DataDirInUseError(
                f"another `engram up` or `engram demo` (pid {holder}) is running on "
                f"{self.path.parent}: stop it first, or give this one another data directory "
                "(--data-dir, ENGRAM_DATA_DIR)"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
