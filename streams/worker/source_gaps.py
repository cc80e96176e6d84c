"""Gaps in a source partition, settled with the broker before a batch derives across them.

:func:`processors.source_order.in_source_order` says where a partition's next record is not
the one its mark says comes next. Here the worker asks the broker what lies in between
(:func:`streams.eventlog.first_record.first_record_at`): nothing, and the gap is the log's own
and is derived across; records, and the partition is held back from the gap on, to be read
again in order.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

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
    while True:
        order = in_source_order(records, marks, accepted, held)
        if not order.gaps:
            break
        for gap in order.gaps:
            if await _is_the_logs(gap, first_record_at):
                accepted.add(gap)
            else:
                held[gap.key] = gap
    first_held = {key: gap.found for key, gap in held.items()}
    held_back = sum(
        1 for r in records if r.offset >= first_held.get((r.topic, r.partition), r.offset + 1)
    )
    return Settled(order.records, first_held, order.held, held_back)


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
