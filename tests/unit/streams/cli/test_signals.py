"""How the long-running commands take SIGINT and SIGTERM: ``stop_on_signal`` keeps the first,
``unless_set`` stops ``engram demo``'s work, and the waits of ``up`` end on a stop or a child."""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from streams.cli.signals import (
    STOPPING_SIGNALS,
    StopSignal,
    stop_on_signal,
    unless_set,
    until_signalled_or_exited,
)


async def test_the_work_runs_to_its_end_when_nothing_stops_it() -> None:
    done: list[str] = []

    async def work() -> None:
        await asyncio.sleep(0)
        done.append("ended")

    assert await unless_set(asyncio.Event(), work()) is True
    assert done == ["ended"]


async def test_a_stop_already_set_starts_no_work() -> None:
    started: list[str] = []

    async def work() -> None:
        started.append("started")

    stop = asyncio.Event()
    stop.set()
    coroutine = work()
    assert await unless_set(stop, coroutine) is False
    assert started == []
    # Closed, not left pending (which would warn "never awaited" when collected).
    assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED


async def test_a_stop_cancels_the_work_and_waits_for_its_cleanup() -> None:
    cleaned: list[str] = []
    running = asyncio.Event()

    async def work() -> None:
        running.set()
        try:
            await asyncio.sleep(60)
        finally:
            await asyncio.sleep(0)  # a cleanup that awaits, as closing a producer does
            cleaned.append("cleaned up")

    stop = asyncio.Event()

    async def stop_once_running() -> None:
        await running.wait()
        stop.set()

    stopper = asyncio.create_task(stop_once_running())
    assert await asyncio.wait_for(unless_set(stop, work()), 5) is False
    await stopper
    assert cleaned == ["cleaned up"]


async def test_the_work_s_own_failure_is_raised() -> None:
    async def work() -> None:
        raise ValueError("the demo failed")

    with pytest.raises(ValueError, match="the demo failed"):
        await unless_set(asyncio.Event(), work())


async def test_a_cancel_of_the_caller_during_the_cleanup_is_not_lost() -> None:
    """SIGTERM, then Ctrl-C while the demo cleans up: the caller is cancelled, not told that
    the work was merely stopped."""
    cleaning = asyncio.Event()

    async def work() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            cleaning.set()
            await asyncio.sleep(60)  # a cleanup that takes long

    stop = asyncio.Event()
    caller = asyncio.create_task(unless_set(stop, work()))
    await asyncio.sleep(0)
    stop.set()
    await asyncio.wait_for(cleaning.wait(), 5)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(caller, 5)
    assert caller.cancelled()


async def test_stop_on_signal_is_set_by_a_signal_and_says_which() -> None:
    loop = asyncio.get_running_loop()
    stop = stop_on_signal()
    try:
        assert not stop.is_set()
        assert stop.signal is None
        os.kill(os.getpid(), signal.SIGINT)  # a handler of the loop's: no KeyboardInterrupt
        await asyncio.wait_for(stop.wait(), 5)
        assert stop.signal == signal.SIGINT
    finally:
        for sig in STOPPING_SIGNALS:
            loop.remove_signal_handler(sig)


async def test_outside_the_main_thread_stop_on_signal_takes_no_signal() -> None:
    """Only the main thread can; a command run in another (a test's runner) is stopped by
    other means."""
    stop = await asyncio.to_thread(lambda: asyncio.run(_stop_on_signal()))
    assert not stop.is_set()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


async def _stop_on_signal() -> StopSignal:
    return stop_on_signal()


def test_up_waits_until_a_stop_or_a_child_exits() -> None:
    async def waited(children: list[subprocess.Popen[bytes]], stopped: bool) -> int | None:
        stop = asyncio.Event()
        if stopped:
            stop.set()
        return await asyncio.wait_for(until_signalled_or_exited(children, None, stop), 5)

    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    exited = subprocess.Popen([sys.executable, "-c", "raise SystemExit(7)"])
    try:
        exited.wait(30)
        # A stop set while the stack started ends the wait at once, whatever runs.
        assert asyncio.run(waited([running], stopped=True)) is None
        assert asyncio.run(waited([running, exited], stopped=False)) == 7
    finally:
        running.kill()
        running.wait(10)


