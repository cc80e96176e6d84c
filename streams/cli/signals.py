"""Waiting for SIGINT or SIGTERM, the way every long-running command stops: the work in flight
is finished, flushed and committed before the process ends."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streams.runtime.node import Node


async def unless_set(stop: asyncio.Event, work: Coroutine[Any, Any, None]) -> bool:
    """``work`` to its end (True), or cancelled as soon as ``stop`` is set (False; at once,
    without starting it, if it already is)."""
    if stop.is_set():
        work.close()
        return False
    task = asyncio.create_task(work)
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    current = asyncio.current_task()
    if current is not None and current.cancelling():
        raise asyncio.CancelledError  # the caller's own cancel, come while the work cleaned up
    if task.cancelled():
        return False
    task.result()  # the work's own failure
    return True


STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Ctrl-C, an orchestrator's stop, and a terminal that closes."""

ECHO_WITHIN = 0.1
"""Seconds within which the same signal again is the first one delivered twice, not a second
stop: `timeout` sends its signal to the command and then to its whole process group, the
command included. Nobody presses Ctrl-C twice that fast."""


def is_echo(sig: signal.Signals, first: signal.Signals, after: float) -> bool:
    return sig == first and after < ECHO_WITHIN


class StopSignal(asyncio.Event):
    """Set by the first of :data:`STOPPING_SIGNALS`; :attr:`signal` says which it was. A
    second one means stop now: the :meth:`at_once` callbacks run (the children are killed),
    and the process exits with 128 + its number, whatever it was doing (starting, draining,
    archiving the log)."""

    def __init__(self, *, second_at_once: bool = True) -> None:
        super().__init__()
        self.signal: signal.Signals | None = None
        self._first_at = 0.0
        self._second_at_once = second_at_once
        self._at_once: list[Callable[[], None]] = []
        self._caution: Callable[[], str | None] | None = None
        self._cautioned = False

    def received(self, sig: signal.Signals) -> None:
        now = time.monotonic()
        if self.signal is not None:
            if self._second_at_once and not is_echo(sig, self.signal, now - self._first_at):
                caution = self._caution() if self._caution and not self._cautioned else None
                if caution:
                    self._cautioned = True
                    name = "Ctrl-C" if sig == signal.SIGINT else sig.name
                    sys.stderr.write(f"{name} again: {caution}; once more stops at once\n")
                    return
                self.stop_at_once(sig)
            return
        self.signal, self._first_at = sig, now
        self.set()

    def caution(self, warning: Callable[[], str | None]) -> None:
        """Before stopping at once, a second signal asks for a third while ``warning`` says
        what stopping at once would lose (None: nothing, stop at once)."""
        self._caution = warning

    def at_once(self, kill: Callable[[], None]) -> None:
        """``kill`` runs if a second signal comes (it must not wait long)."""
        self._at_once.append(kill)

    def stop_at_once(self, sig: signal.Signals) -> None:
        """The :meth:`at_once` callbacks, then the process ends with 128 + ``sig``'s number."""
        name = "Ctrl-C" if sig == signal.SIGINT else sig.name
        sys.stderr.write(f"{name} again: stopping at once\n")
        for kill in self._at_once:
            with contextlib.suppress(Exception):
                kill()
        with contextlib.suppress(Exception):  # os._exit flushes nothing
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(128 + sig)


def stop_on_signal(*, second_at_once: bool = True) -> StopSignal:
    """An event set on the first of :data:`STOPPING_SIGNALS` (on the running loop), from now
    on; a second one stops the process at once (:class:`StopSignal`), unless
    ``second_at_once`` is False (a server that raises the signal again once down).

    A command that starts processes or a node takes it before it starts anything and waits on
    it once started: a signal while it starts is kept, and honoured once it is up. Their
    defaults would do harm there: SIGTERM's and SIGHUP's end the process at once and leave its
    children running; Ctrl-C's (asyncio cancels the main task) cancels Faust's start half way,
    which leaves one of its threads running, and the process hung until killed."""
    stop = StopSignal(second_at_once=second_at_once)
    if threading.current_thread() is not threading.main_thread():
        return stop  # only the main thread takes signals (a command run by a test's runner)
    loop = asyncio.get_running_loop()
    for sig in STOPPING_SIGNALS:
        if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
            continue  # `nohup engram up`: a terminal that closes is asked not to stop it
        loop.add_signal_handler(sig, stop.received, sig)
    return stop


async def until_signalled_or_exited(
    children: list[subprocess.Popen[bytes]], node: Node | None, stop: asyncio.Event
) -> int | None:
    """Until ``stop`` is set (None; :func:`stop_on_signal`, taken before the children started),
    until a child process exits (its exit code), or until ``node`` will not follow the active
    projection version (None; ``node.left_reason``)."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):  # not wait_for: on 3.11 it can swallow a cancel
                await stop.wait()
        if node is not None and node.left.is_set():
            return None
        for child in children:
            code = child.poll()
            if code is not None:
                return int(code)
    return None


async def until_signalled_or_left(node: Node, stop: asyncio.Event) -> str | None:
    """Until ``stop`` is set (None; :func:`stop_on_signal`, taken before the node started), or
    until ``node`` will not follow the active projection version (why, naming the
    configuration to restart with)."""
    signalled = asyncio.create_task(stop.wait())
    left = asyncio.create_task(node.left.wait())
    try:
        await asyncio.wait({signalled, left}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        signalled.cancel()
        left.cancel()
    return node.left_reason if left.done() and not left.cancelled() else None
