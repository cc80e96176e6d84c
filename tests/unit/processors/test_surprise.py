"""Surprise and arousal (seed 003, sections 2b, 3.1 and 4): the numbers of
the seed and hand-computed ones, because a retrieval's size depends on them (System 1 / 2), and
the properties a state carried in the log needs: bounded, JSON-stable, probabilities that sum
to one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import JsonValue

from processors.config import (
    DecisionConsistencySurprise,
    EmaSurprise,
    Sensor,
    SurpriseConfig,
    SymbolicSurprise,
)
from processors.surprise import (
    ConsistencyStrategy,
    SymbolicStrategy,
    assess,
    cognitive_system,
    signature_of,
)
from schemas.agent_events import AgentEvent, Decision, Observation
from schemas.memory_events import (
    ConsistencyState,
    EmaState,
    SurpriseReading,
    SymbolicState,
)

START = datetime(2026, 1, 1, tzinfo=UTC)

FLOOD = Sensor(name="FLOOD", key="flood_depth", bands={"LOW": 0.0, "MEDIUM": 0.5, "HIGH": 1.0})
NEIGHBOR = Sensor(name="NEIGHBOR", tags={"neighbor_elevating": "ELEVATING"})
SYMBOLIC = SymbolicSurprise(sensors=(FLOOD, NEIGHBOR))


def observation(
    n: int = 0,
    metadata: Mapping[str, JsonValue] | None = None,
    tags: tuple[str, ...] = (),
    kind: str | None = None,
) -> Observation:
    return Observation(
        agent_id="H001",
        event_id=f"o{n}",
        occurred_at=START + timedelta(days=n),
        content=f"Year {n}",
        metadata=dict(metadata or {}),
        tags=tags,
        kind=kind,
    )


def decision(skill: str, n: int = 0) -> Decision:
    return Decision(
        agent_id="H001",
        event_id=f"d{n}",
        occurred_at=START + timedelta(days=n),
        content=f"I decided to {skill}",
        skill=skill,
    )


def readings(
    config: SurpriseConfig, events: Sequence[AgentEvent]
) -> tuple[list[SurpriseReading | None], SurpriseReading | None]:
    """The reading of every event, and the agent's latest reading, as the processor keeps it."""
    last: SurpriseReading | None = None
    out: list[SurpriseReading | None] = []
    for event in events:
        reading = assess(config, last, event)
        out.append(reading)
        last = reading or last
    return out, last


def surprises(config: SurpriseConfig, events: Sequence[AgentEvent]) -> list[float | None]:
    return [None if r is None else r.surprise for r in readings(config, events)[0]]


# --- symbolic signatures: seed 003 section 4 ----------------------------------------------


def test_the_boiling_frog_trace_of_section_4_3() -> None:
    """Y1 new 1.0, Y2 0.5, Y3 0.333, Y4 0.25, ..., Y10 a new combination 1.0: the agent
    normalises the repeated disaster, and only a context shift wakes it up."""
    flood = {"flood_depth": 2.0}
    years = [observation(year, flood) for year in range(1, 10)]
    years.append(observation(10, flood, tags=("neighbor_elevating",)))

    got, _ = readings(SYMBOLIC, years)

    assert [r.observed if r else None for r in got] == ["FLOOD:HIGH"] * 9 + [
        "FLOOD:HIGH|NEIGHBOR:ELEVATING"
    ]
    assert [r.probability if r else None for r in got[:4]] == pytest.approx([0.0, 0.5, 2 / 3, 0.75])
    assert [r.surprise if r else None for r in got[:4]] == pytest.approx([1.0, 0.5, 1 / 3, 0.25])
    assert got[9] is not None
    assert (got[9].surprise, got[9].probability) == (1.0, 0.0)
    assert [r.system if r else None for r in got] == [
        "SYSTEM_2",
        # The table labels Year 2 (exactly 0.5) System 1; section 3.1's "PE >= 0.5" rules here.
        "SYSTEM_2",
        *["SYSTEM_1"] * 7,
        "SYSTEM_2",
    ]
    assert all(r is not None and r.arousal == r.surprise for r in got)