SECOND_SIGNAL = """
import asyncio, os, signal, sys
from pathlib import Path
from streams.cli.signals import stop_on_signal

async def main():
    stop = stop_on_signal(second_at_once=sys.argv[2] == "at once")
    stop.at_once(lambda: Path(sys.argv[1]).write_text("killed"))
    os.kill(os.getpid(), signal.SIGHUP)
    await stop.wait()
    print(stop.signal.name, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)  # a second: at once, whatever the command was doing
    await asyncio.sleep(0.5 if sys.argv[2] == "once" else 10)
    print("not stopped", flush=True)

asyncio.run(main())
"""


def test_a_second_signal_kills_the_children_and_exits_at_once(tmp_path: Path) -> None:
    """A terminal that closes (SIGHUP) stops a command as Ctrl-C does; a second signal does
    not wait for a start, a drain or an archive to end."""
    killed = tmp_path / "killed"
    done = subprocess.run(
        [sys.executable, "-c", SECOND_SIGNAL, str(killed), "at once"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert done.stdout.split() == ["SIGHUP"]
    assert "SIGTERM again: stopping at once" in done.stderr
    assert killed.read_text() == "killed"


CAUTIOUS = """
import asyncio, os, signal, sys
from pathlib import Path
from streams.cli.signals import stop_on_signal

async def main():
    stop = stop_on_signal()
    stop.at_once(lambda: Path(sys.argv[1]).write_text("killed"))
    stop.caution(lambda: "the log is being archived")
    os.kill(os.getpid(), signal.SIGINT)
    await stop.wait()
    await asyncio.sleep(0.3)
    os.kill(os.getpid(), signal.SIGINT)  # a second: a warning, not a stop
    await asyncio.sleep(0.3)
    print("still archiving", flush=True)
    os.kill(os.getpid(), signal.SIGINT)  # a third: at once
    await asyncio.sleep(10)
    print("not stopped", flush=True)

asyncio.run(main())
"""


def test_a_second_signal_that_would_lose_data_asks_for_a_third(tmp_path: Path) -> None:
    """`engram up` archives the broker's in-memory log as it stops: a second Ctrl-C there
    stopped at once, and lost everything since the stack started."""
    killed = tmp_path / "killed"
    done = subprocess.run(
        [sys.executable, "-c", CAUTIOUS, str(killed)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 128 + signal.SIGINT, done.stderr
    assert done.stdout.split() == ["still", "archiving"]
    assert "Ctrl-C again: the log is being archived; once more stops at once" in done.stderr
    assert killed.read_text() == "killed"


def test_a_server_that_raises_the_signal_again_is_stopped_once() -> None:
    """``engram mcp``: uvicorn takes the signal and raises it again once down, so the loop
    sees it twice; that is one stop."""
    done = subprocess.run(
        [sys.executable, "-c", SECOND_SIGNAL, "/nonexistent/killed", "once"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["SIGHUP", "not", "stopped"]


NOHUP = """
import asyncio, os, signal
from streams.cli.signals import stop_on_signal

async def main():
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup leaves it
    stop = stop_on_signal()
    os.kill(os.getpid(), signal.SIGHUP)
    await asyncio.sleep(0.3)
    print("stopped" if stop.is_set() else "running", flush=True)

asyncio.run(main())
"""


def test_under_nohup_a_closed_terminal_does_not_stop_the_command() -> None:
    done = subprocess.run([sys.executable, "-c", NOHUP], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["running"]


def test_the_same_signal_delivered_twice_at_once_is_one() -> None:
    """`timeout` delivers its signal twice (to the command, then to its process group): the
    echo must not stop `engram up` at once, skipping its archive. (Were it taken for a second
    signal, this test's process would end here.)"""
    stop = StopSignal()
    stop.received(signal.SIGTERM)
    stop.received(signal.SIGTERM)
    assert stop.signal == signal.SIGTERM
    assert stop.is_set()
