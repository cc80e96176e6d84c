"""Ending a background loop on stop, when one cancellation can be lost.

Python 3.11's ``asyncio.wait_for`` returns its inner result and drops a cancellation that
arrives as that result does (fixed in 3.12), and redis-py sends every command through it when
a socket timeout is set. A loop cancelled in that instant goes on to its next turn as if
nothing happened, and a stop that awaits it waits forever: a worker asked to stop once hung
that way releasing the Qdrant Edge holder lease, its renewal loop back asleep after the
cancellation. :func:`cancel_and_wait` cancels again while the task runs, within a bound.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

__all__ = ["LOOP_END_WITHIN_S", "RECANCEL_EVERY_S", "cancel_and_wait"]

log = logging.getLogger("engram.tasks")

RECANCEL_EVERY_S = 1.0
"""How long a cancelled task gets to end before it is cancelled again: a lost cancellation
leaves the task at its next await (a loop's sleep), where the next one ends it; a task that
cleans up when cancelled gets this long before that cleanup is interrupted."""

LOOP_END_WITHIN_S = 5.0
"""What a stop gives a background loop of Redis calls (a lease's renewal, a heartbeat) to end:
a few re-cancellations, and half the 10 s socket timeout that could hold a command."""


async def cancel_and_wait(task: asyncio.Task[Any], *, within: float) -> bool:
    """Cancel ``task`` and wait for it to end, at most ``within`` seconds: True if it ended.

    The task's own exception, if it failed before, is retrieved and not raised: a loop that
    is being stopped has nothing left to report. One that does not end is left running, with
    a warning naming it, rather than hold up the rest of the stop.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not task.done():
        remaining = deadline - loop.time()
        if remaining <= 0:
            log.warning("%s did not end within %g s of being cancelled", task.get_name(), within)
            return False
        task.cancel()
        await asyncio.wait({task}, timeout=min(RECANCEL_EVERY_S, remaining))
    if not task.cancelled():
        task.exception()
    return True
