"""Gaps in a source partition, settled with the broker before a batch derives across them.

:func:`processors.source_order.in_source_order` says where a partition's next record is not
the one its mark says comes next. Here the worker asks the broker what lies in between
(:func:`streams.eventlog.first_record.first_record_at`): nothing, and the gap is the log's own
and is derived across; records, and the partition is held back from the gap on, to be read
again in order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from processors.batch import RawRecord
from processors.batch_markers import SourceKey
from processors.source_order import Gap, in_source_order
from processors.state_fold import FoldedState

log = logging.getLogger("engram.ingest")

FirstRecordAt = Callable[[str, int, int], Awaitable[int | None]]
"""``(topic, partition, offset)`` -> the offset of the first record there at or after
``offset`` (None: the broker did not say)."""

Hold = Callable[[Mapping[SourceKey, int], Mapping[SourceKey, int]], Awaitable[None]]
"""Told, per source partition held back, the first offset left out of the batch (to keep out
of the commit) and where the consumer must read again from."""


PROBES_AT_ONCE = 8
"""Questions to the broker in flight at once, each on a consumer of its own."""


@dataclass(frozen=True)
class Settled:
    records: list[RawRecord]
    """The batch's records a worker may take now (see :class:`SourceOrder`)."""
    first_held: dict[SourceKey, int]
    """Per partition held back, its first record left out."""
    rewind_to: dict[SourceKey, int]
    """Per partition held back, where the consumer must read again from."""
    held_back: int = 0
    """Records of the batch left out for being held back (duplicates dropped are not)."""


def marks_of(records: Sequence[RawRecord], folded: FoldedState) -> Mapping[SourceKey, int]:
    """Where each source partition of ``records`` was derived up to. A source with no mark in
    a partition number whose derived log holds events starts at its first record here: a log
    written before markers kept no mark of sources that derive no recording (the
    retrievals), and the committed offset, where that record comes from, is the truth there.
    In a log still empty, every source starts at 0."""
    marks = folded.derived_upto
    unmarked = {(r.topic, r.partition) for r in records} - marks.keys()
    if not unmarked:
        return marks
    logged = {p for _, p in folded.log_ends}
    first: dict[SourceKey, int] = {}
    for r in records:
        key = (r.topic, r.partition)
        if key in unmarked and r.partition in logged:
            first[key] = min(first.get(key, r.offset), r.offset - 1)
    return {**marks, **first} if first else marks


async def settle_gaps(
    records: Sequence[RawRecord], folded: FoldedState, first_record_at: FirstRecordAt | None
) -> Settled:
    """The records that continue their source partitions from the marks. Without
    ``first_record_at`` every gap is taken as the log's own (as the consumer's order was
    trusted before).

    A batch that continues every mark (all but around a rebalance) costs one pass: the
    sources without a mark (:func:`marks_of`) are looked at only when a gap shows, since a
    mark they would get only moves their expected start up to their first record."""
    order = in_source_order(records, folded.derived_upto)
    if not order.gaps:
        return Settled(order.records, {}, {})
    marks = marks_of(records, folded)
    accepted: set[Gap] = set()
    held: dict[SourceKey, Gap] = {}
    at_once = asyncio.Semaphore(PROBES_AT_ONCE)
    while True:
        order = in_source_order(records, marks, accepted, held)
        if not order.gaps:
            break
        # One question per partition with a gap, asked together (up to PROBES_AT_ONCE): after
        # a rebalance many partitions can show one, and each question opens a consumer.
        answers = await asyncio.gather(*(_asked(g, first_record_at, at_once) for g in order.gaps))
        for gap, the_logs in zip(order.gaps, answers, strict=True):
            if the_logs:
                accepted.add(gap)
            else:
                held[gap.key] = gap
    first_held = {key: gap.found for key, gap in held.items()}
    held_back = sum(
        1 for r in records if r.offset >= first_held.get((r.topic, r.partition), r.offset + 1)
    )
    return Settled(order.records, first_held, order.held, held_back)


ANSWERS_KEPT_S = 5.0
"""How long an answer of the broker is reused for the same question."""


@dataclass
class RememberedAnswers:
    """``first_record_at`` whose answers are reused for :data:`ANSWERS_KEPT_S` seconds.

    After a rewind, Faust goes on handing over the rest of the fetch it was draining, so the
    next batches show the same gap again (from the same mark, to later records) until that
    fetch runs out; each would otherwise open a consumer to ask what is already known. Where
    records lie stays true until a retention deletes them, hence the bound: a partition
    trimmed meanwhile is asked about again within seconds, not rewound for good."""

    ask: FirstRecordAt
    keep_for: float = ANSWERS_KEPT_S
    clock: Callable[[], float] = time.monotonic
    _answers: dict[tuple[str, int, int], tuple[float, int]] = field(default_factory=dict)

    async def __call__(self, topic: str, partition: int, offset: int) -> int | None:
        now = self.clock()
        self._answers = {k: v for k, v in self._answers.items() if now - v[0] < self.keep_for}
        known = self._answers.get((topic, partition, offset))
        if known is not None:
            return known[1]
        answer = await self.ask(topic, partition, offset)
        if answer is not None:  # no answer is asked again: the broker may answer next time
            self._answers[(topic, partition, offset)] = (now, answer)
        return answer


async def _asked(
    gap: Gap, first_record_at: FirstRecordAt | None, at_once: asyncio.Semaphore
) -> bool:
    async with at_once:
        return await _is_the_logs(gap, first_record_at)


async def _is_the_logs(gap: Gap, first_record_at: FirstRecordAt | None) -> bool:
    """Whether nothing lies between a partition's mark and its next record here."""
    if first_record_at is None:
        return True
    topic, partition = gap.key
    first = await first_record_at(topic, partition, gap.expected)
    if first is None:
        log.warning(
            "could not tell what lies before a record; holding it back",
            extra={"topic": topic, "partition": partition, "offset": gap.found},
        )
        return False
    return first >= gap.found
