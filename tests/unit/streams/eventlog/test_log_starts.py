"""Where partitions start, against a consumer that plays a broker: the answers on Kafka (the
broker's, unchanged, and no fetch for a partition starting at 0) and on a misreporting Tansu.
The misreport itself, on the real broker, is tested in the integration tests."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaTimeoutError, OffsetOutOfRangeError

from streams.eventlog.log_starts import log_starts

A, B, C = (TopicPartition("t", p) for p in range(3))


@dataclass
class Log:
    reported: int
    """What ListOffsets earliest answers."""
    first: int
    """The first offset held: below it a fetch is out of range."""
    end: int


@dataclass
class Broker:
    """The parts of an AIOKafkaConsumer :func:`log_starts` uses, over in-memory logs."""

    logs: dict[TopicPartition, Log]
    reset: str = "earliest"
    assigned: set[TopicPartition] = field(default_factory=set)
    stopped: set[TopicPartition] = field(default_factory=set)
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    fetches: int = 0

    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.logs[tp].reported for tp in tps}

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def assign(self, tps: list[TopicPartition]) -> None:
        self.assigned, self.stopped, self.positions = set(tps), set(), {}

    def unsubscribe(self) -> None:
        self.assign([])

    def paused(self) -> set[TopicPartition]:
        return set(self.stopped)

    def pause(self, *tps: TopicPartition) -> None:
        assert set(tps) <= self.assigned
        self.stopped |= set(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.stopped -= set(tps)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        assert tp in self.assigned
        self.positions[tp] = offset

    async def position(self, tp: TopicPartition) -> int:
        return self.positions[tp]

    async def getmany(self, *tps: TopicPartition, timeout_ms: int) -> dict[TopicPartition, Any]:
        self.fetches += 1
        out = {}
        for tp in tps:
            assert tp in self.assigned
            assert tp not in self.stopped
            log, position = self.logs[tp], self.positions[tp]
            if position < log.first:
                if self.reset == "none":
                    raise OffsetOutOfRangeError({tp: position})
                self.positions[tp] = log.reported  # reset to the earliest offset
            elif position < log.end:
                out[tp] = [SimpleNamespace(offset=o) for o in range(position, log.end)]
                self.positions[tp] = log.end
        return out

    def consumer(self) -> AIOKafkaConsumer:
        return cast(AIOKafkaConsumer, self)


async def test_partitions_reported_to_start_at_0_are_not_fetched() -> None:
    broker = Broker({A: Log(0, 0, 3), B: Log(0, 0, 0)})
    assert await log_starts(broker.consumer(), [A, B]) == {A: 0, B: 0}
    assert broker.fetches == 0
    assert broker.assigned == set()


@pytest.mark.parametrize("reset", ["earliest", "none"])
async def test_a_start_a_retention_moved_is_the_broker_answer(reset: str) -> None:
    """Kafka: offset 0 is out of range, whether the consumer resets or raises."""
    broker = Broker({A: Log(5, 5, 9), B: Log(0, 0, 2), C: Log(4, 4, 4)}, reset=reset)
    assert await log_starts(broker.consumer(), [A, B, C]) == {A: 5, B: 0, C: 4}
    assert broker.assigned == set()  # given back as it was: nothing


async def test_a_start_reported_past_the_first_batch_is_found_below_it() -> None:
    """Tansu: a fetch from 0 returns what the broker's answer skipped; a start reported equal
    to the end is checked too (Tansu may misreport both)."""
    broker = Broker({A: Log(1, 0, 3), B: Log(2, 0, 3), C: Log(1, 0, 1)})
    assert await log_starts(broker.consumer(), [A, B, C]) == {A: 0, B: 0, C: 0}


async def test_partitions_already_assigned_are_left_at_their_start() -> None:
    broker = Broker({A: Log(1, 0, 3), B: Log(0, 0, 3)})
    broker.assign([A, B])
    assert await log_starts(broker.consumer(), [A]) == {A: 0}
    assert broker.assigned == {A, B}
    assert broker.stopped == set()
    assert broker.positions[A] == 0


async def test_other_partitions_are_given_back() -> None:
    broker = Broker({A: Log(1, 0, 3), B: Log(0, 0, 3)})
    broker.assign([B])
    assert await log_starts(broker.consumer(), [A]) == {A: 0}
    assert broker.assigned == {B}


async def test_no_answer_in_time_is_a_kafka_error() -> None:
    broker = Broker({A: Log(1, 0, 3)})

    async def nothing(*tps: TopicPartition, timeout_ms: int) -> dict[TopicPartition, Any]:
        await asyncio.sleep(timeout_ms / 1000)  # a fetch that never answers
        return {}

    broker.getmany = nothing  # type: ignore[method-assign]
    with pytest.raises(KafkaTimeoutError):
        await log_starts(broker.consumer(), [A], timeout=0.2)
