"""Snapshots are sealed where the log is: forgetting an agent leaves its state unreadable in
every snapshot, and a takeover from one leaves the forgotten agent out."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from processors.batch import RawRecord
from processors.recording import AgentMemoryState
from processors.state_fold import FoldedState
from processors.state_snapshot import (
    PartitionSnapshot,
    SnapshotManifest,
    assemble,
    decode_snapshot_record,
    holds_nothing,
)
from schemas.agent_events import Observation
from schemas.codec import decode_derived_record, encode_event
from schemas.memory_events import ForgetAgent, SourcePosition
from streams.eventlog.snapshot_log import opened_snapshots
from streams.privacy.keyring import FileKeyring
from streams.privacy.sealing import RecordSealer
from streams.worker.pipeline import IngestPipeline
from streams.worker.snapshotting import Snapshotter
from tests.agent_streams import CONFIG, EMBEDDER
from tests.unit.streams.worker.test_ingest_protocol import TOPICS, Broker, Store
from tests.unit.streams.worker.test_snapshotting import Log, Worker

SECRET = "my-bank-pin-is-4711"


def snapshots_in(values: list[bytes]) -> list[PartitionSnapshot]:
    """Every whole snapshot of the snapshot topic, in the order written."""
    chunks, found = [], []
    for value in values:
        record = decode_snapshot_record(value)
        if isinstance(record, SnapshotManifest):
            snapshot = assemble(record, chunks)
            assert snapshot is not None
            found.append(snapshot)
            chunks = []
        else:
            chunks.append(record)
    return found


def observation(agent: str, n: int, content: str) -> RawRecord:
    event = Observation(
        agent_id=agent, event_id=f"{agent}-{n}", content=content, importance=0.3, step=n
    )
    value = encode_event(event)
    return RawRecord(TOPICS.observations, 0, n, agent.encode(), value, "observation")


def sealing_worker(keyring: FileKeyring) -> tuple[Broker, Log, Snapshotter, IngestPipeline]:
    """A worker with a keyring that writes a snapshot after every batch."""
    broker, snapshot_log = Broker(), Log()
    snapshots = Snapshotter(snapshot_log.send, TOPICS, every_records=1)
    pipeline = IngestPipeline(
        CONFIG, EMBEDDER, TOPICS, Store(broker.journal), None, broker.send,
        sealer=RecordSealer(keyring), snapshots=snapshots,
    )  # fmt: skip
    snapshots.sealer = pipeline.sealer
    return broker, snapshot_log, snapshots, pipeline


async def test_a_forgotten_agents_state_is_unreadable_in_every_snapshot(tmp_path: Path) -> None:
    keyring = FileKeyring(tmp_path / "keys")
    broker, snapshot_log, snapshots, pipeline = sealing_worker(keyring)
    answering = asyncio.create_task(broker.run())
    try:
        await pipeline.handle([observation("alice", 0, SECRET), observation("bob", 1, "hello")])
        await snapshots.settled()
        before = snapshots_in(snapshot_log.values)[-1]
        assert set(before.sealed) == {"alice", "bob"}
        # With the keys, a takeover opens them to what the worker held.
        (reopened,) = (await opened_snapshots({0: before}, RecordSealer(keyring))).values()
        assert reopened.states == {
            a: pipeline.folded.states[a] for a in ("alice", "bob")
        }  # fmt: skip

        forget = ForgetAgent(
            event_id="f1",
            agent_id="alice",
            requested_at=datetime.now(UTC),
            key_ids=tuple(await keyring.key_ids("alice")),
        )
        await pipeline.handle(
            [RawRecord(TOPICS.schedule, 0, 0, b"alice", encode_event(forget), None, "tick")]
        )
        await snapshots.settled()
    finally:
        answering.cancel()

    assert pipeline.stats.dead_letters == 0
    assert all(SECRET.encode() not in value for value in snapshot_log.values)
    after = snapshots_in(snapshot_log.values)[-1]
    assert set(after.sealed) == {"bob"}
    assert set(after.states) <= {"alice"}  # forgotten: nothing in it, kept plain if at all
    assert all(holds_nothing(state) for state in after.states.values())
    # The snapshot taken before the forget no longer opens for alice: she is left out (her
    # erasure follows it in the log), bob's state is read.
    (old,) = (await opened_snapshots({0: before}, RecordSealer(keyring))).values()
    assert set(old.states) == {"bob"}


async def test_a_sealed_snapshot_without_its_keyring_is_no_snapshot(tmp_path: Path) -> None:
    keyring = FileKeyring(tmp_path / "keys")
    broker, snapshot_log, snapshots, pipeline = sealing_worker(keyring)
    answering = asyncio.create_task(broker.run())
    try:
        await pipeline.handle([observation("carol", 0, SECRET)])
        await snapshots.settled()
    finally:
        answering.cancel()
    (taken,) = snapshots_in(snapshot_log.values)
    assert await opened_snapshots({0: taken}, None) == {}
    other = FileKeyring(tmp_path / "other-keys")
    assert await opened_snapshots({0: taken}, RecordSealer(other)) == {}


async def test_an_agents_next_life_in_the_batch_of_its_erasure_stays_readable(
    tmp_path: Path,
) -> None:
    """A plain event of an agent right after its erasure, in one batch with it: the next life
    was sealed with the key that batch then deleted, so the stores held a memory the log could
    no longer open (a rebuild dropped it), and a fold of the log (a takeover's) said otherwise
    than the worker. Cut there, the next life is sealed with its own key."""
    keyring = FileKeyring(tmp_path / "keys")
    broker, _, snapshots, pipeline = sealing_worker(keyring)
    answering = asyncio.create_task(broker.run())
    try:
        await pipeline.handle([observation("alice", 0, SECRET)])
        forget = ForgetAgent(
            event_id="f1",
            agent_id="alice",
            requested_at=datetime.now(UTC),
            key_ids=tuple(await keyring.key_ids("alice")),
        )
        erasure = RawRecord(
            TOPICS.schedule, 0, 0, b"alice", encode_event(forget), None, "tick", timestamp_ms=2_000
        )
        next_life = replace(observation("alice", 1, "a new start"), timestamp_ms=3_000)
        await pipeline.handle([erasure, next_life])
        await snapshots.settled()
    finally:
        answering.cancel()

    logged = []
    for topic in (TOPICS.items, TOPICS.lifecycle):
        values = broker.logs.get((topic, 0), [])
        opened = await RecordSealer(keyring).open_all(list(values))
        for offset, value in enumerate(opened):
            assert isinstance(value, bytes) or offset < 1, f"{topic}@{offset} cannot be opened"
            if isinstance(value, bytes):
                where = SourcePosition(topic=topic, partition=0, offset=offset)
                logged.append((where, decode_derived_record(value)))
    folded, _ = FoldedState.from_log(logged, TOPICS.schedule)
    live = pipeline.folded.states["alice"]
    assert [e.content for e in live.working] == ["a new start"]
    assert folded.states["alice"] == live


async def test_keys_dropped_while_they_were_fetched_leave_no_snapshot_in_plain_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot owed is taken beside the batches, so a batch can refresh the sealer (a
    keyring that moved on, an agent forgotten) while the snapshot's keys are fetched: the
    snapshot is then due again, never written unsealed."""
    sealer = RecordSealer(FileKeyring(tmp_path / "keys"))
    written = Log()
    snapshots = Snapshotter(written.send, TOPICS, every_records=1, sealer=sealer)
    worker = Worker(snapshots)
    worker.folded.states["alice"] = AgentMemoryState(next_seq=1, year=3)
    fetch = sealer.prepare_seal

    async def fetched_as_a_batch_refreshes(agent_ids: Iterable[str]) -> None:
        await fetch(agent_ids)
        sealer._current.clear()

    monkeypatch.setattr(sealer, "prepare_seal", fetched_as_a_batch_refreshes)
    await worker.batch()
    await snapshots.settled()
    assert written.values == [], "nothing written, in plain text or otherwise"
    assert snapshots.moved == {0}, "due again"

    monkeypatch.setattr(sealer, "prepare_seal", fetch)
    await worker.batch()
    await snapshots.settled()
    (snapshot,) = snapshots_in(written.values)
    assert set(snapshot.sealed) == {"alice"}
    assert not snapshot.states, "no state in plain text"


async def owing_a_snapshot(tmp_path: Path) -> tuple[RecordSealer, Log, Snapshotter, Worker]:
    """A sealing snapshotter writing one snapshot (the broker holds it until ``hold`` is set)
    and owing the next, which a second batch made due meanwhile."""
    sealer = RecordSealer(FileKeyring(tmp_path / "keys"))
    written = Log()
    written.hold = asyncio.Event()
    snapshots = Snapshotter(written.send, TOPICS, every_records=1, sealer=sealer)
    worker = Worker(snapshots)
    worker.folded.states["alice"] = AgentMemoryState(next_seq=1, year=3)
    await worker.batch()
    worker.folded.states["alice"] = AgentMemoryState(next_seq=2, year=3)
    await worker.batch()
    return sealer, written, snapshots, worker


async def test_a_snapshot_owed_is_not_sealed_with_keys_fetched_while_a_batch_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Taken between batches, its keys fetched beside the next one: had that batch forgotten
    an agent, the key fetched would be the agent's next life's, and the old state would open
    with it. So it is left to the next batch, which takes it as it ends."""
    sealer, written, snapshots, worker = await owing_a_snapshot(tmp_path)
    fetch = sealer.prepare_seal

    async def fetched_beside_a_batch(agent_ids: Iterable[str]) -> None:
        with snapshots.batch():
            sealer._current.clear()  # as a batch's refresh would
            await fetch(agent_ids)

    monkeypatch.setattr(sealer, "prepare_seal", fetched_beside_a_batch)
    written.hold.set()
    await snapshots.settled()
    assert snapshots.written == 1, "the owed snapshot was not written"
    assert snapshots.moved == {0}

    monkeypatch.setattr(sealer, "prepare_seal", fetch)
    await worker.batch()
    await snapshots.settled()
    assert snapshots.written == 2, "the next batch took it"


async def test_a_snapshot_owed_is_not_sealed_with_keys_fetched_while_its_partition_went(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A revocation that released the partition during the fetch: its next owner may forget
    an agent of it, out of this worker's sight."""
    sealer, written, snapshots, _ = await owing_a_snapshot(tmp_path)
    fetch = sealer.prepare_seal

    async def fetched_as_the_partition_is_released(agent_ids: Iterable[str]) -> None:
        sealer._current.clear()
        await fetch(agent_ids)
        snapshots.release({0})

    monkeypatch.setattr(sealer, "prepare_seal", fetched_as_the_partition_is_released)
    written.hold.set()
    await snapshots.settled()
    assert snapshots.written == 1, "the owed snapshot was not written"
