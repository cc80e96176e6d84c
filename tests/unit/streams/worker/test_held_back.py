"""A record that does not continue its source partition from the mark is held back, and read
again, unless the broker says the log has nothing in between (:mod:`processors.source_order`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace

from processors.source_order import SourceKey
from processors.state_fold import FoldedState
from schemas.codec import decode_derived_record
from schemas.memory_events import DerivedUpTo, MemoryRecorded
from schemas.topics import Topics
from streams.worker.pipeline import IngestPipeline
from streams.worker.source_gaps import (
    PROBES_AT_ONCE,
    FirstRecordAt,
    RememberedAnswers,
    marks_of,
    settle_gaps,
)
from tests.agent_streams import CONFIG, EMBEDDER
from tests.unit.streams.worker.test_ingest_protocol import Broker, Store, observation

TOPICS = Topics()
OBS = (TOPICS.observations, 0)


class Log:
    """The source partition as the broker holds it: which offsets exist."""

    def __init__(self, offsets: set[int]) -> None:
        self.offsets = offsets
        self.asked: list[tuple[str, int, int]] = []

    async def first_record_at(self, topic: str, partition: int, offset: int) -> int | None:
        self.asked.append((topic, partition, offset))
        later = [o for o in self.offsets if o >= offset]
        return min(later) if later else None


class Holds:
    def __init__(self) -> None:
        self.calls: list[tuple[dict[SourceKey, int], dict[SourceKey, int]]] = []

    async def __call__(
        self, first: Mapping[SourceKey, int], rewind: Mapping[SourceKey, int]
    ) -> None:
        self.calls.append((dict(first), dict(rewind)))


def recorded(broker: Broker) -> list[str]:
    events = [
        decode_derived_record(v)
        for (t, _), vs in broker.logs.items()
        if t == TOPICS.items
        for v in vs
    ]
    return [e.source_event_id for e in events if isinstance(e, MemoryRecorded)]


def marked_upto(broker: Broker) -> int:
    markers = [
        decode_derived_record(v)
        for (t, _), vs in broker.logs.items()
        if t == TOPICS.lifecycle
        for v in vs
    ]
    return max(
        (
            p.offset
            for m in markers
            if isinstance(m, DerivedUpTo)
            for p in m.upto
            if (p.topic, p.partition) == OBS
        ),
        default=-1,
    )


def asking(broker: Broker, first_record_at: FirstRecordAt) -> IngestPipeline:
    """A pipeline that asks ``first_record_at`` where a gap's next record is."""
    return IngestPipeline(
        CONFIG,
        EMBEDDER,
        TOPICS,
        Store(broker.journal),
        None,
        broker.send,
        first_record_at=first_record_at,
    )


async def run(pipeline: IngestPipeline, broker: Broker, *batches: list[int], holds: Holds) -> None:
    answering = asyncio.create_task(broker.run())
    try:
        for offsets in batches:
            await pipeline.handle([observation(n, 0) for n in offsets], hold=holds)
    finally:
        answering.cancel()


async def test_a_stale_record_ahead_of_the_redelivery_waits_for_it() -> None:
    broker, holds, log = Broker(), Holds(), Log(set(range(10)))
    pipeline = asking(broker, log.first_record_at)
    # Derived 0-4; then record 9, fetched before a rebalance, arrives ahead of the
    # redelivery of 5-9.
    await run(pipeline, broker, [0, 1, 2, 3, 4], [9], holds=holds)

    assert log.asked == [(*OBS, 5)]
    assert holds.calls == [({OBS: 9}, {OBS: 5})]
    assert pipeline.folded.derived_upto[OBS] == 4
    assert marked_upto(broker) == 4, "no marker names the record held back"
    assert pipeline.stats.held_back == 1

    await run(pipeline, broker, [5, 6, 7, 8, 9], holds=holds)
    assert recorded(broker) == [f"a-{n}" for n in range(10)]
    assert pipeline.stats.skipped == 0
    assert marked_upto(broker) == 9


async def test_a_gap_the_log_has_for_good_is_derived_across() -> None:
    # Offsets 5 and 6 hold no record (a transaction's commit marker, a retention's cut).
    broker, holds, log = Broker(), Holds(), Log({0, 1, 2, 3, 4, 7, 8})
    pipeline = asking(broker, log.first_record_at)
    await run(pipeline, broker, [0, 1, 2, 3, 4], [7, 8], holds=holds)

    assert log.asked == [(*OBS, 5)]
    assert holds.calls == []
    assert recorded(broker) == [f"a-{n}" for n in (0, 1, 2, 3, 4, 7, 8)]
    assert pipeline.folded.derived_upto[OBS] == 8


