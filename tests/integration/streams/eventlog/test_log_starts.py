"""Where a partition starts, when the broker misreports it: Tansu sometimes answers the
earliest offset of a partition whose first batches were written by racing producers with the
start of its second batch (:mod:`streams.eventlog.log_starts`). The readers that start at the
beginning read the first batch all the same.

The misreport is a race inside the broker, so it is provoked rather than staged: producers
race on the first records of many fresh partitions, about one in a hundred of which comes out
misreported. A broker that never misreports (Apache Kafka) skips these tests.

The same race sometimes leaves Tansu answering fetches of a partition with a stale highwater
for a moment, which ends a read to the end short; that is a quirk of its own, kept out of these
tests by waiting until every record of the racing partitions can be fetched.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.admin import NewTopic

from streams.eventlog.archive import export_log, read_manifest
from streams.eventlog.derived_log import read_to_end
from streams.eventlog.kafka_clients import admin_client, log_reader, record_producer
from streams.eventlog.log_starts import log_starts

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

RACERS = 3
"""Producers racing on each partition, one record each: three batches of one record."""
PARTITIONS = 100
MAX_TOPICS = 20
RACE_BUDGET_S = 45.0
"""At most this many racing partitions, or this long: ~1% of racing partitions come out
misreported on Tansu (0.5-2.3% per thousand, measured), so thousands all but always give one."""
SETTLE_S = 20.0


@dataclass
class Misreported:
    topic: str
    reported: dict[TopicPartition, int]
    """Only the partitions the broker reports to start above 0."""


async def _race(bootstrap: str, topic: str) -> None:
    producers = [record_producer(bootstrap) for _ in range(RACERS)]
    try:
        for producer in producers:
            await producer.start()
        for partition in range(PARTITIONS):
            await asyncio.gather(
                *(
                    producer.send_and_wait(topic, f"{i}".encode(), partition=partition)
                    for i, producer in enumerate(producers)
                )
            )
    finally:
        for producer in producers:
            await producer.stop()


async def _settle(bootstrap: str, topic: str) -> None:
    """Until a fetch from offset 0 has returned every record of every partition."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    fetched = dict.fromkeys(tps, 0)
    consumer = log_reader(bootstrap)
    try:
        await consumer.start()
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        deadline = time.monotonic() + SETTLE_S
        while any(n < RACERS for n in fetched.values()):
            assert time.monotonic() < deadline, "the racing partitions never read back whole"
            for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                fetched[tp] += len(records)
    finally:
        await consumer.stop()


async def _reported_starts(bootstrap: str, topic: str) -> dict[TopicPartition, int]:
    consumer = log_reader(bootstrap)
    try:
        await consumer.start()
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        reported: dict[TopicPartition, int] = await consumer.beginning_offsets(tps)
        return reported
    finally:
        await consumer.stop()


@pytest.fixture(scope="module")
async def misreported(kafka_bootstrap: str) -> AsyncIterator[Misreported]:
    admin = admin_client(kafka_bootstrap)
    await admin.start()
    deadline = time.monotonic() + RACE_BUDGET_S
    raced = 0
    try:
        for _ in range(MAX_TOPICS):
            topic = f"starts{uuid.uuid4().hex[:10]}"
            await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
            await _race(kafka_bootstrap, topic)
            await _settle(kafka_bootstrap, topic)
            raced += PARTITIONS
            reported = await _reported_starts(kafka_bootstrap, topic)
            wrong = {tp: start for tp, start in reported.items() if start > 0}
            if wrong:
                yield Misreported(topic, wrong)
                return
            if time.monotonic() > deadline:
                break
    finally:
        await admin.close()
    pytest.skip(
        f"the broker reported every one of {raced} racing partitions to start at 0: "
        "the misreport these tests guard against did not happen (it never does on Kafka)"
    )


async def test_a_misreported_start_is_found_below_the_broker_answer(
    kafka_bootstrap: str, misreported: Misreported
) -> None:
    consumer = log_reader(kafka_bootstrap)
    try:
        await consumer.start()
        starts = await log_starts(consumer, misreported.reported)
        assert consumer.assignment() == set()  # given back as it was
    finally:
        await consumer.stop()
    assert starts == dict.fromkeys(misreported.reported, 0)


async def test_reading_from_the_beginning_reads_the_first_batch(
    kafka_bootstrap: str, misreported: Misreported
) -> None:
    """``seek_to_beginning`` went to the broker's answer, past the first batch."""
    read: dict[TopicPartition, list[int]] = {tp: [] for tp in misreported.reported}

    def keep(tp: TopicPartition, record: ConsumerRecord[bytes, bytes]) -> None:
        read[tp].append(record.offset)

    await read_to_end(kafka_bootstrap, list(misreported.reported), keep)
    assert read == {tp: list(range(RACERS)) for tp in misreported.reported}


async def test_an_export_keeps_the_first_batch(
    kafka_bootstrap: str, misreported: Misreported, tmp_path: Path
) -> None:
    """An export copies from where each partition starts: from the broker's answer, it left
    the first batch out of the archive."""
    await export_log(kafka_bootstrap, [misreported.topic], tmp_path / "archive")
    (summary,) = read_manifest(tmp_path / "archive")
    assert summary.records == (RACERS,) * PARTITIONS


async def test_a_partition_that_starts_at_0_costs_no_fetch(
    kafka_bootstrap: str, misreported: Misreported
) -> None:
    right = next(
        TopicPartition(misreported.topic, p)
        for p in range(PARTITIONS)
        if TopicPartition(misreported.topic, p) not in misreported.reported
    )
    consumer = log_reader(kafka_bootstrap)
    try:
        await consumer.start()
        assert await log_starts(consumer, [right]) == {right: 0}
        assert consumer.assignment() == set()  # nothing was assigned, so nothing fetched
    finally:
        await consumer.stop()
