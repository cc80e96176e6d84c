"""Partitions handed over while a worker has a batch in flight: the group gives them to a new
owner once the old one's revocation handler returns, and the new owner folds them from the log.
Whatever the old owner was doing must be logged (marker included) by then, and it must derive
none of their records after it, or the new owner derives them a second time."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from processors.batch_markers import marked_events
from processors.state_fold import FoldedState
from processors.state_snapshot import resume
from schemas.codec import decode_derived_record
from schemas.memory_events import DerivedEvent, MemoryRecorded, SourcePosition
from streams.worker.ownership import Ownership, RebalanceTimeoutError
from streams.worker.pipeline import IngestPipeline
from tests.agent_streams import CONFIG, EMBEDDER
from tests.unit.streams.worker.test_ingest_protocol import TOPICS, Broker, Store, observation


def derived_log(broker: Broker, partitions: set[int]) -> list[tuple[SourcePosition, object]]:
    """The derived topics as a reader sees them: items, then lifecycle, in log order."""
    return [
        (SourcePosition(topic=topic, partition=p, offset=i), decode_derived_record(value))
        for topic in (TOPICS.items, TOPICS.lifecycle)
        for (t, p), values in sorted(broker.logs.items())
        if t == topic and p in partitions
        for i, value in enumerate(values)
    ]


def worker(broker: Broker) -> IngestPipeline:
    async def recover(partitions: set[int]) -> tuple[FoldedState, list[DerivedEvent]]:
        return resume({}, derived_log(broker, partitions), TOPICS.schedule)  # type: ignore[arg-type]

    store = Store(broker.journal)
    return IngestPipeline(
        CONFIG, EMBEDDER, TOPICS, store, None, broker.send, recover=recover, settle_within=5.0
    )


async def settle() -> None:
    """Let every task that can run, run."""
    for _ in range(50):
        await asyncio.sleep(0)


async def test_a_revocation_waits_for_the_batch_in_flight_so_the_new_owner_skips_it() -> None:
    broker = Broker()
    old, new = worker(broker), worker(broker)
    answering = asyncio.create_task(broker.run())
    await old.handle([observation(0, 0), observation(1, 0)])
    answering.cancel()
    # The broker holds the answers: the old owner's next batch is logged but not yet marked.
    in_flight = asyncio.create_task(old.handle([observation(2, 0), observation(3, 0)]))
    await settle()
    assert broker.pending, "the batch waits for the broker"

    async def group_hands_over() -> None:
        await old.revoke({0}, within=5.0)
        old.assign(set())
        # The new owner starts from the last commit: the batch in flight was never committed.
        await new.handle([observation(2, 0), observation(3, 0), observation(4, 0)])

    handing_over = asyncio.create_task(group_hands_over())
    await settle()
    answering = asyncio.create_task(broker.run())
    try:
        await asyncio.wait_for(asyncio.gather(in_flight, handing_over), 10)
    finally:
        answering.cancel()

    logged = marked_events(derived_log(broker, {0}))  # type: ignore[arg-type]
    sources = Counter(e.source_event_id for e in logged if isinstance(e, MemoryRecorded))
    assert sources == {f"a-{n}": 1 for n in range(5)}, "recorded once each"
    assert not old.folded.states, "the old owner keeps nothing of a partition it released"


async def test_a_batch_started_during_a_rebalance_derives_only_what_is_assigned_again() -> None:
    broker = Broker()
    pipeline = worker(broker)
    answering = asyncio.create_task(broker.run())
    try:
        await pipeline.handle([observation(0, 0), observation(1, 1)])
        await pipeline.revoke({0, 1}, within=5.0)
        # Records fetched before the revocation still make a batch; the assignment comes later.
        left: list[set[int]] = []
        batch = asyncio.create_task(
            pipeline.handle([observation(2, 0), observation(3, 1)], leave=left.append)
        )
        await settle()
        assert not batch.done(), "the batch waits for the assignment"
        pipeline.assign({1})
        result = await asyncio.wait_for(batch, 10)
    finally:
        answering.cancel()

    assert left == [{0}], "told which records it left, so that they are not committed"
    assert {e.source_position.partition for e in result.derived if e.source_position} == {1}
    logged = marked_events(derived_log(broker, {0, 1}))  # type: ignore[arg-type]
    recorded = sorted(e.source_event_id for e in logged if isinstance(e, MemoryRecorded))
    assert recorded == ["a-0", "a-1", "a-3"], "partition 0's record is its new owner's"


async def test_a_batch_that_does_not_end_fails_the_revocation_within_its_bound() -> None:
    ownership = Ownership()
    with ownership.in_flight(), pytest.raises(RebalanceTimeoutError):
        await ownership.between_batches(0.01)
    await ownership.between_batches(0.01)


async def test_a_stopping_worker_derives_none_of_the_revoked_partitions() -> None:
    ownership = Ownership()
    ownership.revoke({0, 1})
    assert await ownership.owned({0, 2}, 5.0, lambda: True) == {2}
    with pytest.raises(RebalanceTimeoutError):
        await ownership.owned({0, 2}, 0.01, lambda: False)
