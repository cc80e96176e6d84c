"""A worker's batches from a real Faust stream (an agent's test context, no broker): what
arrives while a batch runs waits in the buffer for the next, batches keep the stream's order
within ``max_``, each is acknowledged once its body is done, and an idle stream sleeps."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import faust
import pytest
from faust.types import EventT

from streams.worker.faust_batches import BACKLOG_RATE, BACKLOG_WAITS, _linger, take_batches

Body = Callable[[list[EventT[Any]]], Awaitable[None]]


@asynccontextmanager
async def agent_taking(
    body: Body, max_: int, within: float, *, channel_size: int = 0, watch: Any = None
) -> AsyncIterator[Any]:
    """An agent whose batches (from :func:`take_batches`) go to ``body``; ``watch`` sees its
    stream first."""
    app = faust.App(
        f"batches-{random.randrange(1 << 30)}",
        broker="kafka://127.0.0.1:1",  # never dialled: the test context feeds a channel
        store="memory://",
        web_enabled=False,
    )

    async def take(stream: faust.StreamT[Any]) -> None:
        if watch is not None:
            watch(stream)
        async for events in take_batches(stream, max_, within):
            await body(events)

    agent = app.agent()(take)
    channel = app.channel(maxsize=channel_size) if channel_size else None
    try:
        async with agent.test_context(channel=channel) as running:
            yield running
    finally:
        # The stream's iterator makes the app's Kafka consumer (never started): its thread's
        # loop is made with it.
        app.consumer._thread.thread_loop.close()


async def until(condition: Callable[[], bool], within: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)


class FirstHeld:
    """A body that records each batch's values and holds the first until ``release`` is set."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.release = asyncio.Event()

    async def __call__(self, events: list[EventT[Any]]) -> None:
        self.batches.append([e.value for e in events])
        if len(self.batches) == 1:
            await self.release.wait()


async def test_what_arrives_while_a_batch_runs_waits_in_the_buffer_for_the_next() -> None:
    """Faust's take_events admits one record while a batch is out and leaves the rest in the
    channel: with a channel of one, the third put would wait for the batch to end."""
    body = FirstHeld()
    batches, release = body.batches, body.release

    async with agent_taking(body, 50, 0.01, channel_size=1) as agent:
        await agent.put(0)
        await until(lambda: bool(batches))
        await asyncio.wait_for(asyncio.gather(*(agent.put(i) for i in range(1, 21))), 5)
        assert batches == [[0]], "the first batch is still out"
        release.set()
        await until(lambda: sum(map(len, batches)) == 21)
    assert batches == [[0], list(range(1, 21))]


async def test_a_full_buffer_holds_the_stream_until_a_batch_takes_it() -> None:
    body = FirstHeld()
    batches, release = body.batches, body.release
    puts_done = asyncio.Event()

    async with agent_taking(body, 3, 0.01, channel_size=1) as agent:
        await agent.put(0)
        await until(lambda: bool(batches))

        async def put_all() -> None:
            for i in range(1, 8):
                await agent.put(i)
            puts_done.set()

        putting = asyncio.ensure_future(put_all())
        await asyncio.sleep(0.1)
        assert not puts_done.is_set(), "3 buffered, 1 in the channel: the next put waits"
        release.set()
        await asyncio.wait_for(putting, 5)
        await until(lambda: sum(map(len, batches)) == 8)
    assert batches[0] == [0]
    assert batches[1] == [1, 2, 3]
    assert [v for b in batches[2:] for v in b] == [4, 5, 6, 7]


async def test_a_batch_waits_within_for_more_unless_it_is_full() -> None:
    batches: list[list[int]] = []

    async def body(events: list[EventT[Any]]) -> None:
        batches.append([e.value for e in events])

    async with agent_taking(body, 3, 1.0) as agent:
        for i in range(3):
            await agent.put(i)
        await until(lambda: len(batches) == 1, within=0.8)  # full: not a second's wait
        await agent.put(3)
        await asyncio.sleep(0.05)
        await agent.put(4)
        await until(lambda: len(batches) == 2)
    assert batches == [[0, 1, 2], [3, 4]], "the lone record waited for the next"


async def test_batches_keep_the_order_and_the_bound_and_lose_nothing() -> None:
    batches: list[list[int]] = []
    rng = random.Random(3)

    async def body(events: list[EventT[Any]]) -> None:
        batches.append([e.value for e in events])
        await asyncio.sleep(rng.choice([0, 0.001, 0.01]))

    async with agent_taking(body, 7, 0.002) as agent:
        for i in range(300):
            await agent.put(i)
            if rng.random() < 0.1:
                await asyncio.sleep(0.003)
        await until(lambda: sum(map(len, batches)) == 300)
    assert [v for b in batches for v in b] == list(range(300))
    assert max(map(len, batches)) <= 7
    assert len(batches) < 300, "records that arrive together are taken together"


