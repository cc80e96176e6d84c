"""Where a replay ``--since`` starts, against a consumer that answers as Kafka does: the
broker's answer stands and nothing is read. Tansu's answer (always the first offset, with a
timestamp of -1), read on from, is tested on the real broker in the integration tests."""

from __future__ import annotations

from typing import cast

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import OffsetAndTimestamp

from streams.eventlog.offsets_since import offsets_since

A, B = TopicPartition("t", 0), TopicPartition("t", 1)
SINCE = 1_900_000_000_000


class Kafka:
    """ListOffsets by timestamp from a time index; no fetch is possible."""

    def __init__(self, answers: dict[TopicPartition, OffsetAndTimestamp | None]) -> None:
        self.answers = answers
        self.asked: list[dict[TopicPartition, int]] = []

    async def offsets_for_times(
        self, times: dict[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        self.asked.append(times)
        return {tp: self.answers[tp] for tp in times}


async def test_kafkas_answer_stands_and_nothing_is_read() -> None:
    kafka = Kafka({A: OffsetAndTimestamp(7, SINCE + 5), B: None})
    starts = await offsets_since(cast(AIOKafkaConsumer, kafka), [A, B], SINCE, {A: 10, B: 4})
    assert kafka.asked == [{A: SINCE, B: SINCE}]
    assert starts == {A: 7, B: 4}, "nothing written since: the partition's end"


async def test_an_answer_at_the_very_time_asked_stands() -> None:
    kafka = Kafka({A: OffsetAndTimestamp(3, SINCE), B: OffsetAndTimestamp(0, SINCE + 1)})
    starts = await offsets_since(cast(AIOKafkaConsumer, kafka), [A, B], SINCE, {A: 9, B: 9})
    assert starts == {A: 3, B: 0}
