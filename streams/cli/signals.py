"""Waiting for SIGINT or SIGTERM, the way every long-running command stops: the work in flight
is finished, flushed and committed before the process ends."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streams.runtime.node import Node


def stop_on_sigterm() -> asyncio.Event:
    """An event set on SIGTERM from now on, for a command that starts processes before it
    waits for signals (:func:`until_signalled_or_exited` then reads it): SIGTERM's default
    would end the command at once and leave them running. Ctrl-C keeps its meaning (the start
    is cancelled)."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    return stop


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


def stop_on_signal() -> asyncio.Event:
    """An event set on the first SIGINT or SIGTERM (on the running loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def until_signalled() -> None:
    await stop_on_signal().wait()


async def until_signalled_or_exited(
    children: list[subprocess.Popen[bytes]],
    node: Node | None = None,
    sigterm: asyncio.Event | None = None,
) -> int | None:
    """Until SIGINT/SIGTERM (None), until a child process exits (its exit code), or until
    ``node`` will not follow the active projection version (None; ``node.left_reason``).
    ``sigterm``: from :func:`stop_on_sigterm`, set if SIGTERM came while the children
    started."""
    signalled = asyncio.create_task(until_signalled())
    try:
        while not signalled.done() and not (sigterm is not None and sigterm.is_set()):
            await asyncio.wait({signalled}, timeout=1.0)
            if node is not None and node.left.is_set():
                return None
            for child in children:
                code = child.poll()
                if code is not None:
                    return int(code)
        return None
    finally:
        signalled.cancel()


async def until_signalled_or_left(node: Node) -> str | None:
    """Until SIGINT/SIGTERM (None), or until ``node`` will not follow the active projection
    version (why, naming the configuration to restart with)."""
    signalled = asyncio.create_task(until_signalled())
    left = asyncio.create_task(node.left.wait())
    try:
        await asyncio.wait({signalled, left}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        signalled.cancel()
        left.cancel()
    return node.left_reason if left.done() and not left.cancelled() else None
