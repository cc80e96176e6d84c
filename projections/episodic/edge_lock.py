"""One opener per Qdrant Edge store directory, checked before Edge touches the shard.

Edge refuses a second opener of a shard by the lock on its write-ahead log, but only after it
has begun loading the shard: a second process's refused open (``engram serve`` pointed at the
directory ``engram up`` holds) removed a segment's tracker journal under the running holder,
whose every sync then failed ("Tracker journal ... is shorter than expected") and every batch
went through the store's retries. So the store takes an exclusive ``flock`` on a file beside
the shard first, and a second opener, in another process or in this one, is refused before
Edge reads a byte. The kernel drops the lock with its holder, so a crashed process never
leaves it behind.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from projections.interfaces import ProjectionError

__all__ = ["LOCK_FILE", "ShardLock"]

LOCK_FILE = "shard.lock"
"""Beside the shard directory, in the store's directory; it holds the holder's pid."""


class ShardLock:
    """An exclusive lock on a store directory, held from before its shard is opened until
    after it is closed."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def take(cls, directory: Path) -> ShardLock:
        """The lock, or a :class:`ProjectionError` naming the process that holds it."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ProjectionError(
                f"Qdrant Edge: the store at {directory} is open in another process (pid "
                f"{holder}) or store: Qdrant Edge lives inside one process. Stop that process, "
                "or give several processes a Qdrant server (ENGRAM_QDRANT_URL)"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        return cls(fd, path)

    def release(self) -> None:
        """Idempotent; closing the file releases the lock."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)
