"""The handoff of a fetched record without tasks: same winners, results, errors and
cancellations as mode's ``wait_first``, which it falls back on whenever the record waits."""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mode import Service

from streams.settings import EngramSettings
from streams.worker.app import create_processor_app
from streams.worker.faust_handoff import Resumed, wait_first_started


class Counted:
    """mode's own ``wait_first`` of a real service, counting the calls that reach it."""

    def __init__(self) -> None:
        self.service = Service()
        self.calls = 0

    async def __call__(self, *awaitables: Any, timeout: Any = None) -> Any:
        self.calls += 1
        return await self.service.wait_first(*awaitables, timeout=timeout)


async def immediate(value: int) -> int:
    return value


async def suspended(gate: asyncio.Future[int], seen: list[str]) -> int:
    try:
        await asyncio.sleep(0)  # a bare yield first, then a future
        value = await gate
    except asyncio.CancelledError:
        seen.append("cancelled")
        raise
    seen.append("done")
    return value + 1


async def test_a_coroutine_done_without_suspending_wins_alone_and_makes_no_task() -> None:
    mode = Counted()
    flow = asyncio.Event()
    other = flow.wait()
    results = await wait_first_started(mode, lambda: False, immediate(7), other)
    assert (len(results.done), results.results, results.stopped) == (1, [7], False)
    assert mode.calls == 0
    assert inspect.getcoroutinestate(other) == inspect.CORO_CLOSED


@dataclass
class Waiting:
    """A handoff suspended on ``gate`` under mode's ``wait_first``, the flow's event beside it."""

    mode: Counted
    gate: asyncio.Future[int]
    flow: asyncio.Event
    seen: list[str]
    results: asyncio.Future[Any]

    @classmethod
    async def started(cls) -> Waiting:
        mode, flow, seen = Counted(), asyncio.Event(), list[str]()
        gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        results = asyncio.ensure_future(
            wait_first_started(mode, lambda: False, suspended(gate, seen), flow.wait())
        )
        for _ in range(3):
            await asyncio.sleep(0)
        return cls(mode, gate, flow, seen, results)


async def test_a_coroutine_that_suspends_goes_on_in_modes_wait_first() -> None:
    waiting = await Waiting.started()
    assert not waiting.results.done()
    waiting.gate.set_result(41)
    results = await asyncio.wait_for(waiting.results, 5)
    assert results.results == [42]
    assert not results.stopped
    assert isinstance(results.done[0], Resumed)
    assert (waiting.mode.calls, waiting.seen) == (1, ["done"])


async def test_a_suspended_flow_cancels_a_handoff_that_waits() -> None:
    waiting = await Waiting.started()
    waiting.flow.set()
    results = await asyncio.wait_for(waiting.results, 5)
    assert results.results == [True]  # the flow's event won
    await asyncio.sleep(0)
    assert waiting.seen == ["cancelled"]


async def test_errors_reach_the_caller_before_and_after_a_suspension() -> None:
    async def fails_at_once() -> int:
        raise ValueError("bad record")

    async def fails_later(gate: asyncio.Future[int]) -> int:
        await gate
        raise KeyError("later")

    mode = Counted()
    other = asyncio.Event().wait()
    with pytest.raises(ValueError, match="bad record"):
        await wait_first_started(mode, lambda: False, fails_at_once(), other)
    assert inspect.getcoroutinestate(other) == inspect.CORO_CLOSED
    gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_later(0.01, gate.set_result, 1)
    with pytest.raises(KeyError, match="later"):
        await wait_first_started(mode, lambda: False, fails_later(gate), asyncio.Event().wait())


async def test_a_stopped_consumer_or_a_timeout_takes_modes_own_way() -> None:
    mode = Counted()
    results = await wait_first_started(mode, lambda: True, immediate(1))
    assert mode.calls == 1
    assert results.results == [1]
    results = await wait_first_started(mode, lambda: False, immediate(2), timeout=5.0)
    assert mode.calls == 2
    assert results.results == [2]


async def test_resumed_passes_a_cancellation_on_and_keeps_what_the_coroutine_makes_of_it() -> None:
    gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def shrugs() -> str:
        try:
            await gate
        except asyncio.CancelledError:
            return "cancelled, and said so"
        return "not cancelled"

    coroutine = shrugs()
    pending = coroutine.send(None)
    task = asyncio.ensure_future(Resumed(coroutine, pending))
    await asyncio.sleep(0)
    task.cancel()
    assert await asyncio.wait_for(task, 5) == "cancelled, and said so"


async def test_resumed_goes_on_when_the_coroutine_awaits_again_after_a_cancellation() -> None:
    loop = asyncio.get_running_loop()
    first: asyncio.Future[int] = loop.create_future()
    then: asyncio.Future[str] = loop.create_future()

    async def tidies_up() -> str:
        try:
            await first
        except asyncio.CancelledError:
            return await then  # e.g. a flush before giving up
        return "not cancelled"

    coroutine = tidies_up()
    task = asyncio.ensure_future(Resumed(coroutine, coroutine.send(None)))
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.sleep(0)
    then.set_result("tidied up")
    assert await asyncio.wait_for(task, 5) == "tidied up"


async def test_the_workers_faust_consumer_hands_over_without_tasks_unless_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ENGRAM_INSTANCE_ID", raising=False)
    app = create_processor_app(EngramSettings(data_dir=tmp_path), "localhost:9092").app
    consumer = app.consumer
    flow = asyncio.Event()
    try:
        running = await consumer.wait_first(immediate(5), flow.wait())
        assert (running.results, running.stopped) == ([5], False)
        assert not isinstance(running.done[0], asyncio.Future), "mode would have made a task"

        consumer._stopped.set()
        stopped = await consumer.wait_first(immediate(6), flow.wait())
        assert stopped.stopped, "a stopped consumer answers as mode does"
    finally:
        consumer._thread.thread_loop.close()  # made for the consumer's thread, never started
