"""Opening a Qdrant Edge shard: one opener per store directory, checked before Edge touches
the shard, and Edge's failures translated at the boundary.

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

import contextlib
import fcntl
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import qdrant_edge as qe

from projections.episodic.edge_config import ensure_indexes, shard_config, stored_layout
from projections.interfaces import ProjectionError

__all__ = ["HELD", "LOCK_FILE", "ShardLock", "edge_errors", "let_go", "open_shard"]

HELD = "the shard is held by another process or store"
"""What a refused opener is told, by the lock or by Edge's own."""

LOCK_FILE = "shard.lock"
"""Beside the shard directory, in the store's directory; it holds the holder's host and pid."""


class ShardLock:
    """An exclusive lock on a store directory, held from before its shard is opened until
    after it is closed."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def take(cls, directory: Path) -> ShardLock:
        """The lock, or a :class:`ProjectionError` naming the process that holds it (or why
        the directory could not be locked)."""
        path = directory / LOCK_FILE
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ProjectionError(
                f"Qdrant Edge: opening the store at {directory} failed: {exc.strerror or exc}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 256, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ProjectionError(_held(directory, holder, path in _HELD_HERE)) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{socket.gethostname()} pid {os.getpid()}".encode(), 0)
        _HELD_HERE.add(path)
        return cls(fd, path)

    def release(self) -> None:
        """Idempotent; closing the file releases the lock."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            _HELD_HERE.discard(self.path)
            os.close(fd)


_HELD_HERE: set[Path] = set()
"""The lock files this process holds: a pid does not tell, as every container's first process
is pid 1."""


def let_go(shard: qe.EdgeShard, lock: ShardLock) -> None:
    """What a store dropped unclosed does when it is collected: as Edge's own lock did, it lets
    go of its directory, but only after closing the shard (a finalizer runs before the store's
    attributes go, so the shard would still be open when the lock was let go)."""
    with contextlib.suppress(Exception):
        shard.close()
    lock.release()


def _held(directory: Path, holder: str, here: bool) -> str:
    if here:
        return (
            f"Qdrant Edge: opening the store at {directory} failed ({HELD}: this process, "
            "whose store there is not closed yet)"
        )
    return (
        f"Qdrant Edge: opening the store at {directory} failed ({HELD}: {holder}): Qdrant "
        "Edge lives inside one process. Stop that process, or give several processes a Qdrant "
        "server (ENGRAM_QDRANT_URL)"
    )


@contextmanager
def edge_errors(doing: str) -> Iterator[None]:
    """Translate Edge failures at the boundary: it raises bare ``Exception`` (and ``ValueError``)
    for everything, from a closed shard to a bad dimension, so nothing narrower would do. Its
    "WouldBlock" on a locked write-ahead log alone would not say that a shard is open already."""
    try:
        yield
    except ProjectionError:
        raise
    except Exception as exc:
        held = "WouldBlock" in str(exc)
        cause = f" ({HELD})" if held else ""
        raise ProjectionError(f"Qdrant Edge: {doing} failed{cause}: {exc}") from exc


def open_shard(shard_path: Path, dim: int, vectors: str) -> tuple[qe.EdgeShard, bool, str]:
    """The shard, loaded with its own layout or created; (shard, lexical, vectors)."""
    with edge_errors(f"opening the shard at {shard_path}"):
        lexical = True
        if (shard_path / "edge_config.json").exists():
            layout = stored_layout(shard_path)
            lexical, vectors = layout.lexical, layout.vectors
            config = shard_config(dim, vectors, lexical=lexical, new=False)
            shard = qe.EdgeShard.load(str(shard_path), config)
        else:
            config = shard_config(dim, vectors, lexical=True, new=True)
            shard = qe.EdgeShard.create(str(shard_path), config)
        try:
            ensure_indexes(shard)
            shard.flush()
        except Exception:
            shard.close()
            raise
    return shard, lexical, vectors
