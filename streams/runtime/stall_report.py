"""What a process that is slow to stop is waiting in.

A worker's stop finishes its batch, commits and leaves its group: seconds. When it takes far
longer, something is waited on that will not come (a broker that does not answer, a thread or a
task that does not end: a renewal loop whose cancellation was lost, once), and the only place
that names it is the process's own stacks, gone once it is killed. :func:`reported_if_slow`
writes them to the log first. It runs in a thread of its own, so a blocked event loop is
reported as well as an idle one; asyncio tasks are listed down their chain of awaits, since a
suspended task's own stack holds its outermost frame only.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import io
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["reported_if_slow", "stall_report", "unfinished_tasks_report"]

_MAX_AWAITS = 40
_FRAMES = ("cr_frame", "gi_frame", "ag_frame")
_AWAITS = ("cr_await", "gi_yieldfrom", "ag_await")


def stall_report() -> str:
    """Every thread's stack, then the unfinished tasks of every event loop not yet closed."""
    out = io.StringIO()
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        out.write(f"thread {names.get(ident, ident)}:\n")
        for line in traceback.format_stack(frame, limit=15):
            out.write(line)
    out.write(unfinished_tasks_report())
    return out.getvalue()


def unfinished_tasks_report() -> str:
    """The unfinished tasks of every event loop not yet closed, each down its awaits."""
    out = io.StringIO()
    # By type, not isinstance: isinstance also reads each object's __class__, and a deprecated
    # module attribute warns when read (torch.distributed.reduce_op, once the MiniLM extra has
    # loaded torch), so every report warned, and failed where warnings are errors.
    loops = [obj for obj in gc.get_objects() if issubclass(type(obj), asyncio.AbstractEventLoop)]
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
    lines: list[str] = []
    while coro is not None and len(lines) < _MAX_AWAITS:
        frame = next((f for name in _FRAMES if (f := getattr(coro, name, None)) is not None), None)
        if frame is None:
            # An async generator's step (``asend``, as for a fixture's teardown) names its
            # generator only to the collector; follow it there.
            generators = [r for r in gc.get_referents(coro) if inspect.isasyncgen(r)]
            if generators:
                coro = generators[0]
                continue
            lines.append(repr(coro))
            break
        code = frame.f_code
        lines.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}")
        coro = next((a for name in _AWAITS if (a := getattr(coro, name, None)) is not None), None)
    return lines


@contextmanager
def reported_if_slow(after: float, say: Callable[[str], None]) -> Iterator[None]:
    """Hand :func:`stall_report` to ``say`` once if the block is still running ``after``
    seconds in (a worker logs it; the test suite writes it to a test's captured output)."""
    timer = threading.Timer(after, lambda: say(stall_report()))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
