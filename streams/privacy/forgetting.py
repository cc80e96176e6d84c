"""Forgetting an agent (``engram forget-agent``): its memories leave every projection and its
events become unreadable in the log, for good (a replay cannot bring them back).

The request is an event, :class:`schemas.memory_events.ForgetAgent`, put on
``memory.schedule`` at the agent's partition. The worker owning that partition handles it in
order with the agent's events (:func:`processors.batch.process_batch`): whatever the agent
published before it is applied, then erased by the ``AgentForgotten`` it derives; then the
worker deletes the agent's keys (:mod:`streams.privacy.keyring`), which makes every sealed copy
of its events, raw and derived, unreadable. Doing it in the worker, in log order, rather than here,
means no batch in flight can write the agent back after the erasure, and no fence is needed.

Here: read the agent's key ids, publish the request, wait (bounded) until the keys are gone
and the active projections have applied it, and erase the agent from the other, inactive
projection versions directly (nothing applies the log to those).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiokafka.errors import KafkaError

from projections.interfaces import WorkingMemoryStore
from projections.versions import OpenStores, ProjectionVersion, ProjectionVersions
from schemas.codec import encode_event
from schemas.errors import EngramError
from schemas.memory_events import AgentForgotten, ForgetAgent
from schemas.topics import Topics
from streams.eventlog.kafka_clients import record_producer
from streams.eventlog.publisher import KEY_REFRESH_S, Position, PublishError
from streams.privacy.keyring import Keyring

OpenWorking = Callable[[ProjectionVersion], WorkingMemoryStore]


class ForgetTimeoutError(EngramError, TimeoutError):
    """The request is in the log but no worker completed it in time."""


@dataclass
class ForgetReport:
    agent_id: str
    request: Position
    key_ids: tuple[str, ...]
    """The agent's keys when asked: deleted by the worker, or still to be."""
    keys_remaining: list[str] = field(default_factory=list)
    applied: bool = False
    """The active version's working memory passed the request (so its erasure ran)."""
    other_versions: list[str] = field(default_factory=list)
    """Inactive versions erased directly."""
    skipped_versions: list[str] = field(default_factory=list)
    """Inactive versions being built or still held by a process: the log's erasure reaches
    a version being built by its replay; a held one is erased when it becomes active."""
    sealed: bool = True
    """False when there is no keyring: the log then keeps the agent's events readable."""


async def request_forget(
    bootstrap: str, topics: Topics, request: ForgetAgent, *, timeout: float = 30.0
) -> Position:
    """Put the request on ``memory.schedule``, keyed by the agent: the default partitioner
    puts it on the partition of the agent's events (every topic has one partition count)."""
    producer = record_producer(bootstrap)
    try:
        await asyncio.wait_for(producer.start(), timeout)
        metadata = await asyncio.wait_for(
            producer.send_and_wait(
                topics.schedule, encode_event(request), key=request.agent_id.encode("utf-8")
            ),
            timeout,
        )
    except (KafkaError, TimeoutError) as exc:
        raise PublishError(f"cannot put the forget request on {topics.schedule}: {exc!r}") from exc
    finally:
        await producer.stop()
    return Position(metadata.topic, metadata.partition, metadata.offset)


async def wait_until_forgotten(
    keyring: Keyring | None,
    working: WorkingMemoryStore,
    request: ForgetAgent,
    position: Position,
    *,
    timeout: float,
) -> tuple[bool, list[str]]:
    """(whether the active working memory applied the request, the key ids still there)."""
    deadline = time.monotonic() + timeout
    while True:
        mark = await working.applied_offset(position.topic, position.partition)
        applied = mark is not None and mark >= position.offset
        remaining: list[str] = []
        if keyring is not None:
            live = set(await keyring.key_ids(request.agent_id))
            remaining = [k for k in request.key_ids if k in live]
        if applied and not remaining:
            return applied, remaining
        if time.monotonic() > deadline:
            return applied, remaining
        await asyncio.sleep(0.1)