def test_the_events_of_one_year_are_one_situation() -> None:
    """Seed 003 signs the situation of a year (Y10: ``FLOOD:HIGH + NEIGHBOR:ELEVATING``). A
    household flooded and paid every year sent two events a year; signed one by one, each
    stayed about half as likely (n / (2n - 1)) and the household stayed in System 2 for good.
    As one situation a year it habituates as the seed's single flood does."""
    config = SymbolicSurprise(
        sensors=(FLOOD, NEIGHBOR, Sensor(name="CLAIM", kinds={"claim.approved": "PAID"}))
    )

    def year_of(year: int, *extra: str) -> list[Observation]:
        at = START + timedelta(days=365 * year)
        flood = Observation(
            agent_id="H001", event_id=f"f{year}", occurred_at=at, year=year,
            content="a flood", metadata={"flood_depth": 2.0}, tags=extra,
        )  # fmt: skip
        claim = Observation(
            agent_id="H001", event_id=f"c{year}", occurred_at=at, year=year,
            content="the claim was paid", kind="claim.approved",
        )  # fmt: skip
        return [flood, claim]

    events = [e for year in range(1, 5) for e in year_of(year)]
    events += year_of(5, "neighbor_elevating")
    got, last = readings(config, events)
    assert [r.surprise if r else None for r in got[:8]] == pytest.approx(
        [1.0, 1.0, 0.5, 0.5, 1 / 3, 1 / 3, 0.25, 0.25]
    )
    assert [r.observed if r else None for r in got[:2]] == ["FLOOD:HIGH", "CLAIM:PAID|FLOOD:HIGH"]
    assert got[7] is not None
    assert got[7].system == "SYSTEM_1"
    # Year 5 with a neighbour elevating: a new situation, the agent wakes up.
    assert got[8] is not None
    assert (got[8].observed, got[8].surprise) == ("FLOOD:HIGH|NEIGHBOR:ELEVATING", 1.0)
    assert last is not None
    assert isinstance(last.state, SymbolicState)
    assert last.state.observations == 4  # the years counted; the fifth when the sixth begins


def test_a_signature_is_the_sorted_levels_of_the_sensors_that_fire() -> None:
    sensors = (
        Sensor(name="PANIC", key="panic", values={"calm": "LOW", "true": "HIGH"}),
        Sensor(name="FLOOD", key="flood_depth", bands={"LOW": 0.0, "HIGH": 1.0}),
        Sensor(name="CLAIM", kinds={"claim.denied": "DENIED"}, tags={"paid": "PAID"}),
    )
    assert signature_of(sensors, observation(metadata={"flood_depth": 1.0, "panic": "calm"})) == (
        "FLOOD:HIGH|PANIC:LOW"
    )
    assert signature_of(sensors, observation(metadata={"flood_depth": 0.99})) == "FLOOD:LOW"
    assert signature_of(sensors, observation(metadata={"panic": True})) == "PANIC:HIGH"
    # Below every band, an unknown value, a boolean where a number is banded: silent.
    assert signature_of(sensors, observation(metadata={"flood_depth": -0.5})) is None
    assert signature_of(sensors, observation(metadata={"panic": "giddy"})) is None
    assert signature_of(sensors, observation(metadata={"flood_depth": True})) is None
    # Kind before tags; a tag when the kind names no level.
    assert signature_of(sensors, observation(kind="claim.denied", tags=("paid",))) == (
        "CLAIM:DENIED"
    )
    assert signature_of(sensors, observation(kind="flood.minor", tags=("paid",))) == "CLAIM:PAID"


def test_the_metadata_value_wins_over_kind_and_tags_and_falls_back_to_them() -> None:
    sensor = Sensor(
        name="FLOOD",
        key="flood_depth",
        bands={"LOW": 0.0, "HIGH": 1.0},
        kinds={"flood.major": "HIGH"},
        tags={"flood": "SOME"},
    )
    assert signature_of((sensor,), observation(metadata={"flood_depth": 0.2}, kind="flood.major"))
    assert (
        signature_of((sensor,), observation(metadata={"flood_depth": 0.2}, kind="flood.major"))
        == "FLOOD:LOW"
    )
    assert signature_of((sensor,), observation(kind="flood.major")) == "FLOOD:HIGH"
    assert signature_of(
        (sensor,), observation(metadata={"flood_depth": "deep"}, tags=("flood",))
    ) == ("FLOOD:SOME")


