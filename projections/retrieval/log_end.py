"""Where the log ends, so a retrieval told to wait for a position the log does not hold is
answered at once instead of after its whole wait.

A position comes from publishing: the broker acknowledged the record, so the end of its
partition (the offset the partition's next record will get) is past it. A position at or past
the end, or on a partition that does not exist, was therefore not published to this log
(another deployment's position, a topic recreated since, a made-up offset), and no wait would
see the memory stores apply it. Asking the broker is the deployment's business (projections do
not talk to it): it injects a :data:`LogEnds`; without one, such a retrieval waits and answers
504 as any other late position does.

Ends are cached: a log only grows, so a position below a known end stays in the log, and the
broker is asked only about positions at or past the ends known. Lookups run one at a time, each
for every partition the retrievals waiting for it asked about; a retrieval takes the answer of
the first lookup that started after it arrived (an earlier one may predate the record it waits
for), so a burst of such retrievals costs two lookups in a row, not one each.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

Partition = tuple[str, int]
"""A topic and a partition of it."""

LogEnds = Callable[[Collection[Partition]], Awaitable[Mapping[Partition, int]]]
"""The end of each of these partitions: the offset its next record will get, exact (a lower
bound would refuse positions in the log). A partition left out does not exist."""

LOOKUP_TIMEOUT_S = 2.0
"""Longest a retrieval waits for a lookup (its turn included); past it, it waits for its
positions as it would without lookups."""


@dataclass(frozen=True)
class _Lookup:
    started: float
    partitions: frozenset[Partition]
    ends: Mapping[Partition, int] | None
    """None while it runs, and when it failed."""


class KnownLogEnds:
    """The log ends looked up so far, and lookups when a position is past them."""

    def __init__(self, lookup: LogEnds, *, timeout_s: float = LOOKUP_TIMEOUT_S) -> None:
        self._lookup = lookup
        self._timeout_s = timeout_s
        self._ends: dict[Partition, int] = {}
        """Partitions that exist only: made-up partition numbers are not kept."""
        self._asked: set[Partition] = set()
        """Partitions retrievals are waiting to have looked up."""
        self._last: _Lookup | None = None
        self._lock = asyncio.Lock()
        self.lookups = 0
        """Lookups started: the broker's share of the cost of these checks."""

    async def beyond(self, wanted: Mapping[Partition, int]) -> dict[Partition, int | None]:
        """The positions of ``wanted`` (an offset per partition) the log does not hold, each
        with the end of its partition (None: no such partition). Empty when every position is
        in the log, and when the ends cannot be looked up within the time limit: then nothing
        is known to be missing."""
        arrived = time.monotonic()
        unknown = frozenset(
            key for key, offset in wanted.items() if offset >= self._ends.get(key, 0)
        )
        if not unknown:
            return {}
        self._asked |= unknown
        try:
            async with asyncio.timeout(self._timeout_s):
                ends = await self._look_up(unknown, arrived)
        except TimeoutError:
            log.warning("log ends not looked up: no answer within %s s", self._timeout_s)
            return {}
        if ends is None:
            return {}
        return {
            key: ends.get(key)
            for key in sorted(unknown)
            if key not in ends or wanted[key] >= ends[key]
        }

    async def _look_up(
        self, partitions: frozenset[Partition], arrived: float
    ) -> Mapping[Partition, int] | None:
        """The ends from a lookup that started after ``arrived`` and covered ``partitions``:
        one that ran while this retrieval waited its turn, else a new one."""
        async with self._lock:
            last = self._last
            if last is not None and last.started >= arrived and last.partitions >= partitions:
                return last.ends
            covered = frozenset(self._asked | partitions)
            self._asked -= covered
            started = time.monotonic()
            self._last = _Lookup(started, covered, None)
            self.lookups += 1
            try:
                ends = await self._lookup(covered)
            except Exception as error:  # an unknown end only means waiting, as without lookups
                log.warning("log ends not looked up: %s", str(error) or type(error).__name__)
                return None
            for key, end in ends.items():
                self._ends[key] = max(end, self._ends.get(key, 0))
            self._last = _Lookup(started, covered, ends)
            return ends
