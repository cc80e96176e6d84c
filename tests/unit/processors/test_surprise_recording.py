"""Surprise as part of processing: configured per agent type, versioned with the rules, carried
on ``MemoryRecorded`` and folded back from the log, so a worker that takes an agent over
continues its arousal exactly (seed 003; streams/README.md, invariants 1-2)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from processors.batch import RawRecord, process_batch
from processors.config import (
    DecisionConsistencySurprise,
    EmaSurprise,
    ProcessingConfig,
    SymbolicSurprise,
    load_processing_config,
)
from processors.embedding import HashingEmbedder
from processors.emission_order import causal_order
from processors.lifecycle import Deriving
from processors.recording import AgentMemoryState, record
from processors.state_fold import FoldedState, fold
from processors.summarising import ExtractiveSummariser
from schemas.agent_events import AgentEvent, Decision, Observation
from schemas.codec import decode_derived_event, encode_event
from schemas.memory_events import DerivedEvent, MemoryRecorded, SurpriseReading

SHIPPED = load_processing_config()
EMBEDDER = HashingEmbedder()
SUMMARISER = ExtractiveSummariser()
START = datetime(2026, 1, 1, tzinfo=UTC)


def with_surprise(config: ProcessingConfig, **per_type: object) -> ProcessingConfig:
    """``config`` with the shipped default profile under new names and surprise strategies."""
    base = config.profile_for("default")
    types = dict(config.agent_types)
    for name, surprise in per_type.items():
        types[name] = base.model_copy(update={"surprise": surprise})
    return config.model_copy(update={"agent_types": types})


MIXED = with_surprise(
    load_processing_config(working_capacity=3, episodic_capacity=3),
    default=DecisionConsistencySurprise(mode="bigram", max_actions=3),
    gauge=EmaSurprise(stimulus_key="level", alpha=0.5),
)
"""Every strategy at once (household keeps the shipped symbolic one), small tables and
capacities so that bounds and evictions happen in short streams."""
CTX = Deriving(MIXED, EMBEDDER, SUMMARISER, MIXED.version(EMBEDDER.id, SUMMARISER.id))


# --- configuration ---------------------------------------------------------------------------


def test_every_agent_type_has_decision_consistency_unless_it_names_another() -> None:
    assert SHIPPED.profile_for("default").surprise == DecisionConsistencySurprise(
        mode="unigram", arousal_threshold=0.5
    )
    assert SHIPPED.profile_for("a-type-nobody-configured").surprise == (
        SHIPPED.profile_for("default").surprise
    )
    household = SHIPPED.profile_for("household").surprise
    assert isinstance(household, SymbolicSurprise)
    assert household.arousal_threshold == 0.5
    assert (household.sensors[0].name, household.sensors[0].key) == ("FLOOD", "flood_depth")


def test_profiles_name_their_strategy_in_yaml(tmp_path: Path) -> None:
    path = tmp_path / "types.yaml"
    weights = "emotional_weights: {routine: 0.1}\n  source_weights: {abstract: 0.3}"
    path.write_text(
        f"default:\n  {weights}\n"
        f"gauge:\n  {weights}\n"
        "  surprise: {strategy: ema, stimulus_key: flood_depth, alpha: 0.5, scale: 2}\n"
        f"quiet:\n  {weights}\n  surprise: null\n"
    )
    config = load_processing_config(path)
    assert config.profile_for("default").surprise == DecisionConsistencySurprise()
    assert config.profile_for("gauge").surprise == EmaSurprise(
        stimulus_key="flood_depth", alpha=0.5, scale=2.0
    )
    assert config.profile_for("quiet").surprise is None
    quiet = Decision(agent_id="Q", agent_type="quiet", skill="a", content="did a")
    out = record(quiet, AgentMemoryState(), config=config, embedder=EMBEDDER, config_version="v")
    assert out.memory.surprise is None


@pytest.mark.parametrize(
    "surprise",
    [
        "{strategy: telepathy}",
        "{strategy: ema}",
        "{strategy: decision_consistency, arousal_threshold: 1.5}",
        "{strategy: decision_consistency, mode: trigram}",
        "{strategy: symbolic, sensors: []}",
        "{strategy: symbolic, sensors: [{name: FLOOD}]}",
        "{strategy: symbolic, sensors: [{name: FLOOD, key: depth}]}",
        "{strategy: symbolic, sensors: [{name: 'FLOOD|X', kinds: {a: HIGH}}]}",
        "{strategy: symbolic, sensors: [{name: F, kinds: {a: X}}, {name: F, tags: {b: Y}}]}",
    ],
)
def test_bad_surprise_settings_are_refused(tmp_path: Path, surprise: str) -> None:
    path = tmp_path / "types.yaml"
    path.write_text(
        "default:\n  emotional_weights: {routine: 0.1}\n  source_weights: {abstract: 0.3}\n"
        f"  surprise: {surprise}\n"
    )
    with pytest.raises(ValidationError):
        load_processing_config(path)


@pytest.mark.parametrize(
    "surprise",
    [
        DecisionConsistencySurprise(mode="bigram"),
        DecisionConsistencySurprise(arousal_threshold=0.6),
        EmaSurprise(stimulus_key="flood_depth"),
        None,
    ],
)
def test_new_surprise_settings_are_a_new_configuration_version(
    surprise: DecisionConsistencySurprise | EmaSurprise | None,
) -> None:
    """A reprocess with other surprise settings derives other readings: another version."""
    changed = with_surprise(SHIPPED, default=surprise)
    assert changed.version(EMBEDDER.id) != SHIPPED.version(EMBEDDER.id)
    same = with_surprise(SHIPPED, default=DecisionConsistencySurprise())
    assert same.version(EMBEDDER.id) == SHIPPED.version(EMBEDDER.id)


# --- recording -------------------------------------------------------------------------------


def test_a_recording_carries_the_reading_and_the_state_keeps_the_latest() -> None:
    state = AgentMemoryState()
    events: list[AgentEvent] = [
        Decision(agent_id="A", skill="wait", content="I waited"),
        Observation(agent_id="A", content="It rained"),
    ]
    memories: list[MemoryRecorded] = []
    for event in events:
        out = record(
            event, state, config=SHIPPED, embedder=EMBEDDER, config_version="v", position=None
        )
        memories.append(out.memory)
        state = out.state
    first, second = memories
    assert first.surprise is not None
    assert (first.surprise.strategy, first.surprise.observed) == ("decision_consistency", "wait")
    assert second.surprise is None
    assert (state.surprise, state.surprise_seq) == (first.surprise, first.seq)
    assert decode_derived_event(encode_event(first)) == first


def test_a_household_habituates_to_yearly_major_floods_through_the_processor() -> None:
    """The shipped household profile on the flood kinds of seed 004: section 4.3's trace."""
    state = AgentMemoryState()
    got: list[float | None] = []
    for year in range(1, 5):
        flood = Observation(
            agent_id="H1",
            agent_type="household",
            year=year,
            kind="flood.major",
            content=f"Year {year}: A major flood caused $60,000 in damages",
        )
        out = record(flood, state, config=SHIPPED, embedder=EMBEDDER, config_version="v")
        assert out.memory.destination == "episodic", "the reading rides on episodic ones too"
        got.append(None if out.memory.surprise is None else out.memory.surprise.surprise)
        state = out.state
    assert got == pytest.approx([1.0, 0.5, 1 / 3, 0.25])
    assert state.surprise is not None
    assert state.surprise.system == "SYSTEM_1"


