"""Wall-clock ticks: the one place where the processor's own clock enters the log.

A tick is written into every partition of ``memory.schedule`` by one worker of the cluster (the
consumer group's leader), so each partition's owner sees it in order with that partition's
agent events. What a tick triggers depends on the tick's own time only, so a replay of the log
decides the same whenever it runs (streams/README.md, invariant 2).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime

from schemas.codec import encode_event
from schemas.envelope import new_event_id
from schemas.memory_events import ScheduleTick
from schemas.topics import Topics
from streams.worker.pipeline import SendFn

log = logging.getLogger("engram.scheduler")


def ticks_for(partitions: int, now: datetime, interval_seconds: float) -> list[ScheduleTick]:
    """One tick per partition, all with the same time."""
    return [
        ScheduleTick(
            event_id=new_event_id(),
            occurred_at=now,
            partition=partition,
            interval_seconds=interval_seconds,
        )
        for partition in range(partitions)
    ]


async def publish_ticks(
    send: SendFn, topics: Topics, ticks: Sequence[ScheduleTick], *, timeout: float = 30.0
) -> None:
    """Write the ticks and wait until the broker has them all (bounded)."""
    deliveries = [
        await send(topics.schedule, None, encode_event(tick), tick.partition) for tick in ticks
    ]
    async with asyncio.timeout(timeout):
        await asyncio.gather(*deliveries)
    log.info("schedule tick", extra={"partitions": len(ticks)})