def test_an_event_no_sensor_reads_leaves_the_arousal_as_it_was() -> None:
    events: list[AgentEvent] = [
        observation(1, {"flood_depth": 2.0}),
        decision("buy_insurance", 2),
        observation(3, {"rain": 3}),
    ]
    got, last = readings(SYMBOLIC, events)
    assert got[1:] == [None, None]
    assert last == got[0]


# --- EMA: seed 003 section 3.1 -------------------------------------------------------------


def test_the_arousal_loop_of_section_3_1() -> None:
    """Expecting 0.1 m, seeing 2.0 m: PE 1.9, over the threshold, System 2."""
    config = EmaSurprise(stimulus_key="flood_depth", initial_expectation=0.1)
    (reading,), _ = readings(config, [observation(1, {"flood_depth": 2.0})])
    assert reading is not None
    assert (reading.expectation, reading.observed) == (0.1, 2.0)
    assert reading.surprise == 1.0
    assert reading.system == "SYSTEM_2"
    assert isinstance(reading.state, EmaState)
    assert reading.state.expectation == pytest.approx(0.1 + 0.3 * 1.9)


def test_ema_by_hand_first_stimulus_sets_the_expectation() -> None:
    """alpha 0.3, scale 2: 1.0 (E := 1.0, surprise 0), 2.0 (PE 1.0 -> 0.5, E 1.3),
    1.3 (PE 0 -> 0, E 1.3), -0.7 (PE 2.0 -> 1.0, E 0.7)."""
    config = EmaSurprise(stimulus_key="x", scale=2.0)
    events = [observation(i, {"x": x}) for i, x in enumerate([1.0, 2, 1.3, -0.7])]
    got, last = readings(config, events)
    assert [r.surprise if r else None for r in got] == pytest.approx([0.0, 0.5, 0.0, 1.0])
    assert [r.expectation if r else None for r in got] == pytest.approx([None, 1.0, 1.3, 1.3])
    assert [r.system if r else None for r in got] == [
        "SYSTEM_1",
        "SYSTEM_2",
        "SYSTEM_1",
        "SYSTEM_2",
    ]
    assert last is not None
    assert isinstance(last.state, EmaState)
    assert last.state.expectation == pytest.approx(0.7)
    assert last.state.observations == 4


def test_ema_ignores_events_without_a_numeric_stimulus() -> None:
    config = EmaSurprise(stimulus_key="x")
    events: list[AgentEvent] = [
        observation(0, {"x": 1.0}),
        observation(1, {"y": 9.0}),
        observation(2, {"x": "high"}),
        observation(3, {"x": True}),
        decision("wait", 4),
    ]
    got, last = readings(config, events)
    assert got[1:] == [None] * 4
    assert last == got[0]


def test_ema_stays_finite_for_extreme_stimuli() -> None:
    """The state is JSON in the log: an infinity would be written as null and never decode."""
    config = EmaSurprise(stimulus_key="x", initial_expectation=-1.7e308)
    (reading,), _ = readings(config, [observation(0, {"x": 1.7e308})])
    assert reading is not None
    assert reading.surprise == 1.0
    assert SurpriseReading.model_validate_json(reading.model_dump_json()) == reading


# --- decision consistency: seed 003 section 2b ---------------------------------------------


def test_unigram_by_hand() -> None:
    """P(a) = (n(a) + 1) / (N + V), V = distinct actions before + 1:
    a: 1/1 -> 0; a: 2/3 -> 1/3; a: 3/4 -> 1/4; b: 1/5 -> 0.8; a: 4/7 -> 3/7."""
    config = DecisionConsistencySurprise()
    events = [decision(s, i) for i, s in enumerate(["a", "a", "a", "b", "a"])]
    got, _ = readings(config, events)
    assert [r.probability if r else None for r in got] == pytest.approx(
        [1.0, 2 / 3, 3 / 4, 1 / 5, 4 / 7]
    )
    assert [r.surprise if r else None for r in got] == pytest.approx(
        [0.0, 1 / 3, 1 / 4, 4 / 5, 3 / 7]
    )
    assert [r.system if r else None for r in got] == ["SYSTEM_1"] * 3 + ["SYSTEM_2", "SYSTEM_1"]


