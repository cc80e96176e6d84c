"""Which partition numbers a worker may process while its consumer group rebalances.

A worker must never derive a partition's records once another worker may have taken it over:
the new owner folds the partition from the log, and what a batch still in flight logs after
that read is derived twice (both batches' markers cover their copies). Two windows allow it
unless closed here:

- **A batch in flight at the revocation.** Faust does not wait for it (the worker's streams do
  not wait empty), and the group may hand the partitions over as soon as every member rejoined.
  So the revocation handler waits for the batch in flight (bounded) before it releases the
  partitions and lets the consumer rejoin: the batch's marker is logged before any new owner
  can read the log.
- **A batch started during the rebalance.** Between the revocation and the new assignment the
  consumer still reports the old assignment, and records fetched before the revocation may
  still make a batch. Such a batch waits (bounded) for the assignment, and derives only the
  records of partitions assigned again; the others are kept out of the commit (the Faust
  shell's ``uncommitted``), so their new owner reads them.

Releasing between batches also keeps a batch's own bookkeeping (its state carried forward,
its snapshot) from touching a partition released under it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from schemas.errors import EngramError


class RebalanceTimeoutError(EngramError):
    """A rebalance did not settle in time; the worker exits rather than risk deriving a
    partition another worker owns (crash-only: its replacement resumes from the log)."""


@dataclass
class Ownership:
    revoked: set[int] = field(default_factory=set)
    """Partition numbers revoked and not assigned since: none of their records is derived."""
    _settled: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when no revocation waits for its assignment."""
    _idle: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when no batch is in flight."""

    def __post_init__(self) -> None:
        self._settled.set()
        self._idle.set()

    @contextlib.contextmanager
    def in_flight(self) -> Iterator[None]:
        """Hold while a batch derives, logs and applies."""
        self._idle.clear()
        try:
            yield
        finally:
            self._idle.set()

    async def between_batches(self, within: float) -> None:
        """Return once no batch is in flight; nothing runs between this returning and the
        caller's next statement, so a release that follows cannot fall inside a batch."""
        deadline = time.monotonic() + within
        while not self._idle.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RebalanceTimeoutError(f"the batch in flight did not end within {within:.1f}s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), remaining)

    def revoke(self, partitions: set[int]) -> None:
        """Call between batches (:meth:`between_batches`)."""
        self.revoked |= partitions
        self._settled.clear()

    def assign(self, partitions: set[int]) -> None:
        self.revoked -= partitions
        self._settled.set()

    async def owned(
        self, partitions: set[int], within: float, stopping: Callable[[], bool]
    ) -> set[int]:
        """Which of ``partitions`` a batch may derive: if some were revoked and the group has
        not assigned partitions since, once it has (or, when the worker stops meanwhile, none
        of the revoked ones)."""
        deadline = time.monotonic() + within
        while partitions & self.revoked and not self._settled.is_set() and not stopping():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RebalanceTimeoutError(f"no assignment within {within:.1f}s of a revocation")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._settled.wait(), min(remaining, 0.1))
        return partitions - self.revoked