# --- the fold ----------------------------------------------------------------------------------

AGENTS = {"D1": "default", "D2": "default", "H1": "household", "G1": "gauge"}
SKILLS = ("elevate", "insure", "wait", "relocate", "wait")
KINDS = ("flood.major", "flood.minor", "neighbor.adaptation", "claim.denied", None)

step = st.tuples(
    st.sampled_from(sorted(AGENTS)),
    st.sampled_from(["decide", "observe", "advance"]),
    st.integers(0, 4),
)


@dataclass
class Stream:
    """Raw records of generated agent events, and a worker's state around ``process_batch``."""

    records: list[RawRecord] = field(default_factory=list)
    years: dict[str, int] = field(default_factory=dict)

    def add(self, n: int, agent: str, what: str, value: int) -> None:
        if what == "advance":
            self.years[agent] = self.years.get(agent, 0) + 1
            return
        common = {
            "agent_id": agent,
            "agent_type": AGENTS[agent],
            "event_id": f"{agent}-{n}",
            "occurred_at": START + timedelta(minutes=n),
            "year": self.years.get(agent, 0),
        }
        event: AgentEvent
        if what == "decide":
            event = Decision(**common, skill=SKILLS[value], content=f"I chose {SKILLS[value]}")
        else:
            event = Observation(
                **common,
                kind=KINDS[value],
                metadata={"level": value * 0.4} if value != 4 else {},
                content=f"Something happened ({n})",
            )
        topic = "agent.decisions" if what == "decide" else "agent.observations"
        offset = sum(1 for r in self.records if r.topic == topic)
        self.records.append(
            RawRecord(
                topic, 0, offset, event.agent_id.encode(), encode_event(event), event.event_type
            )
        )