def test_bigram_by_hand_sees_a_broken_alternation_that_unigram_does_not() -> None:
    """P(x | p) = (n(p -> x) + 1) / (n(p -> *) + V); the first decision takes the unigram 1/1.
    a: 1; b|a: 1/2; a|b: 1/3; b|a: 2/4; a|b: 2/4; a|a: 1/5 (a was always followed by b)."""
    events = [decision(s, i) for i, s in enumerate(["a", "b", "a", "b", "a", "a"])]
    bigram = surprises(DecisionConsistencySurprise(mode="bigram"), events)
    unigram = surprises(DecisionConsistencySurprise(mode="unigram"), events)
    assert bigram == pytest.approx([0.0, 1 / 2, 2 / 3, 1 / 2, 1 / 2, 4 / 5])
    # Unigram at the last decision: a taken 3 times of 5, V = 3: (3 + 1) / (5 + 3) = 0.5.
    assert unigram[-1] == pytest.approx(0.5)


def test_observations_do_not_count_as_decisions() -> None:
    events: list[AgentEvent] = [decision("a", 0), observation(1), decision("a", 2)]
    got, _ = readings(DecisionConsistencySurprise(), events)
    assert got[1] is None
    assert got[2] is not None
    assert got[2].probability == pytest.approx(2 / 3)


history = st.lists(st.sampled_from("abcdefg"), max_size=40)


@settings(max_examples=60, deadline=None)
@given(actions=history, mode=st.sampled_from(["unigram", "bigram"]))
def test_the_smoothed_probabilities_of_a_history_sum_to_one(
    actions: list[str], mode: Literal["unigram", "bigram"]
) -> None:
    """Over every action seen and one never seen, whatever came before: V is well defined."""
    strategy = ConsistencyStrategy(DecisionConsistencySurprise(mode=mode))
    state = ConsistencyState()
    for n, action in enumerate(actions):
        _, state = strategy.observe(state, decision(action, n))
    candidates = [a for a, _ in state.actions] + ["never-seen"]
    total = 0.0
    for candidate in candidates:
        observed, _ = strategy.observe(state, decision(candidate))
        assert observed is not None
        assert 0.0 <= observed.surprise <= 1.0
        total += observed.probability or 0.0
    assert total == pytest.approx(1.0)


# --- bounded, portable state ----------------------------------------------------------------


def test_a_full_action_table_drops_the_least_seen_least_recent_never_the_newest() -> None:
    strategy = ConsistencyStrategy(DecisionConsistencySurprise(mode="bigram", max_actions=3))
    state = ConsistencyState()
    for n, action in enumerate(["a", "a", "b", "c", "d", "e"]):
        _, state = strategy.observe(state, decision(action, n))
    # After d: a 2, b 1, c 1, d 1 -> b goes (least seen, least recent); after e: c goes.
    assert state.actions == (("a", 2), ("d", 1), ("e", 1))
    assert len(state.transitions) <= 3
    assert state.observations == 6
    assert state.previous == "e"


@settings(max_examples=40, deadline=None)
@given(symbols=st.lists(st.integers(0, 40), max_size=120))
def test_a_symbolic_state_never_exceeds_its_bound(symbols: list[int]) -> None:
    sensor = Sensor(name="S", key="s", values={str(i): f"L{i}" for i in range(41)})
    strategy = SymbolicStrategy(SymbolicSurprise(sensors=(sensor,), max_signatures=8))
    state = SymbolicState()
    for n, symbol in enumerate(symbols):
        observed, state = strategy.observe(state, observation(n, {"s": str(symbol)}))
        assert observed is not None
        assert len(state.seen) <= 8
        assert state.seen[-1][0] == f"S:L{symbol}", "the symbol just seen is kept"
    assert state.observations == len(symbols)


@settings(max_examples=40, deadline=None)
@given(actions=history, mode=st.sampled_from(["unigram", "bigram"]))
def test_a_reading_survives_the_wire_and_continues_identically(
    actions: list[str], mode: Literal["unigram", "bigram"]
) -> None:
    """What the fold restores is the reading decoded from the log: the next reading must not
    depend on whether the state went through JSON."""
    config = DecisionConsistencySurprise(mode=mode)
    events = [decision(a, n) for n, a in enumerate([*actions, "a"])]
    _, last = readings(config, events[:-1])
    if last is None:
        return
    decoded = SurpriseReading.model_validate_json(last.model_dump_json())
    assert decoded == last
    assert assess(config, decoded, events[-1]) == assess(config, last, events[-1])


