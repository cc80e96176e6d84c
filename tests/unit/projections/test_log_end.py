"""KnownLogEnds: which positions the log does not hold, asking the broker as little as possible
and never with an answer older than the retrieval."""

from __future__ import annotations

import asyncio
from collections.abc import Collection

import pytest

from projections.retrieval.log_end import KnownLogEnds

pytestmark = pytest.mark.timeout(30)

TOPIC = "agent.observations"


class Broker:
    """Ends that grow as records are published; a lookup may be held until ``release``."""

    def __init__(self, **ends: int) -> None:
        self.ends = {(TOPIC, int(p.removeprefix("p"))): end for p, end in ends.items()}
        self.asked: list[frozenset[tuple[str, int]]] = []
        self.hold: asyncio.Event | None = None
        self.failure: Exception | None = None

    async def __call__(self, partitions: Collection[tuple[str, int]]) -> dict[tuple[str, int], int]:
        self.asked.append(frozenset(partitions))
        answer = {key: self.ends[key] for key in partitions if key in self.ends}
        if self.hold is not None:
            await self.hold.wait()
        if self.failure is not None:
            raise self.failure
        return answer


async def test_positions_past_the_end_or_on_no_partition_are_missing() -> None:
    known = KnownLogEnds(Broker(p0=5))
    missing = await known.beyond({(TOPIC, 0): 5, (TOPIC, 3): 0})
    assert missing == {(TOPIC, 0): 5, (TOPIC, 3): None}
    assert await known.beyond({(TOPIC, 0): 4}) == {}


async def test_a_burst_shares_its_lookups() -> None:
    """While one lookup runs, the retrievals arriving take the next one together."""
    broker = Broker(p0=100, p1=100)
    broker.hold = asyncio.Event()
    known = KnownLogEnds(broker)
    first = asyncio.create_task(known.beyond({(TOPIC, 0): 150}))
    await asyncio.sleep(0.01)
    burst = [asyncio.create_task(known.beyond({(TOPIC, i % 2): 200 + i})) for i in range(20)]
    await asyncio.sleep(0.01)
    broker.hold.set()
    answers = await asyncio.gather(first, *burst)
    assert answers[0] == {(TOPIC, 0): 100}
    assert all(len(answer) == 1 for answer in answers)
    assert len(broker.asked) == 2
    assert broker.asked[1] == {(TOPIC, 0), (TOPIC, 1)}


async def test_a_lookup_older_than_the_retrieval_is_not_trusted() -> None:
    """A lookup that started before the retrieval arrived may predate the record it waits
    for: the record published meanwhile must not be refused."""
    broker = Broker(p0=5)
    broker.hold = asyncio.Event()
    known = KnownLogEnds(broker)
    early = asyncio.create_task(known.beyond({(TOPIC, 0): 9}))
    await asyncio.sleep(0.01)
    broker.ends[(TOPIC, 0)] = 6  # published at offset 5 while the first lookup ran
    late = asyncio.create_task(known.beyond({(TOPIC, 0): 5}))
    await asyncio.sleep(0.01)
    broker.hold.set()
    assert await early == {(TOPIC, 0): 5}
    assert await late == {}
    assert len(broker.asked) == 2


async def test_a_failed_lookup_knows_nothing_missing() -> None:
    broker = Broker(p0=5)
    broker.failure = ConnectionError("broker unreachable")
    known = KnownLogEnds(broker)
    assert await known.beyond({(TOPIC, 0): 7}) == {}
    broker.failure = None
    assert await known.beyond({(TOPIC, 0): 7}) == {(TOPIC, 0): 5}


async def test_a_hanging_lookup_is_given_up() -> None:
    broker = Broker(p0=5)
    broker.hold = asyncio.Event()
    known = KnownLogEnds(broker, timeout_s=0.05)
    assert await known.beyond({(TOPIC, 0): 7}) == {}
    broker.hold.set()
    assert await known.beyond({(TOPIC, 0): 7}) == {(TOPIC, 0): 5}


async def test_made_up_partitions_are_not_kept() -> None:
    """Only ends of partitions that exist are cached, so made-up partition numbers cost no
    memory."""
    broker = Broker(p0=5)
    known = KnownLogEnds(broker)
    assert await known.beyond({(TOPIC, 0): 9}) == {(TOPIC, 0): 5}
    for partition in range(1, 50):
        assert await known.beyond({(TOPIC, partition): 0}) == {(TOPIC, partition): None}
    assert known._ends == {(TOPIC, 0): 5}
