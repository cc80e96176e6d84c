"""Which of a batch's records a worker may derive: each source partition in offset order.

A marker says "derived up to offset N" of a source partition (:mod:`processors.batch_markers`),
and a worker skips a redelivered record at or below its mark. Both hold only if a partition is
derived in order, with no record left behind below the mark. The consumer is trusted to hand
records over that way, but a rebalance can break it: a record fetched before the group's
revocation may reach the worker after the assignment, ahead of the redelivery that restarts at
the committed offset (Faust drops such records by their group generation, which a broker may
keep across a lone member's rejoin), and records read while Faust's flow was stopped are
dropped, so the next one follows a hole. Derived, such a record moved the mark past records
never derived, which the redelivery then skipped: lost, without a dead letter.

:func:`in_source_order` keeps the records that continue each partition from its mark, each
once. Where a partition's next record is further on (a *gap*), the gap is reported: the worker
asks the broker whether records lie in between (:class:`Gap`). Offsets can be missing from a
log for good (a transaction's commit marker, records a retention deleted), so a gap the broker
confirms is accepted; otherwise the partition is held from there on: its records are left out
of the batch and of the commit, and the consumer rewinds to the mark.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from processors.batch import RawRecord
from processors.batch_markers import SourceKey


@dataclass(frozen=True, slots=True)
class Gap:
    """The record at ``expected`` was next in ``key``, and the batch holds ``found`` instead."""

    key: SourceKey
    expected: int
    found: int


@dataclass(frozen=True)
class SourceOrder:
    records: list[RawRecord]
    """The records a worker may take now, in the order given, none twice: per partition, a
    run that continues from its mark (records at or below it included: they are skipped)."""
    gaps: list[Gap]
    """Gaps not decided yet: the partition's records from ``found`` on are left out until
    the broker says whether anything lies between."""
    held: dict[SourceKey, int]
    """Per partition held back, the offset the consumer must rewind to (its next record)."""


def in_source_order(
    records: Sequence[RawRecord],
    derived_upto: Mapping[SourceKey, int],
    accepted: Iterable[Gap] = (),
    held: Mapping[SourceKey, Gap] | None = None,
) -> SourceOrder:
    """Cut each source partition of ``records`` where it stops continuing from its mark.

    ``accepted``: gaps the broker confirmed (nothing lies between); ``held``: per partition,
    a gap the broker did not confirm (the partition is cut there). Costs one pass and no sort
    when every partition continues in order, as it does but around a rebalance."""
    last: dict[SourceKey, int] = {}
    in_order = True
    for r in records:
        key = (r.topic, r.partition)
        before = last.get(key)
        if before is None:
            before = derived_upto.get(key, -1)
            if r.offset > before + 1:
                in_order = False
                break
        elif r.offset != before + 1:
            in_order = False
            break
        last[key] = r.offset
    if in_order:
        return SourceOrder(list(records), [], {})
    return _cut(records, derived_upto, set(accepted), held or {})


def _cut(
    records: Sequence[RawRecord],
    derived_upto: Mapping[SourceKey, int],
    accepted: set[Gap],
    held: Mapping[SourceKey, Gap],
) -> SourceOrder:
    offsets: dict[SourceKey, set[int]] = {}
    for r in records:
        offsets.setdefault((r.topic, r.partition), set()).add(r.offset)
    cut: dict[SourceKey, int] = {}
    gaps: list[Gap] = []
    rewind: dict[SourceKey, int] = {}
    for key, present in offsets.items():
        expected = derived_upto.get(key, -1) + 1
        for offset in sorted(present):
            if offset <= expected:
                expected = max(expected, offset + 1)
                continue
            gap = Gap(key, expected, offset)
            if gap in accepted:
                expected = offset + 1
                continue
            cut[key] = offset
            if held.get(key) == gap:
                rewind[key] = expected
            else:
                gaps.append(gap)
            break
    kept: list[RawRecord] = []
    seen: set[tuple[str, int, int]] = set()
    for r in records:
        key = (r.topic, r.partition)
        if r.offset >= cut.get(key, r.offset + 1):
            continue
        ident = (r.topic, r.partition, r.offset)
        if ident in seen:
            continue
        seen.add(ident)
        kept.append(r)
    return SourceOrder(kept, gaps, rewind)