async def test_a_broker_that_does_not_answer_holds_the_record_back() -> None:
    broker, holds = Broker(), Holds()

    async def silent(topic: str, partition: int, offset: int) -> int | None:
        return None

    pipeline = asking(broker, silent)
    await run(pipeline, broker, [0, 1], [4], holds=holds)
    assert holds.calls == [({OBS: 4}, {OBS: 2})]
    assert recorded(broker) == ["a-0", "a-1"]


def test_a_source_without_a_mark_in_a_log_written_before_starts_where_the_consumer_is() -> None:
    """A log written before markers kept no mark of the retrievals: the first one delivered
    (from the committed offset) is where that source starts, not offset 0."""
    pipeline = IngestPipeline(CONFIG, EMBEDDER, TOPICS, Store([]), None, Broker().send)
    access = (TOPICS.access, 0)
    records = [replace(observation(n, 0), topic=TOPICS.access) for n in (30, 31)]
    assert marks_of(records, pipeline.folded).get(access) is None, "an empty log: from 0"
    pipeline.folded.log_ends[(TOPICS.items, 0)] = 10
    assert marks_of(records, pipeline.folded)[access] == 29
    pipeline.folded.derived_upto[access] = 12
    assert marks_of(records, pipeline.folded)[access] == 12, "a mark rules"


async def test_the_gaps_of_several_partitions_are_asked_about_together() -> None:
    """After a rebalance many partitions can show a gap at once; asked one after another, each
    question's consumer start would add up against the group's rebalance timeout."""
    waiting: list[tuple[str, int, int]] = []
    everyone_asked = asyncio.Event()

    async def first_record_at(topic: str, partition: int, offset: int) -> int | None:
        waiting.append((topic, partition, offset))
        if len(waiting) == 3:
            everyone_asked.set()
        # Asked one at a time, the first question would wait here for the others in vain.
        await asyncio.wait_for(everyone_asked.wait(), 5)
        return offset

    folded = FoldedState(derived_upto={(TOPICS.observations, p): 4 for p in range(3)})
    records = [observation(9, p) for p in range(3)]
    settled = await settle_gaps(records, folded, first_record_at)

    assert sorted(waiting) == [(TOPICS.observations, p, 5) for p in range(3)]
    assert settled.records == [], "records lie in every gap: all three are held back"
    assert settled.rewind_to == {(TOPICS.observations, p): 5 for p in range(3)}


async def test_the_same_gap_shown_again_after_a_rewind_is_not_asked_about_again() -> None:
    """Faust goes on handing over the fetch it was draining after a rewind: the same gap,
    from the same mark, shows in the next batches until that fetch runs out."""
    broker, holds, log = Broker(), Holds(), Log(set(range(20)))
    now = [0.0]
    remembered = RememberedAnswers(log.first_record_at, keep_for=5.0, clock=lambda: now[0])
    pipeline = asking(broker, remembered)
    await run(pipeline, broker, [0, 1, 2, 3, 4], [9], [10, 11], [12], holds=holds)

    assert log.asked == [(*OBS, 5)], "one question for three batches"
    assert [rewind for _, rewind in holds.calls] == [{OBS: 5}] * 3
    now[0] = 5.0
    await run(pipeline, broker, [13], holds=holds)
    assert log.asked == [(*OBS, 5)] * 2, "an answer is asked for again once it is old"

    await run(pipeline, broker, list(range(5, 20)), holds=holds)
    assert recorded(broker) == [f"a-{n}" for n in range(20)]


async def test_no_answer_is_not_remembered() -> None:
    asked: list[int] = []

    async def silent(topic: str, partition: int, offset: int) -> int | None:
        asked.append(offset)
        return None

    remembered = RememberedAnswers(silent)
    assert await remembered(*OBS, 5) is None
    assert await remembered(*OBS, 5) is None
    assert asked == [5, 5]


async def test_at_most_probes_at_once_questions_are_in_flight() -> None:
    in_flight: list[int] = [0]
    most = [0]

    async def first_record_at(topic: str, partition: int, offset: int) -> int | None:
        in_flight[0] += 1
        most[0] = max(most[0], in_flight[0])
        await asyncio.sleep(0.01)
        in_flight[0] -= 1
        return offset

    partitions = range(PROBES_AT_ONCE + 4)
    folded = FoldedState(derived_upto={(TOPICS.observations, p): 4 for p in partitions})
    settled = await settle_gaps([observation(9, p) for p in partitions], folded, first_record_at)

    assert most[0] == PROBES_AT_ONCE
    assert len(settled.rewind_to) == len(partitions)