def test_a_state_of_another_strategy_starts_afresh() -> None:
    """An agent whose type's strategy changed keeps no stale table of another kind."""
    (symbolic,), _ = readings(SYMBOLIC, [observation(0, {"flood_depth": 2.0})])
    reading = assess(DecisionConsistencySurprise(), symbolic, decision("a"))
    assert reading is not None
    assert reading.state == ConsistencyState(observations=1, actions=(("a", 1),), previous="a")


def test_no_strategy_no_reading() -> None:
    assert assess(None, None, decision("a")) is None


@pytest.mark.parametrize(
    ("arousal", "system"),
    [(0.0, "SYSTEM_1"), (0.4999, "SYSTEM_1"), (0.5, "SYSTEM_2"), (1.0, "SYSTEM_2")],
)
def test_system_2_from_the_threshold_up(arousal: float, system: str) -> None:
    assert cognitive_system(arousal, 0.5) == system


# --- reset_surprise: seed 003 section 2b, P1 -----------------------------------------------


def _reset(event: AgentEvent) -> AgentEvent:
    return event.model_copy(update={"reset_surprise": True})


def test_a_new_episode_makes_the_normalised_disaster_surprising_again() -> None:
    """Floods in Y1-Y4 habituate the household (1.0, 0.5, 0.333, 0.25); a fifth would surprise
    it 0.2. Begun as a new episode, the fifth surprises it fully, and the next goes on from
    there as Y2 did."""
    flood = {"flood_depth": 2.0}
    years = [observation(year, flood) for year in range(1, 7)]
    habituated = surprises(SYMBOLIC, years)
    assert habituated[4] == pytest.approx(0.2)

    got, _ = readings(SYMBOLIC, [*years[:4], _reset(years[4]), years[5]])
    assert [r.surprise if r else None for r in got] == pytest.approx(
        [1.0, 0.5, 1 / 3, 0.25, 1.0, 0.5]
    )
    assert got[4] is not None
    assert got[4].system == "SYSTEM_2"


def test_ema_after_a_reset_takes_its_first_stimulus_as_the_expectation() -> None:
    config = EmaSurprise(stimulus_key="x", scale=2.0)
    events = [observation(i, {"x": x}) for i, x in enumerate([0.1, 0.1, 2.0])]
    assert surprises(config, events)[2] == pytest.approx(0.95)
    got, last = readings(config, [*events[:2], _reset(events[2])])
    assert got[2] is not None
    assert (got[2].surprise, got[2].expectation) == (0.0, None)
    assert last is not None
    assert isinstance(last.state, EmaState)
    assert last.state.observations == 1


def test_decision_consistency_after_a_reset_expects_nothing() -> None:
    events = [decision(s, i) for i, s in enumerate(["renew", "renew", "renew", "elevate"])]
    assert surprises(DecisionConsistencySurprise(), events)[3] == pytest.approx(0.8)
    reset = [*events[:3], _reset(events[3])]
    assert surprises(DecisionConsistencySurprise(), reset)[3] == 0.0


def test_a_reset_the_strategy_does_not_read_is_a_reading_of_its_own() -> None:
    """An observation begins the episode of a decision-reading agent: the reset must still
    reach the log (on the recording), or a rebuild would go on from the old state."""
    events = [decision("renew", 0), decision("renew", 1), _reset(observation(2))]
    got, last = readings(DecisionConsistencySurprise(), events)
    assert got[2] is not None
    assert (got[2].observed, got[2].surprise, got[2].arousal) == ("reset", 0.0, 0.0)
    assert got[2].system == "SYSTEM_1"
    assert got[2].state == ConsistencyState()
    after = assess(DecisionConsistencySurprise(), last, decision("elevate", 3))
    assert after is not None
    assert after.surprise == 0.0, "the first decision of the episode expects nothing"


def test_no_strategy_no_reading_even_for_a_reset() -> None:
    assert assess(None, None, _reset(observation(0))) is None
