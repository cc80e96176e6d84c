"""The pure core: capacities of seed 004 as events, determinism, and batches with poison."""

from __future__ import annotations

import base64
import dataclasses
from datetime import UTC, datetime

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.batch import MAX_KEPT_BYTES, RawRecord, process_batch
from processors.config import load_processing_config
from processors.embedding import HashingEmbedder, keywords
from processors.lifecycle import Deriving
from processors.recording import AgentMemoryState, WorkingEntry, record
from processors.summarising import ExtractiveSummariser
from schemas.agent_events import Feedback, Observation
from schemas.codec import encode_event
from schemas.memory_events import MemoryForgotten, MemoryRecorded, memory_id_for

CONFIG = load_processing_config()
EMBEDDER = HashingEmbedder()
VERSION = CONFIG.version(EMBEDDER.id)


def run(
    events: list[Observation],
) -> tuple[list[MemoryRecorded], list[MemoryForgotten], AgentMemoryState]:
    state = AgentMemoryState()
    recorded, forgotten = [], []
    for event in events:
        out = record(event, state, config=CONFIG, embedder=EMBEDDER, config_version=VERSION)
        recorded.append(out.memory)
        forgotten.extend(out.forgotten)
        state = out.state
    return recorded, forgotten, state


def test_seed_004_working_memory_keeps_ten_fifo() -> None:
    events = [Observation(agent_id="H001", content=f"Event {i}", importance=0.5) for i in range(12)]
    recorded, forgotten, state = run(events)
    assert len(state.working) == 10
    assert [f.memory_id for f in forgotten] == [recorded[0].memory_id, recorded[1].memory_id]
    assert all(f.reason == "capacity" and f.destination == "working" for f in forgotten)
    assert forgotten[0].caused_by == recorded[10].event_id


def test_seed_004_episodic_add_goes_to_episodic_with_no_tags() -> None:
    recorded, _, state = run(
        [Observation(agent_id="H001", content="Major flood", importance=0.9, year=3)]
    )
    assert recorded[0].destination == "episodic"
    assert recorded[0].tags == ()
    assert len(state.episodic) == 1
    assert not state.working


def test_episodic_capacity_evicts_the_least_important_oldest_first() -> None:
    importances = [0.7 + (i % 30) / 100 for i in range(60)]
    events = [
        Observation(agent_id="A", content=f"e{i}", importance=v) for i, v in enumerate(importances)
    ]
    recorded, forgotten, state = run(events)
    assert len(state.episodic) == 50
    assert len(forgotten) == 10
    kept = {e.memory_id for e in state.episodic}
    lowest_kept = min(e.importance for e in state.episodic)
    for f in forgotten:
        gone = next(r for r in recorded if r.memory_id == f.memory_id)
        assert gone.memory_id not in kept
        assert gone.importance <= lowest_kept


def test_ids_are_deterministic_and_replay_gives_identical_events() -> None:
    events = [
        Observation(
            agent_id="A",
            event_id=f"ev-{i}",
            content=f"flood {i}",
            occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        )
        for i in range(15)
    ]
    first, second = run(events), run(events)
    assert first[0] == second[0]
    assert first[1] == second[1]
    assert first[0][3].memory_id == memory_id_for("A", "ev-3")


@pytest.mark.parametrize(
    "value",
    [
        {"agent_id": "H001", "content": "x", "event_type": "t" * 1_200_000},
        {
            "agent_id": "H001",
            "content": "x",
            "event_type": "observation",
            "schema_version": "9" * 1_200_000,
        },
        {"agent_id": "H001", "content": "x", "event_type": "observation", "f" * 1_200_000: 1},
    ],
)
def test_a_dead_letter_of_a_huge_bad_input_stays_a_small_letter(value: dict[str, object]) -> None:
    """The reason quoted the refused input whole: a 1.2 MB event_type made a letter past the
    broker's request size, and the worker stopped (exit 70) on that record at every restart."""
    raw = orjson.dumps({"agent_id": "H001", "content": "x", **value})
    result = process_batch(
        [RawRecord("agent.observations", 0, 7, b"H001", raw, "observation")],
        lambda _: AgentMemoryState(),
        ctx=Deriving(CONFIG, EMBEDDER, ExtractiveSummariser(), VERSION),
        failed_at=datetime.now(UTC),
    )
    (letter,) = result.dead_letters
    assert len(letter.reason) < 3_000
    assert len(encode_event(letter)) < 200_000, "a letter past the broker's request size"
    assert "agent.observations[0]@7" in letter.reason  # where the whole record is
    # Exactly the first 128 KiB of the record (README, "Bad input"), and the reason says so.
    assert MAX_KEPT_BYTES == 131_072
    assert letter.original_value() == raw[:131_072]
    assert f"keeps the first 131,072 bytes of the value ({len(raw):,} bytes)" in letter.reason
    assert letter.key_b64 == base64.b64encode(b"H001").decode(), "a small key is kept whole"


