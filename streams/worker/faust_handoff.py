"""How Faust's fetcher hands a record to the streams, without four tasks per record.

Faust's fetcher loop awaits ``consumer.wait_first(on_message(record), suspend_flow.wait())``
for every record: mode's ``wait_first`` wraps each awaitable in a task, adds two more for the
consumer's stopped and crashed events, waits on all four and cancels the losers. Handing a
record to a stream seldom waits (88% of records did not, draining a backlog), and that
machinery was ~9% of an ingesting worker's main thread in a profile; without it the worker
spent 32-42 us less CPU per event.

:func:`wait_first_started` runs the first awaitable's coroutine up to its first suspension
before anything else. Done by then, it is the only winner, as it would have been in mode's
version on the loop's next turn (the stopped and crashed events are checked first, and mode
goes its own way when either is set). Suspended, the coroutine goes on inside mode's
``wait_first`` as :class:`Resumed`, so a rebalance that suspends the flow still cancels a
handoff stuck on a full queue. (When several awaitables are already done, mode names them all;
this names the first, and Faust's fetcher reads none of it.)

What runs before the first suspension runs in the fetcher's task and context rather than a new
task's: ``asyncio.current_task()``, context variables and an ``asyncio.timeout`` entered there
see the fetcher. Faust's handoff (``Conductor.on_message`` and the topic's ``deliver``, in
faust-streaming 0.15) uses none of them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

from mode.services import WaitResults


class Resumed:
    """The rest of a coroutine that was started by hand and suspended on ``pending``.

    It passes what the coroutine yields to the task awaiting it, and the task's answers (a
    resumption, or an exception such as a cancellation) back to the coroutine: from here on,
    as if the task had run it (see the module docstring for what ran before).
    """

    __slots__ = ("_coroutine", "_pending")

    def __init__(self, coroutine: Coroutine[Any, Any, Any], pending: Any) -> None:
        self._coroutine = coroutine
        self._pending = pending

    def __await__(self) -> Generator[Any, None, Any]:
        coroutine, pending = self._coroutine, self._pending
        while True:
            try:
                yield pending
            except BaseException as exc:  # a cancellation, above all: the coroutine decides
                try:
                    pending = coroutine.throw(exc)
                except StopIteration as stop:
                    return stop.value
                continue
            try:
                pending = coroutine.send(None)
            except StopIteration as stop:
                return stop.value


WaitFirst = Callable[..., Awaitable[WaitResults]]


async def wait_first_started(
    wait_first: WaitFirst,
    stopped: Callable[[], bool],
    *awaitables: Any,
    timeout: float | None = None,
) -> WaitResults:
    """mode's ``wait_first(*awaitables)`` (``wait_first``), with a first coroutine that ends
    without suspending as the sole winner and no task made."""
    first = awaitables[0] if awaitables else None
    if timeout is not None or stopped() or not isinstance(first, Coroutine):
        return await wait_first(*awaitables, timeout=timeout)
    try:
        pending = first.send(None)
    except StopIteration as done:
        _close(awaitables[1:])
        return WaitResults([first], [done.value], False)
    except BaseException:
        _close(awaitables[1:])
        raise
    return await wait_first(Resumed(first, pending), *awaitables[1:])


def _close(awaitables: tuple[Any, ...]) -> None:
    """Coroutines that will not run, closed so Python does not warn that none awaited them."""
    for awaitable in awaitables:
        if isinstance(awaitable, Coroutine):
            awaitable.close()
