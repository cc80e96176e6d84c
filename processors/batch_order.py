"""The order records are derived in, and which records made up each batch of a derived log.

One agent's records arrive on several topics (its observations, decisions and feedback, its
partition's ticks, its retrievals), and the rules depend on their order and on where batches
end. A consumer fetches the topics in an order of its own, which no later read of the log can
repeat. So every batch is derived in one canonical order (:func:`canonical_order`), live and in
a reprocess alike, and a reprocess cuts the raw log into the batches the live derived log's
markers name (:func:`batches_at_markers`): the same batches in the same order derive the same
events (processors/README.md, "The order of the input topics").
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from processors.batch import RawRecord
from schemas.memory_events import DerivedUpTo
from schemas.topics import Topics

TopicRank = Mapping[str, int]
"""A source topic's place among records of equal timestamps (lower first)."""

SourceKey = tuple[str, int]
"""A source (topic, partition)."""


def topic_rank(topics: Topics) -> dict[str, int]:
    """The fixed tie-break: the agent topics (observations, decisions, feedback), then the
    ticks on the schedule topic, then the retrievals on the access topic."""
    names = (*topics.agent_inputs, topics.schedule, topics.access)
    return {name: rank for rank, name in enumerate(names)}


def _by_source(records: Iterable[RawRecord]) -> dict[SourceKey, list[RawRecord]]:
    """Each source's records in offset order."""
    streams: dict[SourceKey, list[RawRecord]] = {}
    for raw in records:
        streams.setdefault((raw.topic, raw.partition), []).append(raw)
    for stream in streams.values():
        stream.sort(key=lambda raw: raw.offset)
    return streams


def canonical_order(records: Iterable[RawRecord], rank: TopicRank) -> list[RawRecord]:
    """``records`` in the one order a batch is derived in, whatever order they came in.

    Each source (topic, partition) keeps its offset order, and the sources are merged by
    record timestamp (a record without one counts as -1), equal timestamps by ``rank``, then
    topic, partition and offset. A k-way merge, not a sort: where a producer's clock stamps a
    later record of a topic earlier, the topic's own order still wins, since an agent's events
    on one topic are derived in log order and a store's applied position only moves forward.
    The key is total, so the order of one partition number's records is the same whether other
    partitions' records are in the batch or not.
    """
    streams = _by_source(records)
    if len(streams) <= 1:
        return [raw for stream in streams.values() for raw in stream]
    unknown = len(rank)

    def key(raw: RawRecord) -> tuple[int, int, str, int, int]:
        timestamp = -1 if raw.timestamp_ms is None else raw.timestamp_ms
        return (timestamp, rank.get(raw.topic, unknown), raw.topic, raw.partition, raw.offset)

    return list(heapq.merge(*streams.values(), key=key))


@dataclass(frozen=True)
class LiveBatches:
    """Raw records cut into the batches a live worker derived them in."""

    marked: list[list[RawRecord]]
    """The batches the markers name, in log order, each in canonical order."""
    unmarked: list[list[RawRecord]]
    """The records no marker names, in canonical order, in batches of the tail size."""

    @property
    def batches(self) -> list[list[RawRecord]]:
        return [*self.marked, *self.unmarked]

    @property
    def records(self) -> int:
        return sum(len(batch) for batch in self.batches)


def batches_at_markers(
    records: Iterable[RawRecord],
    markers: Iterable[DerivedUpTo],
    rank: TopicRank,
    tail_size: int,
) -> LiveBatches:
    """``records`` (a partition number's raw records, any order) cut into the batches a live
    worker derived them in, as ``markers`` (that partition number's markers of the derived
    log, in log order) name them.

    A marker names, per source, the highest offset of its batch; the batch's records are those
    above what earlier markers named, so records a worker skipped as derived already (after a
    takeover) belong to the batch that derived them. A marker that names nothing new (the
    first one of a fresh log, one repeated after a takeover) makes no batch. What no marker
    names (not derived yet, or a log without markers) follows in batches of ``tail_size``.
    """
    if tail_size < 1:
        raise ValueError(f"tail_size must be at least 1, not {tail_size}")
    streams = _by_source(records)
    taken: dict[SourceKey, int] = {}
    marked: list[list[RawRecord]] = []
    for marker in markers:
        batch: list[RawRecord] = []
        for position in marker.upto:
            key = (position.topic, position.partition)
            stream = streams.get(key)
            if not stream:
                continue
            start = taken.get(key, 0)
            end = bisect_right(stream, position.offset, lo=start, key=lambda raw: raw.offset)
            batch.extend(stream[start:end])
            taken[key] = end
        if batch:
            marked.append(canonical_order(batch, rank))
    rest = canonical_order(
        (raw for key, stream in streams.items() for raw in stream[taken.get(key, 0) :]), rank
    )
    unmarked = [rest[i : i + tail_size] for i in range(0, len(rest), tail_size)]
    return LiveBatches(marked, unmarked)


def cut_at_forgets(
    records: Iterable[RawRecord], rank: TopicRank, schedule_topic: str
) -> list[list[RawRecord]]:
    """``records`` as batches to derive one after another: cut right after a command keyed by
    an agent on ``schedule_topic`` (a ``ForgetAgent``; ticks have no key) that a later record
    of the same agent follows, in :func:`canonical_order`. Without a cut, the records as given.

    An agent's events after its erasure are its next life, and a batch seals what it derives
    with the agent's key of the moment, which the erasure deletes once the batch is logged: in
    one batch with the erasure, the next life was sealed with that key, applied to the stores
    and unreadable in the log from then on. Cut, the next life is a batch of its own, sealed
    with the new life's key. A prefix of the canonical order merges back into that prefix, so
    a reprocess, which cuts the log at the live batches' markers, derives the same batches."""
    records = list(records)
    forgets = {r.key for r in records if r.topic == schedule_topic and r.key is not None}
    if not forgets:
        return [records]
    parts: list[list[RawRecord]] = [[]]
    forgotten: set[bytes] = set()
    for raw in canonical_order(records, rank):
        if raw.topic == schedule_topic:
            if raw.key is not None:
                forgotten.add(raw.key)
        elif raw.key in forgotten:
            parts.append([])
            forgotten = set()
        parts[-1].append(raw)
    return [part for part in parts if part] or [[]]
