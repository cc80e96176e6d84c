"""What a test that is about to time out is waiting for.

pytest-timeout prints the stack of every thread when a test passes its timeout, but a test stuck
in asyncio shows only its event loop waiting in ``select``: the coroutine that never finishes is
not on any thread's stack. A few seconds before the timeout, this report prints the stack of
every unfinished task of every open event loop (the test's, and a Faust consumer thread's if one
is still alive) to the test's captured stderr, which a failed test's report shows.
"""

from __future__ import annotations

import asyncio
import gc
import io
import sys
import threading
from collections.abc import Generator

import pytest

__all__ = ["pytest_runtest_call", "unfinished_tasks_report"]

_AHEAD = 8.0
"""Seconds before the timeout at which the report is printed."""


def unfinished_tasks_report() -> str:
    """The stacks of the unfinished tasks of every event loop not yet closed."""
    out = io.StringIO()
    loops = [obj for obj in gc.get_objects() if isinstance(obj, asyncio.AbstractEventLoop)]
    for loop in loops:
        if loop.is_closed():
            continue
        try:
            tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
        except RuntimeError as exc:  # the set changed while read from this thread
            out.write(f"loop {id(loop):#x}: tasks unreadable ({exc})\n")
            continue
        out.write(f"loop {id(loop):#x} (running: {loop.is_running()}): {len(tasks)} tasks\n")
        for task in tasks:
            out.write(f"  {task.get_name()}:\n")
            for line in _awaiting(task.get_coro()):
                out.write(f"    {line}\n")
    return out.getvalue()


def _awaiting(coro: object) -> list[str]:
    """Where a task's coroutine waits, down its chain of awaits: a task's own stack shows its
    outermost frame only while it is suspended."""
    lines = []
    while coro is not None and len(lines) < 40:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            code = frame.f_code
            lines.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}")
        else:
            lines.append(repr(coro))
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return lines


def _timeout_of(item: pytest.Item) -> float | None:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    try:
        value = item.config.getini("timeout")
    except ValueError:
        return None
    return float(value) if value else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    timeout = _timeout_of(item)
    timer = None
    if timeout is not None and timeout > 2 * _AHEAD:

        def report() -> None:
            sys.stderr.write(
                f"\n--- {item.nodeid} is still running {timeout - _AHEAD:.0f} s in; its "
                f"unfinished asyncio tasks:\n{unfinished_tasks_report()}---\n"
            )
            sys.stderr.flush()

        timer = threading.Timer(timeout - _AHEAD, report)
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
