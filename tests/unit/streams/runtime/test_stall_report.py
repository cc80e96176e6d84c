import asyncio
import logging
import threading
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import pytest

from streams.cli.stack import STOP_REPORTED_AFTER_S, _still_stopping
from streams.runtime.stall_report import reported_if_slow, stall_report, unfinished_tasks_report


@contextmanager
def _loop_waiting_in_another_thread(*, in_a_generator: bool = False) -> Iterator[None]:
    """A loop in a thread of its own whose task waits for an event nobody sets; with
    ``in_a_generator``, inside an async generator's step (as a fixture's teardown does)."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    never = asyncio.Event()  # set by the test once it has read the report, never by the task

    async def waits_for_a_shutdown_nobody_sets(never: asyncio.Event) -> None:
        started.set()
        await never.wait()

    async def tears_down(never: asyncio.Event) -> AsyncIterator[None]:
        yield
        await waits_for_a_shutdown_nobody_sets(never)

    async def main() -> None:
        if in_a_generator:
            steps = tears_down(never)
            await anext(steps)
            await asyncio.gather(anext(steps), return_exceptions=True)  # StopAsyncIteration
        else:
            await asyncio.ensure_future(waits_for_a_shutdown_nobody_sets(never))

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), name="stuck")
    thread.start()
    try:
        assert started.wait(5)
        yield
    finally:
        loop.call_soon_threadsafe(never.set)
        thread.join(5)
        loop.close()


class _WarnsWhenItsClassIsRead:
    """What a deprecated module attribute of typing_extensions is to ``isinstance`` (torch's
    ``torch.distributed.reduce_op``): an object that warns when its ``__class__`` is read."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # type: ignore[override]
        warnings.warn("deprecated", FutureWarning, stacklevel=2)
        return type(self)


def test_an_object_that_warns_when_its_class_is_read_does_not_stop_the_report() -> None:
    held = _WarnsWhenItsClassIsRead()
    with _loop_waiting_in_another_thread(), warnings.catch_warnings():
        warnings.simplefilter("error")
        report = unfinished_tasks_report()
    assert "waits_for_a_shutdown_nobody_sets" in report
    assert held is not None  # alive while the report walked the collector's objects


@pytest.mark.parametrize("in_a_generator", [False, True], ids=["task", "async-generator"])
def test_the_report_follows_a_task_down_its_awaits_in_a_loop_of_another_thread(
    in_a_generator: bool,
) -> None:
    with _loop_waiting_in_another_thread(in_a_generator=in_a_generator):
        report = unfinished_tasks_report()
    assert "in waits_for_a_shutdown_nobody_sets" in report
    assert "locks.py" in report  # down the chain: asyncio.Event.wait
    if in_a_generator:
        assert "in tears_down" in report


def test_a_closed_loop_is_left_out() -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    assert f"{id(loop):#x}" not in unfinished_tasks_report()


def test_the_report_names_every_thread_with_its_stack() -> None:
    with _loop_waiting_in_another_thread():
        report = stall_report()
    assert "thread stuck:" in report
    assert "thread MainThread:" in report
    assert "in test_the_report_names_every_thread_with_its_stack" in report


def test_a_slow_block_is_reported_once_and_a_quick_one_never() -> None:
    said: list[str] = []
    with reported_if_slow(0.3, said.append):
        pass
    time.sleep(0.5)
    with reported_if_slow(0.1, said.append):
        # Slow until reported (bounded): a loaded machine may take a while to write it.
        deadline = time.monotonic() + 10
        while not said and time.monotonic() < deadline:
            time.sleep(0.02)
    assert len(said) == 1
    assert said[0].startswith("thread ")
    assert "in test_a_slow_block_is_reported_once_and_a_quick_one_never" in said[0]


def test_a_worker_still_stopping_logs_one_warning_with_the_report(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="engram.cli"):
        _still_stopping("thread MainThread:\n  ...")
    assert caplog.messages == [
        f"stopping is taking over {STOP_REPORTED_AFTER_S:.0f} s; waiting in:\n"
        "thread MainThread:\n  ..."
    ]
