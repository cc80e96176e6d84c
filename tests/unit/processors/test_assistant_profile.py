"""The built-in ``assistant`` agent type and the per-type capacities: one switch
(``agent_type: "assistant"``) gives a chat agent importance tuned to conversation and room for
a long one, while every other type keeps the global capacities."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from processors.config import ProcessingConfig, load_processing_config
from processors.embedding import HashingEmbedder
from processors.importance import importance_of
from processors.lifecycle import Deriving, on_agent_event
from processors.recording import AgentMemoryState, EpisodicEntry, add_episodic, record
from processors.routing import destination_for
from processors.summarising import ExtractiveSummariser
from schemas.agent_events import Observation
from schemas.memory_events import MemoryForgotten, MemoryPromoted, SourcePosition

SHIPPED = load_processing_config()
ASSISTANT = SHIPPED.profile_for("assistant")
EMBEDDER = HashingEmbedder()
T0 = datetime(2030, 1, 1, tzinfo=UTC)

LIFE_FACTS = [
    "I just moved to Lisbon for a new job",
    "I'm allergic to peanuts, so no satay for me",
    "My birthday is on the 3rd of May",
    "I prefer tea to coffee in the morning",
    "We're planning a trip to Japan next month",
    "My sister got married last spring",
    "I quit smoking two years ago",
    "I started learning the cello",
    "Ana moved to Porto with her kids",
]
SMALL_TALK = [
    "Hello! How are you today?",
    "Thanks, that helps a lot",
    "the weather was grey again this morning",
    "haha ok, see you later",
    "good morning",
]


def chat(text: str, agent_type: str = "assistant", agent: str = "u1") -> Observation:
    return Observation(agent_id=agent, agent_type=agent_type, content=text)


def conversation(agent_type: str, turns: int) -> list[Observation]:
    """Turns of a long chat, a life fact every third turn and small talk in between."""
    lines = []
    for i in range(turns):
        pool = LIFE_FACTS if i % 3 == 0 else SMALL_TALK
        lines.append(
            Observation(
                agent_id="u1",
                agent_type=agent_type,
                content=f"{pool[i % len(pool)]} ({i})",
                occurred_at=T0 + timedelta(minutes=i),
            )
        )
    return lines


def run(
    events: Sequence[Observation], config: ProcessingConfig = SHIPPED
) -> tuple[AgentMemoryState, list[MemoryForgotten]]:
    state, forgotten = AgentMemoryState(), []
    version = config.version(EMBEDDER.id)
    for event in events:
        out = record(event, state, config=config, embedder=EMBEDDER, config_version=version)
        forgotten.extend(out.forgotten)
        state = out.state
    return state, forgotten


def types_file(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "types.yaml"
    path.write_text(
        "default:\n  emotional_weights: {routine: 0.5}\n  source_weights: {abstract: 1.0}\n"
        "roomy:\n  emotional_weights: {routine: 0.5}\n  source_weights: {abstract: 1.0}\n"
        f"{extra}"
    )
    return path


def test_the_assistant_profile_sets_larger_capacities_and_keeps_the_threshold() -> None:
    assert (ASSISTANT.working_capacity, ASSISTANT.episodic_capacity) == (20, 1000)
    assert ASSISTANT.episodic_threshold is None
    assert SHIPPED.working_capacity_for("assistant") == 20
    assert SHIPPED.episodic_capacity_for("assistant") == 1000
    assert SHIPPED.episodic_threshold_for("assistant") == SHIPPED.episodic_threshold == 0.7
    for other in ("default", "household", "a-type-nobody-configured"):
        assert SHIPPED.working_capacity_for(other) == SHIPPED.working_capacity == 10
        assert SHIPPED.episodic_capacity_for(other) == SHIPPED.episodic_capacity == 50


@pytest.mark.parametrize("text", LIFE_FACTS)
def test_life_facts_of_a_chat_go_to_episodic_memory(text: str) -> None:
    value, inputs = importance_of(chat(text), ASSISTANT)
    assert inputs.method == "emotion_source"
    assert destination_for(value, SHIPPED.episodic_threshold_for("assistant")) == "episodic"


@pytest.mark.parametrize("text", SMALL_TALK)
def test_small_talk_stays_in_working_memory_and_scores_lowest(text: str) -> None:
    value, inputs = importance_of(chat(text), ASSISTANT)
    assert inputs.emotion == "small_talk"
    assert value <= 0.1
    assert destination_for(value) == "working"


def test_a_life_fact_scores_above_small_talk_and_above_what_the_default_type_gives_it() -> None:
    fact = "I'm allergic to shellfish"
    talk = "Thanks, how are you?"
    assert importance_of(chat(fact), ASSISTANT)[0] > importance_of(chat(talk), ASSISTANT)[0]
    # The default profile (seed 003's household words) reads the same fact as routine.
    default = SHIPPED.profile_for("default")
    assert importance_of(chat(fact), ASSISTANT)[0] > importance_of(chat(fact), default)[0]
    assert importance_of(chat(fact, "default"), default)[0] < 0.7


def test_a_life_fact_outranks_a_greeting_in_the_same_turn() -> None:
    """Categories are tried in order and small talk comes last: a greeting does not hide the
    news that follows it."""
    value, inputs = importance_of(chat("Hello! Big news: I got married on Saturday"), ASSISTANT)
    assert (inputs.emotion, value) == ("life_change", 1.0)


def test_ordinary_turns_stay_in_working_memory() -> None:
    for text in ("I had pasta for lunch, nothing special", "I'm a bit tired, slept badly"):
        value, inputs = importance_of(chat(text), ASSISTANT)
        assert inputs.emotion == "routine"
        assert destination_for(value) == "working"


def test_an_assistant_agent_keeps_more_active_memories_than_a_default_agent() -> None:
    assistant, forgotten_assistant = run(conversation("assistant", 600))
    default, forgotten_default = run(conversation("default", 600))
    active_assistant = len(assistant.working) + len(assistant.episodic)
    active_default = len(default.working) + len(default.episodic)
    assert (len(assistant.working), len(assistant.episodic)) == (20, 200)
    assert active_default <= 10 + 50
    assert active_assistant > 3 * active_default
    assert len(forgotten_assistant) < len(forgotten_default)
    # The 200 life facts are all active for the assistant: none was forgotten.
    assert not [f for f in forgotten_assistant if f.destination == "episodic"]


def test_a_type_override_beats_the_global_capacity_and_none_keeps_it(tmp_path: Path) -> None:
    path = types_file(tmp_path, "  working_capacity: 3\n  episodic_capacity: 2\n")
    config = load_processing_config(path, working_capacity=5, episodic_capacity=4)
    assert config.working_capacity_for("roomy") == 3
    assert config.working_capacity_for("default") == 5
    low = [
        Observation(agent_id="a", agent_type="roomy", content=f"low {i}", importance=0.1)
        for i in range(8)
    ]
    high = [
        Observation(agent_id="b", agent_type="roomy", content=f"high {i}", importance=0.9)
        for i in range(8)
    ]
    plain = [
        Observation(agent_id="c", content=f"high {i}", importance=0.9 if i % 2 else 0.1)
        for i in range(16)
    ]
    assert len(run(low, config)[0].working) == 3
    assert len(run(high, config)[0].episodic) == 2
    state, _ = run(plain, config)
    assert (len(state.working), len(state.episodic)) == (5, 4)


def test_a_type_threshold_override_routes_by_it(tmp_path: Path) -> None:
    config = load_processing_config(types_file(tmp_path, "  episodic_threshold: 0.4\n"))
    event = Observation(agent_id="a", agent_type="roomy", content="x", importance=0.5)
    state, _ = run([event], config)
    assert (len(state.episodic), len(state.working)) == (1, 0)
    state, _ = run([event.model_copy(update={"agent_type": "default"})], config)
    assert (len(state.episodic), len(state.working)) == (0, 1)


def test_moving_to_a_smaller_type_evicts_down_to_its_capacity(tmp_path: Path) -> None:
    config = load_processing_config(
        types_file(tmp_path, "  episodic_capacity: 2\n"), episodic_capacity=6
    )
    wide = [Observation(agent_id="a", content=f"m{i}", importance=0.7 + i / 100) for i in range(6)]
    narrow = Observation(agent_id="a", agent_type="roomy", content="n", importance=0.95)
    state, forgotten = run([*wide, narrow], config)
    # Five go at once, the least important first: two are left, the newest and the best.
    assert len(forgotten) == 5
    assert [e.importance for e in state.episodic] == [0.75, 0.95]


def test_one_over_capacity_evicts_what_a_full_sort_would() -> None:
    """The single-eviction path finds the minimum in one pass; ties go to the oldest, as the
    sorted path's stable order does."""
    pool = tuple(EpisodicEntry(imp, seq, f"m{seq}") for seq, imp in enumerate([0.8, 0.7, 0.7]))
    _, gone = add_episodic(pool, EpisodicEntry(0.9, 3, "m3"), capacity=3)
    assert [e.memory_id for e in gone] == ["m1"]
    _, gone_two = add_episodic(pool, EpisodicEntry(0.9, 3, "m3"), capacity=2)
    assert [e.memory_id for e in gone_two] == ["m1", "m2"]


