"""Facts derived at year-end consolidation from an observation kind the agent kept seeing:
the threshold, what counts, supersession from one year to the next, the rule turned off, and
that the live state is the fold of what was logged."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from processors.config import ProcessingConfig, load_processing_config
from processors.embedding import HashingEmbedder
from processors.fact_patterns import recurring_kinds
from processors.learned_state import fact_key
from processors.learning_config import FactRules, LearningRules
from processors.lifecycle import Deriving, on_agent_event
from processors.recording import AgentMemoryState, WorkingEntry
from processors.state_fold import fold
from processors.summarising import ExtractiveSummariser
from schemas.agent_events import AgentEvent, Decision, Observation
from schemas.learned_events import FactStated
from schemas.memory_events import DerivedEvent, SourcePosition

T0 = datetime(2030, 1, 1, tzinfo=UTC)
AGENT = "H001"
EMBEDDER = HashingEmbedder()
SUMMARISER = ExtractiveSummariser()
CONFIG = load_processing_config()


def deriving(config: ProcessingConfig = CONFIG) -> Deriving:
    return Deriving(config, EMBEDDER, SUMMARISER, config.version(EMBEDDER.id, SUMMARISER.id))


def with_fact_rules(rules: FactRules) -> Deriving:
    profile = CONFIG.agent_types["household"].model_copy(
        update={"learning": LearningRules(facts=rules)}
    )
    return deriving(
        CONFIG.model_copy(update={"agent_types": {**CONFIG.agent_types, "household": profile}})
    )


class Year:
    """Numbered events of one household, a year at a time."""

    def __init__(self) -> None:
        self.n = 0

    def when(self, year: int) -> dict[str, object]:
        self.n += 1
        return {
            "agent_id": AGENT,
            "agent_type": "household",
            "event_id": f"e{self.n}",
            "occurred_at": T0 + timedelta(days=self.n),
            "year": year,
            "importance": 0.3,
        }

    def observe(self, year: int, kind: str | None, content: str = "") -> Observation:
        n = self.n + 1
        return Observation(**self.when(year), kind=kind, content=content or f"Seen {n}")  # type: ignore[arg-type]

    def decide(self, year: int, kind: str) -> Decision:
        return Decision(**self.when(year), kind=kind, skill="wait", content="Wait")  # type: ignore[arg-type]


def run(
    events: Sequence[AgentEvent], ctx: Deriving | None = None
) -> tuple[list[DerivedEvent], AgentMemoryState]:
    ctx = ctx or deriving()
    state = AgentMemoryState()
    derived: list[DerivedEvent] = []
    for i, event in enumerate(events):
        out = on_agent_event(event, state, ctx, SourcePosition(topic="t", partition=0, offset=i))
        derived.extend(out.events)
        state = out.state
    return derived, state


def facts_of(derived: Sequence[DerivedEvent]) -> list[FactStated]:
    return [e for e in derived if isinstance(e, FactStated)]


def entry(seq: int, kind: str | None, event_type: str = "observation") -> WorkingEntry:
    return WorkingEntry(
        memory_id=f"m{seq}",
        seq=seq,
        importance=0.3,
        content=f"c{seq}",
        tags=(),
        kind=kind,
        step=None,
        year=1,
        occurred_at=T0,
        source_event_id=f"e{seq}",
        source_event_type=event_type,
        agent_type="household",
    )


def test_recurring_kinds_counts_observations_of_a_kind_from_the_threshold_on() -> None:
    entries = [
        entry(5, "rain"),
        entry(1, "rain"),
        entry(2, "flood.minor"),
        entry(3, "rain"),
        entry(4, "flood.minor"),
        entry(6, None),
        entry(7, "flood.minor", "decision"),
    ]
    assert [(k, [e.seq for e in seen]) for k, seen in recurring_kinds(entries, 3)] == [
        ("rain", [1, 3, 5])
    ]
    assert [k for k, _ in recurring_kinds(entries, 2)] == ["flood.minor", "rain"]


def test_a_kind_seen_three_times_in_a_year_becomes_a_fact_at_year_end() -> None:
    y = Year()
    seen = [y.observe(1, "flood.minor", f"Year 1: The cellar flooded ({i})") for i in range(3)]
    derived, state = run([*seen, y.observe(1, None), y.observe(2, None)])
    (fact,) = facts_of(derived)
    assert fact.origin == "derived"
    assert (fact.subject, fact.attribute, fact.value) == (
        AGENT,
        "recurring flood.minor",
        "Year 1: The cellar flooded (2)",
    )
    assert fact.source_event_ids == tuple(e.event_id for e in seen)
    assert fact.supersedes is None
    assert (fact.caused_by, fact.year) == ("e5", 2)
    assert state.learned.facts == {fact_key(AGENT, "recurring flood.minor"): fact.fact_id}


def test_twice_is_not_a_pattern_and_decisions_do_not_count() -> None:
    y = Year()
    events = [y.observe(1, "flood.minor"), y.observe(1, "flood.minor"), y.decide(1, "flood.minor")]
    derived, _ = run([*events, y.observe(2, None)])
    assert facts_of(derived) == []


def test_the_pattern_again_the_next_year_supersedes_last_years_fact() -> None:
    y = Year()
    first = [y.observe(1, "rain") for _ in range(3)]
    second = [y.observe(2, "rain") for _ in range(4)]
    derived, state = run([*first, *second, y.observe(3, None)])
    older, newer = facts_of(derived)
    assert newer.supersedes == older.fact_id
    assert newer.source_event_ids == tuple(e.event_id for e in second)
    assert newer.valid_from > older.valid_from
    assert state.learned.facts == {fact_key(AGENT, "recurring rain"): newer.fact_id}


def test_a_year_considered_once_derives_once() -> None:
    """Working memories considered at one year end do not make a pattern again at the next."""
    y = Year()
    events = [y.observe(1, "rain") for _ in range(3)]
    derived, _ = run([*events, y.observe(2, None), y.observe(3, None)])
    assert len(facts_of(derived)) == 1


def test_the_rule_turned_off_derives_nothing() -> None:
    y = Year()
    events = [*(y.observe(1, "rain") for _ in range(3)), y.observe(2, None)]
    assert facts_of(run(events, with_fact_rules(FactRules(from_patterns=False)))[0]) == []
    assert facts_of(run(events, with_fact_rules(FactRules(enabled=False)))[0]) == []
    assert len(facts_of(run(events, with_fact_rules(FactRules(pattern_min_count=3)))[0])) == 1
    assert facts_of(run(events, with_fact_rules(FactRules(pattern_min_count=4)))[0]) == []


def test_the_state_is_the_fold_of_what_was_logged() -> None:
    y = Year()
    events = [
        *(y.observe(1, "rain") for _ in range(3)),
        *(y.observe(2, "rain") for _ in range(3)),
        y.observe(3, None),
    ]
    derived, state = run(events)
    folded = AgentMemoryState()
    for event in derived:
        folded = fold(folded, event)
    assert folded.learned == state.learned
    assert len(facts_of(derived)) == 2


def test_the_derivation_is_deterministic() -> None:
    y1, y2 = Year(), Year()
    make = [[y.observe(1, "rain") for _ in range(3)] + [y.observe(2, None)] for y in (y1, y2)]
    assert facts_of(run(make[0])[0]) == facts_of(run(make[1])[0])
