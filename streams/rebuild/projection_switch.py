"""Keeping a running process on the active projection version.

Every process that writes or serves projections runs one :class:`ProjectionFollower`. Twice a
second it renews its heartbeat (role, the version it uses, the versions it still holds open)
and reads the pointer and the fence of :class:`~projections.versions.ProjectionVersions`:

* when the pointer names another version, it opens that version's stores, hands them to the
  process (``on_switch``), and closes the old ones after a grace period, so a retrieval that
  started on the old version finishes on it;
* a writer (worker, episodic projector) that sees a fence obeys it
  (:func:`projections.versions.obey_fence`): it takes the process's write lock, which waits
  for the batch in flight, says it paused, and holds the lock until the fence is lowered or
  expires, then follows the pointer before it lets the next batch through. The replay reads
  the last of the log meanwhile (see :mod:`streams.rebuild.replay`). A writer that cannot open
  the new version's stores then tries again, its writers still paused, for up to
  ``max_pause``: a batch written into the version the pointer left is missing from the one it
  names.

A version reprocessed with another configuration (:class:`~projections.versions.DerivedLog`)
cannot be followed by every process: a worker derives into one derived log with one
configuration, a projector applies one derived log, and a query service embeds queries with one
embedder. :class:`Serving` says what a process is set up for and :meth:`Serving.refusal` why it
cannot serve a version. A process refuses to start on such a version
(:class:`WrongConfigurationError`); a running one whose pointer moves to such a version does
not switch (so it never writes into that version's stores), stops following, and hands the
reason to ``on_leave``: the process then drains, commits and exits, and is restarted with the
version's configuration.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from projections.cancellation import LOOP_END_WITHIN_S, cancel_and_wait
from projections.interfaces import ProjectionError
from projections.versions import (
    DerivedLog,
    OpenStores,
    ProjectionStores,
    ProjectionVersion,
    ProjectionVersions,
    Role,
    WriteLock,
    obey_fence,
)
from schemas.errors import EngramError

log = logging.getLogger("engram.projection_switch")

OnSwitch = Callable[[ProjectionVersion, ProjectionStores], Awaitable[None]]
Refusal = Callable[[ProjectionVersion], Awaitable[str | None]]
OnLeave = Callable[[ProjectionVersion, str], None]

__all__ = [
    "ProjectionFollower",
    "Serving",
    "WrongConfigurationError",
    "member_id",
]


class WrongConfigurationError(EngramError, RuntimeError):
    """The active projection version needs another configuration than this process has."""


@dataclass(frozen=True)
class Serving:
    """What a process is set up to serve: the derived log it writes or applies (None: the live
    one), the configuration it derives with, and the embedder it embeds queries with."""

    derived_log: DerivedLog | None
    config_version: str
    embedder: str
    derives: bool
    """Runs the processors (derives events with ``config_version``)."""
    applies_log: bool
    """Writes projections from ``derived_log`` (a worker or an episodic projector)."""

    def refusal(self, version: ProjectionVersion, log: DerivedLog | None) -> str | None:
        """Why this process cannot serve ``version``, whose derived log is ``log``; None if it
        can. At start ``derived_log`` is taken from the version, so only the configuration
        can differ there."""
        name = version.label
        if log is not None:
            needed = log.config_version
            if self.derives and needed != self.config_version:
                return (
                    f"projection version {name} was reprocessed with configuration {needed}, "
                    f"this worker has configuration {self.config_version}: "
                    f"restart with configuration {needed} to serve version {name}"
                )
            if log.embedder != self.embedder:
                return (
                    f"projection version {name} was reprocessed with embedder {log.embedder} "
                    f"(configuration {needed}), this process has embedder {self.embedder}: "
                    f"restart with configuration {needed} to serve version {name}"
                )
        if self.applies_log and log != self.derived_log:
            if log is None:
                return (
                    f"projection version {name} applies the live derived log, this process "
                    f"writes {self.derived_log.topic_prefix if self.derived_log else ''}"
                    f"memory.items: restart with the live configuration to serve version {name}"
                )
            return (
                f"projection version {name} continues the derived log "
                f"{log.topic_prefix}memory.items: restart with configuration "
                f"{log.config_version} to serve version {name}"
            )
        return None


def member_id(role: Role) -> str:
    return f"{role}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass
class ProjectionFollower:
    versions: ProjectionVersions
    role: Role
    version: ProjectionVersion
    stores: ProjectionStores
    open_stores: OpenStores
    on_switch: OnSwitch
    write_lock: WriteLock | None = None
    """The lock every write batch of this process holds; None for a process that only reads."""
    refusal: Refusal | None = None
    """Why this process cannot serve a version (None: it can); None follows every version."""
    on_leave: OnLeave | None = None
    """Told the version this process will not follow, and why; the follower stops following."""
    left_for: tuple[ProjectionVersion, str] | None = None
    """The version this process refused to follow, and why."""
    interval: float = 0.5
    grace: float = 2.0
    max_pause: float = 60.0
    heartbeat_ttl: float = 10.0
    switches: int = 0
    pauses: int = 0
    member: str = ""
    _task: asyncio.Task[None] | None = field(default=None, init=False)
    _stopping: bool = field(default=False, init=False)
    """Set by :meth:`stop` before it cancels: on Python 3.11 ``asyncio.wait_for`` (which
    redis-py awaits) drops a cancellation that arrives as its operation completes, so the loop
    checks this too."""
    _retiring: list[asyncio.Task[None]] = field(default_factory=list, init=False)
    _holding: set[str | None] = field(default_factory=set, init=False)

    async def start(self) -> ProjectionFollower:
        self.member = self.member or member_id(self.role)
        await self._heartbeat()
        self._task = asyncio.create_task(self._run(), name="projection-follower")
        return self

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            await cancel_and_wait(self._task, within=LOOP_END_WITHIN_S)
        for task in self._retiring:
            with contextlib.suppress(Exception):
                await task
        with contextlib.suppress(Exception):
            await self.versions.leave(self.member)

    async def _heartbeat(self, paused_for: str | None = None) -> None:
        await self.versions.heartbeat(
            self.member,
            self.role,
            self.version,
            paused_for=paused_for,
            holding=sorted(v or "" for v in self._holding),
            ttl=self.heartbeat_ttl,
        )

    async def _run(self) -> None:
        while self.left_for is None and not self._stopping:
            try:
                fence = await self.versions.fence()
                if fence is not None and self.write_lock is not None:
                    await self._pause(fence)
                else:
                    await self.follow()
                    await self._heartbeat()
            except asyncio.CancelledError:
                raise
            except ProjectionError as exc:
                log.warning("cannot read the projection version pointer: %s", exc)
            except Exception:
                log.exception("following the projection version failed")
            await asyncio.sleep(self.interval)

    async def _pause(self, fence: str) -> None:
        assert self.write_lock is not None
        self.pauses += 1

        async def paused(fence: str) -> None:
            await self._heartbeat(paused_for=fence)

        await obey_fence(
            self.versions,
            fence,
            self.write_lock,
            max_pause=self.max_pause,
            heartbeat=paused,
            resume=self._follow_before_writing,
        )
        await self._heartbeat()
        if self.left_for is None:
            log.info("writing again, on projection version %s", self.version.label)

    async def _follow_before_writing(self) -> None:
        """Follow the pointer under the write lock, tried again while it fails, for up to
        ``max_pause`` (see the module docstring); a stop does not wait for it."""
        deadline = time.monotonic() + self.max_pause
        while True:
            try:
                await self.follow()
                return
            except ProjectionError as exc:
                if self._stopping or time.monotonic() > deadline:
                    raise
                log.warning("cannot follow the projection version pointer yet: %s", exc)
                await asyncio.sleep(self.interval)

    async def follow(self) -> None:
        """Move to the active version if it changed."""
        active = await self.versions.active()
        if active == self.version or self.left_for is not None:
            return
        reason = None if self.refusal is None else await self.refusal(active)
        if reason is not None:
            # No switch: this process never writes into (or reads) that version's stores.
            self.left_for = (active, reason)
            log.warning("not following projection version %s: %s", active.label, reason)
            if self.on_leave is not None:
                self.on_leave(active, reason)
            return
        stores = await self.open_stores(active)
        old_version, old_stores = self.version, self.stores
        await self.on_switch(active, stores)
        self.version, self.stores = active, stores
        self.switches += 1
        self._holding.add(old_version.name)
        self._retiring.append(asyncio.create_task(self._retire(old_version, old_stores)))
        await self._heartbeat()
        log.info(
            "switched projection version %s -> %s",
            old_version.label,
            active.label,
        )

    async def _retire(self, version: ProjectionVersion, stores: ProjectionStores) -> None:
        await asyncio.sleep(self.grace)
        for store in stores:
            if store is not None:
                with contextlib.suppress(Exception):
                    await store.close()
        self._holding.discard(version.name)
        with contextlib.suppress(Exception):
            await self._heartbeat()