async def test_a_batch_is_acknowledged_once_its_body_is_done() -> None:
    seen: list[tuple[list[EventT[Any]], list[bool]]] = []

    async def body(events: list[EventT[Any]]) -> None:
        seen.append((events, [e.message.acked for e in events]))

    async with agent_taking(body, 10, 0.01) as agent:
        for i in range(5):
            await agent.put(i)
        await until(lambda: sum(len(s[0]) for s in seen) == 5)
        await until(lambda: all(e.message.acked for s in seen for e in s[0]))
    assert all(not acked for _, flags in seen for acked in flags), "acked before its body ran"


async def test_an_idle_stream_waits_for_its_first_record_without_a_timer() -> None:
    """Faust's take_events wakes every ``within`` to find nothing: ~100 times here."""
    waits: list[float | None] = []
    batches: list[list[int]] = []

    def watch(stream: Any) -> None:
        wait_for_stopped = stream.wait_for_stopped

        async def counted(*awaitables: Any, timeout: float | None = None) -> Any:
            waits.append(timeout)
            return await wait_for_stopped(*awaitables, timeout=timeout)

        stream.wait_for_stopped = counted

    async def body(events: list[EventT[Any]]) -> None:
        batches.append([e.value for e in events])

    async with agent_taking(body, 10, 0.002, watch=watch) as agent:
        await agent.put(0)
        await until(lambda: bool(batches))
        before = len(waits)
        await asyncio.sleep(0.2)
        assert len(waits) - before <= 1, waits[before:]
        await agent.put(1)
        await until(lambda: len(batches) == 2)
    assert batches == [[0], [1]]


@pytest.mark.parametrize(("max_", "within"), [(0, 0.01), (5, 0.0)])
async def test_a_bound_that_could_never_yield_is_refused(max_: int, within: float) -> None:
    with pytest.raises(ValueError, match="take_batches"):
        await anext(take_batches(object(), max_, within))  # type: ignore[arg-type]


class Arrivals:
    """A stream whose every wait of ``within`` brings the next number of records in ``arrivals``
    (and, like mode, answers True on a timeout)."""

    def __init__(self, buffer: list[Any], arrivals: list[int], max_: int) -> None:
        self.buffer, self.arrivals, self.max_ = buffer, arrivals, max_
        self.full = asyncio.Event()
        self.should_stop = False
        self.waits = 0

    async def wait_for_stopped(self, event: asyncio.Event, timeout: float | None = None) -> bool:
        self.waits += 1
        come = self.arrivals.pop(0) if self.arrivals else 0
        self.buffer.extend([None] * min(come, self.max_ - len(self.buffer)))
        if len(self.buffer) >= self.max_:
            self.full.set()
        return True


async def linger(start: int, arrivals: list[int], max_: int = 2000) -> Arrivals:
    stream = Arrivals([None] * start, arrivals, max_)
    await _linger(stream, stream.buffer, stream.full, 0.005)
    return stream


async def test_a_steady_stream_waits_within_once() -> None:
    """1,000 records a second: ~40 buffered when the batch ends, ~5 more in 5 ms."""
    stream = await linger(40, [5, 5, 5, 5])
    assert stream.waits == 1
    assert len(stream.buffer) == 45


async def test_a_backlog_waits_on_while_records_keep_coming_until_the_batch_is_full() -> None:
    assert round(BACKLOG_RATE * 0.005) * BACKLOG_WAITS <= 500
    stream = await linger(500, [300] * 20)
    assert len(stream.buffer) == 2000
    assert stream.waits == 5  # 500 + 5 x 300 fills it


async def test_a_backlog_stops_waiting_when_the_records_stop_coming() -> None:
    stream = await linger(500, [300, 300, 2, 300])
    assert stream.waits == 3
    assert len(stream.buffer) == 1102


async def test_a_backlog_waits_at_most_backlog_waits_more_times() -> None:
    stream = await linger(500, [30] * 40, max_=100_000)
    assert stream.waits == 1 + BACKLOG_WAITS


async def test_a_stopping_stream_stops_waiting() -> None:
    stream = Arrivals([None] * 500, [300] * 20, 2000)
    stream.should_stop = True
    await _linger(stream, stream.buffer, stream.full, 0.005)
    assert stream.waits == 1