def test_a_dead_letter_keeps_the_first_128_kib_of_a_huge_key_and_all_of_a_small_value() -> None:
    """A letter copies the key as it copies the value (base64, a third larger): a key near the
    producer's 1 MB limit could make a letter past it too, so the key is cut the same way, and
    the reason says which part was cut and where the whole record is."""
    key = bytes(i % 251 for i in range(300_000))  # no two windows alike: a prefix is a prefix
    raw = RawRecord("agent.observations", 0, 4, key, b"not json", "observation")
    result = process_batch(
        [raw],
        lambda _: AgentMemoryState(),
        ctx=Deriving(CONFIG, EMBEDDER, ExtractiveSummariser(), VERSION),
        failed_at=datetime.now(UTC),
    )
    (letter,) = result.dead_letters
    assert letter.key_b64 is not None
    assert base64.b64decode(letter.key_b64) == key[:131_072]
    assert letter.original_value() == b"not json"
    assert "keeps the first 131,072 bytes of the key (300,000 bytes)" in letter.reason
    assert "value (" not in letter.reason
    assert "agent.observations[0]@4" in letter.reason


def test_the_hashing_embedder_is_deterministic_normalised_and_lexical() -> None:
    a = EMBEDDER.embed("The levee was breached by the river flood")
    assert np.array_equal(a, HashingEmbedder().embed("The levee was breached by the river flood"))
    assert a.dtype == np.float32
    assert a.shape == (384,)
    assert abs(float(np.linalg.norm(a)) - 1.0) < 1e-5
    near = EMBEDDER.embed("river flood breached the levee")
    far = EMBEDDER.embed("we planted tomatoes in the garden")
    assert float(a @ near) > float(a @ far)
    assert not EMBEDDER.embed("the of and").any()
    assert keywords("The Flood, and MY house!") == ["flood", "house"]


def test_a_batch_dead_letters_poison_and_processes_the_rest() -> None:
    good = [Observation(agent_id=f"A{i % 2}", content=f"ok {i}", importance=0.5) for i in range(4)]
    records = [
        RawRecord(
            "agent.observations", 0, i * 2, e.agent_id.encode(), encode_event(e), "observation"
        )
        for i, e in enumerate(good)
    ]
    records.insert(2, RawRecord("agent.observations", 0, 3, b"A", b"\xff\xfe", "observation"))
    records.append(RawRecord("agent.observations", 0, 9, None, None, "observation"))
    result = process_batch(
        records,
        lambda _: AgentMemoryState(),
        ctx=Deriving(CONFIG, EMBEDDER, ExtractiveSummariser(), VERSION),
        failed_at=datetime.now(UTC),
    )
    assert [m.content for m in result.derived if isinstance(m, MemoryRecorded)] == [
        e.content for e in good
    ]
    assert [(d.offset, d.error_kind) for d in result.dead_letters] == [
        (3, "not_json"),
        (9, "empty"),
    ]
    assert result.dead_letters[0].original_value() == b"\xff\xfe"
    assert set(result.states) == {"A0", "A1"}
    assert result.states["A0"].next_seq == 2
    positions = [m.source_position for m in result.derived]
    assert all(p is not None and p.topic == "agent.observations" for p in positions)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=80))
