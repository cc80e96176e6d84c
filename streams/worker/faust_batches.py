"""A worker's batches from a Faust stream: what arrived while the last batch ran is the next.

Faust's ``Stream.take_events(max_, within)`` buffers records from the stream and yields them
every ``within`` seconds, or at once when ``max_`` are in. While a batch is out, its buffer
admits one record more and then holds the stream still; once the batch is done it waits the
full ``within`` again. Both cost a worker:

- At a steady rate, every record waits out ``within`` after the batch before it, whatever
  arrived meanwhile: with 50 ms, publish-to-queryable at 1,000 events/s was ~120 ms at the
  median, of which batches took ~45.
- A short ``within`` cures that, but the records that arrive while a batch runs then queue in
  Faust's channel rather than the buffer, and the fetcher, its channel full, stops fetching: in
  a backlog, batches of 5 ms were ~130 records at the median against ~1,300 with 50 ms, and a
  worker feeding the episodic projector (one record batch per partition and batch) made it
  spend twice the CPU per event.

:func:`take_batches` keeps buffering while a batch is out (up to ``max_`` records, then it
holds the stream as Faust does), and when the batch is done waits ``within`` for more, unless
the buffer is full already, and longer while a backlog keeps coming (:data:`BACKLOG_RATE`). So
a backlog comes in full batches, a steady stream in batches of what arrived during the last
one, and at a steady rate below the worker's capacity each record waits for at most one batch
and ``within``. An idle stream waits for its first record without a timer (Faust's wakes every
``within``).

It uses Faust 0.15's stream internals the way ``take_events`` does (a processor fed by the
stream's passive drainer, acks turned off and done once the batch's body returned); a Faust
upgrade should be read against it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from faust.types import EventT, StreamT

__all__ = ["take_batches"]

BACKLOG_RATE = 4_000
"""Records a second that mark a backlog. A batch whose buffer, once it waited ``within``, holds
at least :data:`BACKLOG_WAITS` waits' worth of them waits on, ``within`` at a time, while each
wait brings a wait's worth, up to :data:`BACKLOG_WAITS` more waits: so a backlog comes in full
batches. Measured: Faust hands a backlog's records over at up to ~16,000 a second, and the
buffer of a worker keeping up with 1,000 a second holds ~40 then (5 ms: a backlog's worth is
200)."""

BACKLOG_WAITS = 10


async def take_batches(
    stream: StreamT[Any], max_: int, within: float
) -> AsyncGenerator[list[EventT[Any]], None]:
    """The events of ``stream`` in batches of at most ``max_``, each acknowledged once the
    code that took it hands control back (as ``take_events`` does)."""
    if max_ < 1 or within <= 0:
        raise ValueError(f"take_batches needs max_ >= 1 and within > 0, got {max_}, {within}")
    buffer: list[EventT[Any]] = []
    arrived, full, room = asyncio.Event(), asyncio.Event(), asyncio.Event()
    room.set()
    s: Any = stream  # Faust's private parts: _enable_passive, _processors

    async def add_to_buffer(value: Any) -> Any:
        try:
            event = s.current_event
            if event is None:
                raise RuntimeError("a batch's buffer found no current event")
            buffer.append(event)
            arrived.set()
            if len(buffer) >= max_:
                full.set()
                room.clear()
                # Hold the stream until a batch takes what is here (or the stream stops).
                await s.wait(room)
        except Exception as exc:  # a cancellation is no Exception: it passes
            s.log.exception("Error adding to a batch's buffer: %r", exc)
            await s.crash(exc)
        return value

    enable_acks = s.enable_acks
    s.enable_acks = False
    s.add_processor(add_to_buffer)
    s._enable_passive(aiter(s.channel))
    try:
        while not s.should_stop:
            if not buffer:
                await s.wait_for_stopped(arrived)
            await _linger(s, buffer, full, within)
            if not buffer:
                continue  # stopping
            events = buffer[:]
            buffer.clear()
            arrived.clear()
            full.clear()
            room.set()
            try:
                yield events
            finally:
                for event in events:
                    await s.ack(event)
    finally:
        room.set()  # a drainer held on a full buffer goes on (into the stream's own acks)
        s.enable_acks = enable_acks
        s._processors.remove(add_to_buffer)


async def _linger(s: Any, buffer: list[EventT[Any]], full: asyncio.Event, within: float) -> None:
    """Wait ``within`` for more records, unless the buffer is full; longer in a backlog: while
    the buffer holds a backlog's worth and each wait brings more at :data:`BACKLOG_RATE`.
    (mode's ``wait_for_stopped`` answers True on a timeout too: the stream says if it stops.)"""
    enough = max(1, round(BACKLOG_RATE * within))
    await s.wait_for_stopped(full, timeout=within)
    for _ in range(BACKLOG_WAITS):
        before = len(buffer)
        if s.should_stop or full.is_set() or before < BACKLOG_WAITS * enough:
            return
        await s.wait_for_stopped(full, timeout=within)
        if len(buffer) - before < enough:
            return