def test_consolidation_applies_the_type_episodic_capacity(tmp_path: Path) -> None:
    config = load_processing_config(
        types_file(tmp_path, "  episodic_capacity: 1\n"), episodic_threshold=0.95
    )
    ctx = Deriving(config, EMBEDDER, ExtractiveSummariser(), config.version(EMBEDDER.id))

    def promoted_and_forgotten(agent_type: str) -> tuple[int, int]:
        state, out = AgentMemoryState(), []
        for i, year in enumerate((1, 1, 2)):
            event = Observation(
                agent_id="a", agent_type=agent_type, content=f"m{i}", importance=0.8, year=year
            )
            position = SourcePosition(topic="agent.events", partition=0, offset=i)
            step = on_agent_event(event, state, ctx, position)
            out.extend(step.events)
            state = step.state
        promoted = [e for e in out if isinstance(e, MemoryPromoted)]
        forgotten = [e for e in out if isinstance(e, MemoryForgotten)]
        return len(promoted), len(forgotten)

    assert promoted_and_forgotten("roomy") == (2, 1)
    assert promoted_and_forgotten("default") == (2, 0)


def test_overrides_are_part_of_the_configuration_version(tmp_path: Path) -> None:
    plain = load_processing_config(types_file(tmp_path))
    roomy = load_processing_config(types_file(tmp_path, "  working_capacity: 30\n"))
    assert plain.version("e") != roomy.version("e")
    assert "working_capacity" in roomy.model_dump(mode="json")["agent_types"]["roomy"]


@pytest.mark.parametrize(
    "extra",
    ["  working_capacity: 0\n", "  episodic_capacity: -1\n", "  episodic_threshold: 1.5\n"],
)
def test_bad_overrides_are_refused_with_the_reason(tmp_path: Path, extra: str) -> None:
    with pytest.raises(ValidationError, match="roomy"):
        load_processing_config(types_file(tmp_path, extra))
