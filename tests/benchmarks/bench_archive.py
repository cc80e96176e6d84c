"""What archiving the log costs: ``engram up`` exports it when it stops and imports it when it
starts (the dev broker keeps its log in memory), and ``engram export``/``import`` move a log
between clusters.

    python -m tests.benchmarks.bench_archive [--records 60000] [--size 1500]

On a fresh broker with the dev stack's topics (4 partitions each): an export of the empty
topics, then ``--records`` records of ``--size`` random bytes (a sealed derived event is
encrypted, so random bytes compress as one does) spread over three topics, exported, and
imported into a second fresh broker. Prints each step's seconds and the archive's size.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from aiokafka import AIOKafkaProducer

from schemas.topics import Topics
from streams.eventlog.archive import export_log, import_log
from streams.eventlog.topic_admin import ensure_topics
from streams.runtime.devstack.broker import TansuBroker


async def publish(bootstrap: str, topics: list[str], records: int, size: int) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=False, linger_ms=20
    )
    await producer.start()
    try:
        sent = [
            await producer.send(
                topics[i % len(topics)], os.urandom(size), key=b"H%05d" % (i % 1000)
            )
            for i in range(records)
        ]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def main(records: int, size: int) -> None:
    topics = Topics("")
    names = list(topics.all())
    with (
        TansuBroker() as source,
        TansuBroker() as target,
        tempfile.TemporaryDirectory(prefix="engram-archive-") as scratch,
    ):
        await ensure_topics(source.bootstrap, topics, 4)
        started = time.perf_counter()
        await export_log(source.bootstrap, names, Path(scratch) / "empty")
        print(f"export of {len(names)} empty topics: {time.perf_counter() - started:.2f} s")

        await publish(
            source.bootstrap, [topics.observations, topics.items, topics.lifecycle], records, size
        )
        archive = Path(scratch) / "archive"
        started = time.perf_counter()
        exported = await export_log(source.bootstrap, names, archive)
        took = time.perf_counter() - started
        stored = sum(f.stat().st_size for f in archive.rglob("*") if f.is_file())
        total = sum(s.total for s in exported)
        print(
            f"export of {total:,} records of {size:,} bytes: {took:.2f} s "
            f"({total / took:,.0f} records/s), archive {stored / 1e6:,.1f} MB"
        )
        started = time.perf_counter()
        await import_log(target.bootstrap, archive)
        took = time.perf_counter() - started
        print(f"import into a fresh broker: {took:.2f} s ({total / took:,.0f} records/s)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--size", type=int, default=1_500, help="bytes a record")
    args = parser.parse_args()
    asyncio.run(main(args.records, args.size))