def test_capacities_hold_for_any_sequence(importances: list[float]) -> None:
    recorded, forgotten, state = run(
        [
            Observation(agent_id="A", content=f"m{i}", importance=v)
            for i, v in enumerate(importances)
        ]
    )
    assert len(state.working) <= CONFIG.working_capacity
    assert len(state.episodic) <= CONFIG.episodic_capacity
    alive = {r.memory_id for r in recorded} - {f.memory_id for f in forgotten}
    assert alive == set(state.working_ids) | {e.memory_id for e in state.episodic}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["A", "B"]), st.floats(0, 1)), min_size=1, max_size=90))
def test_folding_the_derived_log_rebuilds_the_processor_state(
    items: list[tuple[str, float]],
) -> None:
    from processors.state_fold import FoldedState
    from schemas.memory_events import SourcePosition

    states: dict[str, AgentMemoryState] = {}
    derived: list[MemoryRecorded | MemoryForgotten] = []
    for offset, (agent, importance) in enumerate(items):
        out = record(
            Observation(agent_id=agent, content=f"m{offset}", importance=importance),
            states.get(agent, AgentMemoryState()),
            config=CONFIG,
            embedder=EMBEDDER,
            config_version=VERSION,
            position=SourcePosition(topic="obs", partition=0, offset=offset),
        )
        states[agent] = out.state
        derived.extend([out.memory, *out.forgotten])
    folded = FoldedState().apply_all(derived)
    assert folded.states == states
    # Read back from two topics: all recordings, then all forgettings; put back in order.
    from processors.emission_order import causal_order

    as_read = [e for e in derived if isinstance(e, MemoryRecorded)] + [
        e for e in derived if isinstance(e, MemoryForgotten)
    ]
    assert causal_order(as_read) == derived
    assert folded.derived_upto == {("obs", 0): len(items) - 1}
    # Folding twice (a redelivered derived event) changes nothing.
    assert FoldedState().apply_all(derived + derived).states == states


def test_a_logged_forgetting_without_its_recording_does_not_mark_the_record_derived() -> None:
    """Items and lifecycle are written independently: if only the forgetting of record 11 made
    it to the log, record 11 must be derived again (its memory is not in the log)."""
    from processors.state_fold import FoldedState
    from schemas.memory_events import SourcePosition

    state = AgentMemoryState()
    derived: list[MemoryRecorded | MemoryForgotten] = []
    for offset in range(11):
        out = record(
            Observation(agent_id="A", content=f"m{offset}", importance=0.5),
            state,
            config=CONFIG,
            embedder=EMBEDDER,
            config_version=VERSION,
            position=SourcePosition(topic="obs", partition=0, offset=offset),
        )
        state = out.state
        derived.extend([out.memory, *out.forgotten])
    *logged, _lost_recording, forgetting = derived
    assert isinstance(forgetting, MemoryForgotten)
    folded = FoldedState().apply_all([*logged, forgetting])
    assert folded.derived_upto == {("obs", 0): 9}


def test_two_agents_with_the_same_event_id_get_two_memories() -> None:
    """Producers pick event ids on their own; an id of the event alone made the second agent's
    memory replace the first's in the shared episodic store."""
    a, b = (
        Observation(agent_id=agent, event_id="turn-1", content=f"{agent} said hello")
        for agent in ("A", "B")
    )
    (memory_a,), _, _ = run([a])
    (memory_b,), _, _ = run([b])
    assert memory_a.memory_id != memory_b.memory_id
    assert memory_a.event_id != memory_b.event_id
    assert memory_a.memory_id == memory_id_for("A", "turn-1")


def test_feedback_keeps_the_agents_type_and_capacities() -> None:
    """A feedback that names no type (``engram feedback``, an MCP tool) carried the default,
    and recording it made the assistant a default agent: its working memory cut from 20 to 10."""
    turns = [
        Observation(agent_id="A1", agent_type="assistant", content=f"hello, turn {i}")
        for i in range(15)
    ]
    _, _, state = run(turns)
    assert len(state.working) == 15
    thanks = Feedback(agent_id="A1", target_event_id=turns[0].event_id, signal=1.0, content="ok")
    assert thanks.agent_type == "default"
    out = record(thanks, state, config=CONFIG, embedder=EMBEDDER, config_version=VERSION)
    assert not out.forgotten
    assert len(out.state.working) == 16
    assert out.state.agent_type == out.memory.agent_type == "assistant"
    # An agent's first event gives its type, feedback or not.
    first = Feedback(agent_id="A2", agent_type="assistant", target_event_id="x", signal=1.0)
    out = record(
        first, AgentMemoryState(), config=CONFIG, embedder=EMBEDDER, config_version=VERSION
    )
    assert out.state.agent_type == "assistant"


