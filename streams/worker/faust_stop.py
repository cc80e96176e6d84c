"""A bounded stop of Faust: a worker that was asked to stop exits within a bound, even when the
thread of Faust's Kafka consumer does not end.

Faust stops its consumer thread by cancelling every task on that thread's event loop and
waiting for all of them (mode's ``ServiceThread._gather_remaining_tasks``). A task that does not
end on cancellation (a driver's request to a broker that never answers) keeps that wait, and so
the stop, going forever: seen on two shared cores, where a worker asked to stop for a new
projection version said "ConsumerThread: Stopping..." and nothing more for 90 s. The thread is
no daemon, so the process could not even exit.

So the stop is given :data:`STOP_WITHIN_S`; past it, the consumer thread's loop is stopped from
outside and the thread ends. Nothing is lost: the worker is crash-only, a batch whose offsets
were not committed is read again by the next owner, and the batch markers keep it from being
derived twice.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from mode import Service

log = logging.getLogger("engram.runtime")

STOP_WITHIN_S = 20.0
"""How long Faust's own stop may take (it commits, flushes and leaves the group: about a second
here when the broker answers)."""

JOIN_S = 5.0
"""How long the consumer thread is given to end once its loop is stopped."""


class ForcedStop:
    """Mixed into a mode ``ServiceThread``: :meth:`force_stop` ends the thread whatever its
    tasks do, and the loop stopped under it is not reported as a crash of the thread."""

    thread_loop: asyncio.AbstractEventLoop
    _forced: bool = False

    def _start_thread(self) -> None:
        try:
            super()._start_thread()  # type: ignore[misc]
        except RuntimeError:
            # "Event loop stopped before Future completed": what force_stop asked for.
            if not self._forced:
                raise

    async def stop(self) -> None:
        """mode's ``ServiceThread.stop``, but its wait for the thread to end is bounded and
        leaves the loop free (mode waits with a blocking, unbounded join): a thread still
        running after :data:`JOIN_S` is ended by :meth:`force_stop`."""
        if not self._started.is_set():  # type: ignore[attr-defined]
            return
        await Service.stop(self)  # type: ignore[arg-type]
        thread: threading.Thread | None = getattr(self, "_thread", None)
        if thread is not None:
            await asyncio.to_thread(thread.join, JOIN_S)
            if thread.is_alive():
                log.warning("Faust's consumer thread did not end when stopped: ended it")
                await asyncio.to_thread(self.force_stop)

    def force_stop(self, join_s: float = JOIN_S) -> bool:
        """Stop the thread's event loop and wait up to ``join_s`` for the thread to end;
        whether it ended."""
        self._forced = True
        loop = self.thread_loop
        if not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        thread: threading.Thread | None = getattr(self, "_thread", None)
        if thread is None:
            return True
        thread.join(join_s)
        return not thread.is_alive()


async def stop_within(
    stop: Callable[[], Awaitable[Any]],
    thread: ForcedStop | None,
    seconds: float = STOP_WITHIN_S,
) -> bool:
    """Run ``stop`` (Faust's ``app.stop``) for at most ``seconds``; past them, end ``thread``
    (the consumer's). Whether ``stop`` finished by itself.

    Not ``asyncio.wait_for``: it waits for the cancelled stop to finish, and mode's stop, waiting
    on the hung thread, does not."""
    stopping = asyncio.ensure_future(stop())
    done, _ = await asyncio.wait({stopping}, timeout=seconds)
    if done:
        stopping.result()
        return True
    ended = thread is None or await asyncio.to_thread(thread.force_stop)
    # With its thread gone, Faust's stop may end now; it is given a moment, no more.
    done, _ = await asyncio.wait({stopping}, timeout=JOIN_S)
    if not done:
        stopping.cancel()
    log.warning(
        "Faust did not stop within %.0f s: its consumer thread was %s; a batch not "
        "committed is read again by the partitions' next owner",
        seconds,
        "ended" if ended else "left running",
    )
    return False
