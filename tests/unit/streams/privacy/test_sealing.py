"""Sealing in the batch: a worker opens what publishers sealed, a forget request erases the
agent in log order, and what the agent's forgotten keys sealed is never read again."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import orjson

from processors.batch import PlainRecords, RawRecord, process_batch
from processors.emission_order import causal_order
from processors.recording import AgentMemoryState
from processors.state_fold import FoldedState
from schemas.agent_events import Observation
from schemas.codec import DecodeError, encode_event
from schemas.memory_events import AgentForgotten, DerivedEvent, ForgetAgent, MemoryRecorded
from streams.privacy.keyring import FileKeyring
from streams.privacy.sealing import FORGOTTEN, RecordSealer
from tests.agent_streams import CTX, TOPICS, derived_in_batches

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def observed(agent: str, offset: int, sealer: RecordSealer, content: str) -> RawRecord:
    event = Observation(agent_id=agent, content=content, importance=0.9, occurred_at=NOW)
    return RawRecord(
        TOPICS.observations,
        0,
        offset,
        agent.encode(),
        sealer.seal(agent, encode_event(event)),
        expected_type="observation",
    )


async def test_a_sealed_record_opens_and_a_forgotten_keys_record_does_not(tmp_path: Path) -> None:
    keyring = FileKeyring(tmp_path)
    publisher, reader = RecordSealer(keyring), RecordSealer(keyring)
    await publisher.prepare_seal(["H001"])
    raw = observed("H001", 0, publisher, "water in the cellar").value
    assert raw is not None
    assert b"cellar" not in raw

    (opened,) = await reader.open_all([raw])
    assert isinstance(opened, bytes)
    assert b"cellar" in opened

    key_ids = await keyring.key_ids("H001")
    await keyring.forget("H001", key_ids)
    fresh = RecordSealer(keyring)
    (gone,) = await fresh.open_all([raw])
    assert isinstance(gone, DecodeError)
    assert gone.kind == FORGOTTEN
    # A reader holding the key in its cache drops it once the generation moves.
    await reader.refresh()
    (gone_too,) = await reader.open_all([raw])
    assert isinstance(gone_too, DecodeError)
    assert gone_too.kind == FORGOTTEN


async def test_without_the_keyring_a_sealed_record_is_a_missing_key_not_forgotten(
    tmp_path: Path,
) -> None:
    publisher = RecordSealer(FileKeyring(tmp_path / "theirs"))
    await publisher.prepare_seal(["H001"])
    raw = observed("H001", 0, publisher, "x").value
    assert raw is not None
    for reader in (RecordSealer(None), RecordSealer(FileKeyring(tmp_path / "ours"))):
        (result,) = await reader.open_all([raw])
        assert isinstance(result, DecodeError), result
        assert result.kind == "key_missing", result
    plain = encode_event(Observation(agent_id="H001", content="plain"))
    assert await RecordSealer(None).open_all([plain, None]) == [plain, None]


async def test_an_erasure_read_from_the_log_forgets_its_keys_for_every_record_read_with_it(
    tmp_path: Path,
) -> None:
    """The derived topics interleave when read back: a sealed record of the agent may come
    after its erasure, and must not be opened even if the keyring still has the key."""
    keyring = FileKeyring(tmp_path)
    sealer = RecordSealer(keyring)
    await sealer.prepare_seal(["H001", "H002"])
    mine = observed("H001", 0, sealer, "mine").value
    theirs = observed("H002", 1, sealer, "theirs").value
    erasure = encode_event(
        AgentForgotten(
            agent_id="H001",
            occurred_at=NOW,
            requested_at=NOW,
            key_ids=tuple(await keyring.key_ids("H001")),
            caused_by="req-1",
        )
    )
    opened = await RecordSealer(keyring).open_all([erasure, mine, theirs])
    assert opened[0] == erasure
    assert isinstance(opened[1], DecodeError)
    assert opened[1].kind == FORGOTTEN
    assert isinstance(opened[2], bytes)
    assert b"theirs" in opened[2]


async def test_a_forget_request_erases_in_log_order_and_skips_the_old_keys_after_it(
    tmp_path: Path,
) -> None:
    keyring = FileKeyring(tmp_path)
    publisher = RecordSealer(keyring)
    await publisher.prepare_seal(["H001", "H002"])
    key_ids = tuple(await keyring.key_ids("H001"))
    request = ForgetAgent(
        event_id="req-1", agent_id="H001", requested_at=NOW, key_ids=key_ids, reason="asked"
    )
    records = [
        observed("H001", 0, publisher, "before"),
        observed("H002", 1, publisher, "neighbour"),
        RawRecord(TOPICS.schedule, 0, 0, b"H001", encode_event(request), kind="tick"),
        # Published with the old key after the request (a stale publisher): forgotten too.
        observed("H001", 2, publisher, "after, old key"),
    ]
    worker = RecordSealer(keyring)
    await worker.prepare_open(r.value for r in records)
    held = {"H001": AgentMemoryState(next_seq=7)}
    result = process_batch(
        records, lambda a: held.get(a) or AgentMemoryState(), ctx=CTX, failed_at=NOW, opener=worker
    )

    kinds = [(type(e).__name__, e.agent_id) for e in result.derived]
    assert kinds == [
        ("MemoryRecorded", "H001"),
        ("MemoryRecorded", "H002"),
        ("AgentForgotten", "H001"),
    ]
    (erasure,) = [e for e in result.derived if isinstance(e, AgentForgotten)]
    assert erasure.key_ids == key_ids
    assert erasure.source_position is not None
    assert erasure.source_position.topic == TOPICS.schedule
    assert result.forgotten_agents == {"H001": key_ids}
    # Nothing of its memories is kept: only where its seq goes on.
    assert result.states["H001"] == AgentMemoryState(next_seq=erasure.next_seq or 0)
    assert erasure.next_seq is not None
    assert erasure.next_seq > 0
    assert "H002" in result.states
    assert result.forgotten_records == 1
    assert not result.dead_letters
    recorded = [e for e in result.derived if isinstance(e, MemoryRecorded)]
    assert [e.content for e in recorded] == ["before", "neighbour"]
    # Deterministic, so a redelivered request logs the same erasure (from the same state).
    before = AgentMemoryState(next_seq=erasure.next_seq)
    again = process_batch(records[2:3], lambda a: before, ctx=CTX, failed_at=NOW)
    assert again.derived == [erasure]


def test_a_forget_request_with_a_bad_field_is_a_dead_letter() -> None:
    raw = orjson.dumps({"event_type": "agent.forget", "event_id": "x", "agent_id": "a b"})
    result = process_batch(
        [RawRecord(TOPICS.schedule, 0, 0, None, raw, kind="tick")],
        lambda a: AgentMemoryState(),
        ctx=CTX,
        failed_at=NOW,
    )
    assert not result.derived
    (letter,) = result.dead_letters
    assert letter.error_kind == "invalid"


def test_records_whose_key_was_forgotten_are_counted_not_dead_lettered() -> None:
    class Forgetful:
        def open(self, raw: bytes) -> bytes:
            raise DecodeError(FORGOTTEN, "forgotten")

        def forget(self, agent_id: str, key_ids: object) -> None:
            return None

    record = RawRecord(TOPICS.observations, 0, 3, b"H001", b"{}", "observation")
    result = process_batch(
        [record], lambda a: AgentMemoryState(), ctx=CTX, failed_at=NOW, opener=Forgetful()
    )
    assert (result.forgotten_records, result.dead_letters, result.derived) == (1, [], [])


def test_read_back_an_erasure_of_a_sealed_agent_goes_before_its_new_life() -> None:
    """Read back from the two topics, the erasure (lifecycle) has no recording to anchor it;
    the old life's records do not open any more, so what is left of the agent is its new life,
    which the erasure must not erase."""
    request = ForgetAgent(event_id="req-2", agent_id="H001", requested_at=NOW, key_ids=("k1",))
    plain = PlainRecords()
    records = [
        RawRecord(TOPICS.schedule, 0, 0, b"H001", encode_event(request), kind="tick"),
        RawRecord(
            TOPICS.observations,
            0,
            1,
            b"H001",
            encode_event(Observation(agent_id="H001", content="new life", importance=0.9)),
            expected_type="observation",
        ),
    ]
    derived = process_batch(
        records, lambda a: AgentMemoryState(), ctx=CTX, failed_at=NOW, opener=plain
    ).derived
    items = [e for e in derived if isinstance(e, MemoryRecorded)]
    lifecycle = [e for e in derived if not isinstance(e, MemoryRecorded)]
    read_back = causal_order([*items, *lifecycle])
    assert [type(e).__name__ for e in read_back] == ["AgentForgotten", "MemoryRecorded"]

    # Never sealed: the erasure cannot go first (its earlier life is still readable), and the
    # recording of the next life (seq from the erasure's next_seq on) still comes after it.
    unsealed = [e.model_copy(update={"key_ids": ()}) for e in lifecycle]
    assert [type(e).__name__ for e in causal_order([*items, *unsealed])] == [
        "AgentForgotten",
        "MemoryRecorded",
    ]


def test_read_back_an_erasure_of_an_unsealed_agent_sits_between_its_two_lives() -> None:
    """Unsealed (ENGRAM_KEYRING=off), the earlier life stays readable: the erasure must come
    after it and before the next, or a rebuild erased the next life (and a takeover's fold,
    before the erasure carried next_seq, counted the agent's seq from 0 again)."""
    request = ForgetAgent(event_id="req-3", agent_id="H001", requested_at=NOW)

    def observation(offset: int, text: str) -> RawRecord:
        event = Observation(agent_id="H001", content=text, importance=0.9)
        value = encode_event(event)
        return RawRecord(TOPICS.observations, 0, offset, b"H001", value, "observation")

    batches = [
        [observation(0, "old life"), observation(1, "old life too")],
        [RawRecord(TOPICS.schedule, 0, 0, b"H001", encode_event(request), kind="tick")],
        [observation(2, "new life"), observation(3, "new life too")],
    ]
    derived, states = derived_in_batches(batches)
    items = [e for e in derived if isinstance(e, MemoryRecorded)]
    lifecycle = [e for e in derived if not isinstance(e, MemoryRecorded)]
    read_back = causal_order([*items, *lifecycle])
    assert [getattr(e, "content", type(e).__name__) for e in read_back] == [
        "old life",
        "old life too",
        "AgentForgotten",
        "new life",
        "new life too",
    ]
    assert [e.seq for e in items] == [0, 1, 2, 3]  # the next life's seq goes on
    assert states["H001"].next_seq == 4


async def test_a_forged_header_is_a_dead_letter_not_a_keyring_outage(tmp_path: Path) -> None:
    """An agent id no event accepts made the file keyring's lookup fail ("File name too long",
    "embedded null byte"), which the worker retried as an outage: every partition stalled."""
    sealer = RecordSealer(FileKeyring(tmp_path))
    forged = [
        orjson.dumps({"sealed": 1, "agent_id": agent, "key_id": key, "nonce": "", "data": ""})
        for agent, key in (("A" * 300, "00ff"), ("x\u0000", "00ff"), ("H1", "../../etc"))
    ]
    opened = await sealer.open_all(forged)  # asks the keyring nothing it cannot answer
    assert [(o.kind if isinstance(o, DecodeError) else o) for o in opened] == ["invalid"] * 3
    records = [
        RawRecord(TOPICS.observations, 0, offset, b"S01", value, expected_type="observation")
        for offset, value in enumerate(forged)
    ]
    await sealer.prepare_open(r.value for r in records)
    good = RecordSealer(FileKeyring(tmp_path))
    await good.prepare_seal(["S01"])
    records.append(observed("S01", 3, good, "good after"))
    await sealer.prepare_open([records[-1].value])
    result = process_batch(
        records, lambda _: AgentMemoryState(), ctx=CTX, failed_at=NOW, opener=sealer
    )
    assert [d.error_kind for d in result.dead_letters] == ["invalid"] * 3
    assert [m.content for m in result.derived if isinstance(m, MemoryRecorded)] == ["good after"]


def test_an_erasure_after_an_upgrade_sits_between_the_lives_it_ends_and_the_next() -> None:
    """A log from before next_seq: its erasure (version 1) names nothing, and the life after it
    counted its seq from 0 again. The fold keeps the seq where it got to, so the next erasure's
    next_seq is past every seq the agent used, and it goes after that life, before the next
    (it went before all of them, which a rebuild then kept)."""

    def observe(offset: int, text: str) -> RawRecord:
        value = encode_event(Observation(agent_id="H001", content=text, importance=0.9))
        return RawRecord(TOPICS.observations, 0, offset, b"H001", value, "observation")

    def forget(offset: int) -> RawRecord:
        request = ForgetAgent(event_id=f"forget-{offset}", agent_id="H001", requested_at=NOW)
        return RawRecord(TOPICS.schedule, 0, offset, b"H001", encode_event(request), None, "tick")

    batches = [
        [observe(0, "life 1a"), observe(1, "life 1b"), observe(2, "life 1c")],
        [forget(0)],
        [observe(3, "life 2a")],
        [forget(1)],
        [observe(4, "life 3a")],
    ]
    derived: list[DerivedEvent] = []
    folded = FoldedState()
    for batch in batches:
        result = process_batch(
            batch,
            lambda a, held=folded.states: held.get(a) or AgentMemoryState(),
            ctx=CTX,
            failed_at=NOW,
            opener=PlainRecords(),
        )
        if batch is batches[2]:
            # What the release before next_seq logged: a v1 erasure, and seq from 0 again.
            derived = [
                e.model_copy(update={"next_seq": None}) if isinstance(e, AgentForgotten) else e
                for e in derived
            ]
            result.derived = [
                e.model_copy(update={"seq": 0}) if isinstance(e, MemoryRecorded) else e
                for e in result.derived
            ]
            # The upgraded worker takes over: its state is the fold of that log.
            folded = FoldedState()
            folded.apply_all(causal_order([*derived, *result.derived]))
            derived += result.derived
            continue
        derived += result.derived
        folded.apply_all(result.derived)
    items = [e for e in derived if isinstance(e, MemoryRecorded)]
    lifecycle = [e for e in derived if not isinstance(e, MemoryRecorded)]
    read_back = [
        getattr(e, "content", "erasure" if getattr(e, "next_seq", 1) is not None else "v1")
        for e in causal_order([*items, *lifecycle])
        if isinstance(e, MemoryRecorded | AgentForgotten)
    ]
    assert read_back.index("life 2a") < read_back.index("erasure") < read_back.index("life 3a")
    assert read_back.index("life 1c") < read_back.index("erasure")