def test_a_timestamp_past_any_date_is_a_dead_letter_not_a_crash() -> None:
    """A record that gives no occurred_at takes its time from its timestamp in the log, which
    any client sets: past year 9999 it raised ValueError and ended the worker, every restart."""
    from schemas.codec import RecordOrigin, decode_agent_event

    value = b'{"agent_id": "P05", "content": "ts far future"}'
    good = Observation(agent_id="P05", content="good after", importance=0.5)
    records = [
        RawRecord("agent.observations", 0, 0, b"P05", value, "observation", timestamp_ms=10**15),
        RawRecord("agent.observations", 0, 1, b"P05", encode_event(good), "observation"),
    ]
    result = process_batch(
        records,
        lambda _: AgentMemoryState(),
        ctx=Deriving(CONFIG, EMBEDDER, ExtractiveSummariser(), VERSION),
        failed_at=datetime.now(UTC),
    )
    assert [(d.offset, d.error_kind) for d in result.dead_letters] == [(0, "invalid")]
    assert "past any date" in result.dead_letters[0].reason
    assert [m.content for m in result.derived if isinstance(m, MemoryRecorded)] == ["good after"]
    # In range, the timestamp is the event's time.
    origin = RecordOrigin("agent.observations", 0, 0, 1_700_000_000_000)
    at = decode_agent_event(value, expected_type="observation", origin=origin).occurred_at
    assert at == datetime.fromtimestamp(1_700_000_000, UTC)


def test_an_event_keyed_otherwise_than_by_its_agent_is_misplaced() -> None:
    """Keyed otherwise, or not keyed, it landed on another partition than its agent's: the
    agent's state split between two owners, and its history missed the memory."""
    event = Observation(agent_id="P04", content="key mismatch", importance=0.5)
    value = encode_event(event)
    records = [
        RawRecord("agent.observations", 0, 0, b"P03", value, "observation"),
        RawRecord("agent.observations", 0, 1, None, value, "observation"),
        RawRecord("agent.observations", 0, 2, b"P04", value, "observation"),
    ]
    result = process_batch(
        records,
        lambda _: AgentMemoryState(),
        ctx=Deriving(CONFIG, EMBEDDER, ExtractiveSummariser(), VERSION),
        failed_at=datetime.now(UTC),
    )
    assert [(d.offset, d.error_kind) for d in result.dead_letters] == [
        (0, "misplaced"),
        (1, "misplaced"),
    ]
    assert "keyed 'P03'" in result.dead_letters[0].reason
    assert [m.source_position.offset for m in result.derived if isinstance(m, MemoryRecorded)] == [
        2
    ]


def test_an_event_on_another_partition_than_its_agents_is_misplaced() -> None:
    """Keyed right but placed by another partitioner (librdkafka's default is crc32, not
    Kafka's murmur2), it split the agent just the same."""
    event = Observation(agent_id="P04", content="placed by crc32", importance=0.5)
    records = [
        RawRecord("agent.observations", p, 0, b"P04", encode_event(event), "observation")
        for p in (0, 3)
    ]
    ctx = Deriving(CONFIG, EMBEDDER, ExtractiveSummariser(), VERSION, placement=lambda _: 3)
    result = process_batch(
        records, lambda _: AgentMemoryState(), ctx=ctx, failed_at=datetime.now(UTC)
    )
    assert [(d.partition, d.error_kind) for d in result.dead_letters] == [(0, "misplaced")]
    assert "belong on partition 3" in result.dead_letters[0].reason
    assert [
        m.source_position.partition for m in result.derived if isinstance(m, MemoryRecorded)
    ] == [3]


def test_an_entry_considered_keeps_every_other_field() -> None:
    # Every field a distinct sentinel, so a field the copy loses or resets to its default
    # fails here.
    sentinels = {f.name: object() for f in dataclasses.fields(WorkingEntry)}
    entry = WorkingEntry(**sentinels)  # type: ignore[arg-type]

    assert entry.as_considered() == dataclasses.replace(entry, considered=True)