def process(
    records: Sequence[RawRecord], states: dict[str, AgentMemoryState]
) -> list[DerivedEvent]:
    result = process_batch(
        records,
        lambda agent: states.get(agent) or AgentMemoryState(),
        ctx=CTX,
        failed_at=START,
    )
    assert not result.dead_letters
    states.update(result.states)
    return result.derived


def read_back(derived: Sequence[DerivedEvent]) -> list[DerivedEvent]:
    """Recordings first, then the lifecycle topic, decoded from the wire, in causal order."""
    items = [e for e in derived if isinstance(e, MemoryRecorded)]
    lifecycle = [e for e in derived if not isinstance(e, MemoryRecorded)]
    return causal_order(decode_derived_event(encode_event(e)) for e in [*items, *lifecycle])


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(step, min_size=1, max_size=60), cut=st.integers(0, 60))
@example(
    steps=[
        *[("D1", "decide", v) for v in (0, 1, 0, 1, 2, 3)],
        *[("H1", "observe", 0), ("H1", "advance", 0)] * 3,
        *[("G1", "observe", v) for v in (1, 4, 3, 0)],
        ("D1", "decide", 0),
        ("H1", "observe", 2),
        ("G1", "observe", 2),
    ],
    cut=9,
)
def test_folding_the_log_gives_the_live_surprise_state_and_the_same_future(
    steps: list[tuple[str, str, int]], cut: int
) -> None:
    """A worker that takes over at ``cut`` folds the log written so far, and must then derive
    exactly what the worker that never stopped derives: same readings, same arousal."""
    stream = Stream()
    for n, (agent, what, value) in enumerate(steps):
        stream.add(n, agent, what, value)
    records = stream.records
    cut = min(cut, len(records))

    live: dict[str, AgentMemoryState] = {}
    uninterrupted = process(records, live)

    before: dict[str, AgentMemoryState] = {}
    first = process(records[:cut], before)
    folded = FoldedState().apply_all(read_back(first)).states
    assert {a: s.surprise for a, s in folded.items()} == {a: s.surprise for a, s in before.items()}
    assert folded == before
    continued = process(records[cut:], folded)

    assert [*first, *continued] == uninterrupted
    assert FoldedState().apply_all(read_back(uninterrupted)).states == live


def test_an_old_recording_folded_again_never_takes_the_arousal_back() -> None:
    stream = Stream()
    for n, skill in enumerate([0, 0, 0, 1]):
        stream.add(n, "D1", "decide", skill)
    states: dict[str, AgentMemoryState] = {}
    derived = process(stream.records, states)
    recordings = [e for e in derived if isinstance(e, MemoryRecorded)]
    state = FoldedState().apply_all(derived).states["D1"]
    latest = state.surprise
    assert latest is not None
    assert latest.system == "SYSTEM_2"

    for old in recordings[:2]:
        state = fold(state, old)

    assert state.surprise == latest
    assert state.surprise_seq == recordings[-1].seq


def test_forgetting_an_agent_forgets_its_arousal() -> None:
    from schemas.memory_events import AgentForgotten

    stream = Stream()
    stream.add(0, "D1", "decide", 0)
    states: dict[str, AgentMemoryState] = {}
    derived = process(stream.records, states)
    erased = AgentForgotten(agent_id="D1", requested_at=START, caused_by="forget-1")
    state = FoldedState().apply_all([*derived, erased]).states["D1"]
    assert state.surprise is None
    assert isinstance(derived[0], MemoryRecorded)
    assert isinstance(derived[0].surprise, SurpriseReading)