async def erase_from_versions(
    versions: Sequence[ProjectionVersion], open_stores: OpenStores, erasure: AgentForgotten
) -> list[str]:
    """Apply the erasure to versions no process writes to (it carries no position there, so it
    moves no applied offset)."""
    done = []
    for version in versions:
        working, episodic = await open_stores(version)
        try:
            await working.apply([erasure])
            if episodic is not None:
                await episodic.apply([erasure])
        finally:
            await working.close()
            if episodic is not None:
                await episodic.close()
        done.append(version.label)
    return done


async def forget_agent(
    agent_id: str,
    *,
    bootstrap: str,
    topics: Topics,
    keyring: Keyring | None,
    versions: ProjectionVersions,
    open_working: OpenWorking,
    open_inactive: OpenStores,
    reason: str | None = None,
    timeout: float = 60.0,
    publishers_trust: float = KEY_REFRESH_S,
) -> ForgetReport:
    """Forget ``agent_id``; raises :class:`ForgetTimeoutError` (with the report) when no worker
    completed the request within ``timeout``: it stays in the log and completes later. Returns
    once what any publisher publishes for the agent belongs to its new life."""
    key_ids = tuple(await keyring.key_ids(agent_id)) if keyring is not None else ()
    now = datetime.now(UTC)
    request = ForgetAgent(
        event_id=str(uuid.uuid4()),
        agent_id=agent_id,
        requested_at=now,
        key_ids=key_ids,
        reason=reason,
    )
    position = await request_forget(bootstrap, topics, request)
    report = ForgetReport(agent_id, position, key_ids, sealed=keyring is not None)

    active = await versions.active()
    infos = [i for i in await versions.versions() if not i.active]
    # A replay or reprocess building a version is no holder here: what it builds gets the
    # erasure from the log (a "building" version is skipped below).
    held = {
        name
        for m in await versions.members()
        if m.role not in ("replay", "reprocess")
        for name in (m.version, *m.holding)
    }
    inactive = [i.version for i in infos if i.state != "building" and i.version.name not in held]
    report.skipped_versions = [i.version.label for i in infos if i.version not in inactive]
    if active.name is not None and None not in held:
        inactive.append(versions.version(None))  # the unversioned layout, if it was used
    erasure = AgentForgotten(
        event_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"engram:forget:{request.event_id}")),
        agent_id=agent_id,
        occurred_at=now,
        key_ids=key_ids,
        requested_at=now,
        caused_by=request.event_id,
    )
    report.other_versions = await erase_from_versions(inactive, open_inactive, erasure)

    # The active episodic store may be an Edge shard held by the serving process: only the
    # working memory's applied mark is read here (both are applied in the same batch).
    working = open_working(active)
    try:
        report.applied, report.keys_remaining = await wait_until_forgotten(
            keyring, working, request, position, timeout=timeout
        )
    finally:
        await working.close()
    if not report.applied or report.keys_remaining:
        raise ForgetTimeoutError(report)
    if keyring is not None:  # the keys may have gone just now, a run that timed out earlier
        # Publishers (and the query service's retrieval records) trust a key they hold for up
        # to KEY_REFRESH_S: one already running sealed with the deleted key for that long, and
        # what it published right after this returned was forgotten with the old life, its
        # position returned and no dead letter. Past the wait, every one has dropped it.
        await asyncio.sleep(publishers_trust)
    return report


def describe(report: ForgetReport) -> dict[str, Any]:
    """The report as printed by the CLI and logged."""
    return {
        "agent_id": report.agent_id,
        "request": f"{report.request.topic}[{report.request.partition}]@{report.request.offset}",
        "keys_deleted": [k for k in report.key_ids if k not in report.keys_remaining],
        "keys_remaining": report.keys_remaining,
        "active_version_erased": report.applied,
        "other_versions_erased": report.other_versions,
        "versions_skipped": report.skipped_versions,
        "log_sealed": report.sealed,
    }
