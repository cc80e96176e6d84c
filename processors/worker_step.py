"""The pure part of a worker's loop: one batch against the state carried between batches.

:meth:`streams.worker.pipeline.IngestPipeline.handle` is this plus the I/O around it: it skips
and derives with :func:`derive_batch` (in the canonical order of
:func:`processors.batch_order.canonical_order`, so a reprocess that cuts the raw log where the
live markers say derives the same), logs the derived events, builds the batch's markers
from where they landed (:meth:`DerivedBatch.markers`) and logs them, applies the events to the
projections, then moves the carried state on with :func:`carry`. The property tests drive the
same functions with a derived log held in memory, so what they check is the worker's code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from processors.batch import BatchResult, RawRecord, RecordOpener, process_batch
from processors.batch_markers import batch_markers, logged_ranges
from processors.batch_order import TopicRank, canonical_order
from processors.lifecycle import Deriving
from processors.recording import AgentMemoryState
from processors.state_fold import FoldedState
from schemas.memory_events import DerivedUpTo


@dataclass(frozen=True)
class DerivedBatch:
    """What one batch derived, and from which of its records."""

    records: Sequence[RawRecord]
    """The whole batch, as the consumer gave it."""
    fresh: list[RawRecord]
    """Its records the log did not say were derived already, those it derived from, in the
    order it derived them."""
    result: BatchResult

    @property
    def skipped(self) -> int:
        """Redelivered records whose derived events were already in the log."""
        return len(self.records) - len(self.fresh)

    def markers(self, delivered: Sequence[object], at: datetime) -> list[DerivedUpTo]:
        """The batch's markers, once the broker took every derived event: ``delivered[i]`` is
        the producer's metadata of ``result.derived[i]`` (where it landed). Every record of
        the batch is named, the skipped ones included."""
        items, lifecycle = logged_ranges(self.result.derived, delivered)
        return batch_markers(self.records, items, lifecycle, at)


def agents_of_partition(partition_of: Mapping[str, int], partition: int) -> list[str]:
    """The agents a tick of ``partition`` concerns: every agent the worker holds there."""
    return [agent for agent, p in partition_of.items() if p == partition]


def derive_batch(
    records: Sequence[RawRecord],
    folded: FoldedState,
    partition_of: Mapping[str, int],
    *,
    ctx: Deriving,
    rank: TopicRank,
    failed_at: datetime,
    opener: RecordOpener | None = None,
) -> DerivedBatch:
    """Derive from ``records`` what the log does not hold yet, from the carried state (read,
    not changed: the batch changes it only once it is logged, see :func:`carry`).

    Whatever order the consumer fetched them in, the fresh records are derived in canonical
    order (``rank`` breaks timestamp ties between topics): ordered after the skip, since
    which records a redelivery skips changes how the rest interleave."""
    upto = folded.derived_upto
    fresh = canonical_order(
        (r for r in records if r.offset > upto.get((r.topic, r.partition), -1)), rank
    )
    states = folded.states
    result = process_batch(
        fresh,
        lambda agent: states.get(agent) or AgentMemoryState(),
        ctx=ctx,
        failed_at=failed_at,
        agents_of_partition=lambda partition: agents_of_partition(partition_of, partition),
        opener=opener,
    )
    return DerivedBatch(records, fresh, result)


def carry(folded: FoldedState, partition_of: dict[str, int], batch: DerivedBatch) -> None:
    """Move the carried state past a logged batch: the agents' new states, the partition each
    agent's records are on, and the source offsets now derived. A forgotten agent's new state
    is its next life's (nothing but where its seq goes on, :meth:`processors.batch._Batch.forget`),
    which replaces what was carried of it."""
    result = batch.result
    folded.states.update(result.states)
    for event in result.derived:
        if event.source_position is not None:
            partition_of[event.agent_id] = event.source_position.partition
    upto = folded.derived_upto
    for raw in batch.fresh:
        if upto.get((raw.topic, raw.partition), -1) < raw.offset:
            upto[(raw.topic, raw.partition)] = raw.offset
