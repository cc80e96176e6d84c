"""``LearnedMemory.select_tool``: seed 002's tool selection over the procedures the processors
learned, read from the fields the Redis store keeps (a :class:`FieldStore` here); and that
recalling procedures reads the same embeddings; and which of an agent's facts is current."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import pytest

from processors.learning import learn
from projections.learned.reads import PROCEDURE_SIMILARITY
from schemas.agent_events import FactStatement, Observation
from tests.unit.projections.learned.learning_agents import (
    ATTRIBUTE_DESCRIPTION,
    ATTRIBUTE_TOOL,
    CTX,
    HEALTH,
    SPEED,
    FieldStore,
    LearningAgent,
    seed_tools,
)

HEALTH_TOOL = "SetPlayerHealth"
HEALTH_DESCRIPTION = "Set the player's health to a number of points"


async def test_the_seed_prompts_select_the_attribute_tool_or_miss() -> None:
    """Seed 002: "Set player speed to 20" matches SetPlayerAttribute by its description;
    "Set player's health to 75" is below 0.4, so the agent should create a tool."""
    store = FieldStore()
    seed_tools(store)
    memory = store.memory()

    speed = await memory.select_tool("P1", SPEED)
    assert speed.reason == "selected"
    assert speed.selected is not None
    assert speed.closest is None
    assert speed.selected.name == ATTRIBUTE_TOOL
    assert speed.selected.description == ATTRIBUTE_DESCRIPTION
    assert speed.selected.success_rate == 0.5  # just created: no rate is required
    assert speed.similarity == pytest.approx(0.4721, abs=1e-4)
    assert speed.selected.score == speed.similarity
    assert speed.threshold == PROCEDURE_SIMILARITY == 0.4

    health = await memory.select_tool("P1", HEALTH)
    assert health.reason == "below_threshold"
    assert health.selected is None
    assert health.closest is not None
    assert health.closest.name == ATTRIBUTE_TOOL
    assert health.similarity == pytest.approx(0.2801, abs=1e-4)


async def test_an_upvote_attaches_the_prompt_so_it_is_selected_at_1() -> None:
    store = FieldStore()
    agent = seed_tools(store)
    memory = store.memory()
    downvoted = agent.decide(ATTRIBUTE_TOOL, HEALTH)
    agent.feedback(downvoted, -1.0)
    assert (await memory.select_tool("P1", HEALTH)).reason == "below_threshold"

    upvoted = agent.decide(ATTRIBUTE_TOOL, HEALTH)
    agent.feedback(upvoted, 1.0)
    health = await memory.select_tool("P1", HEALTH)
    assert health.reason == "selected"
    assert health.selected is not None
    assert health.selected.name == ATTRIBUTE_TOOL
    assert health.selected.attached_texts == (HEALTH,)
    assert health.similarity == pytest.approx(1.0, abs=1e-6)


async def test_an_upvote_attaches_the_decision_s_prompt_not_its_content() -> None:
    """Seed 002 attaches the upvoted prompt: the request, not what the decision says it did."""
    store = FieldStore()
    agent = seed_tools(store)
    upvoted = agent.decide(ATTRIBUTE_TOOL, "I set the health attribute to 75", prompt=HEALTH)
    agent.feedback(upvoted, 1.0)
    health = await store.memory().select_tool("P1", HEALTH)
    assert health.selected is not None
    assert health.selected.attached_texts == (HEALTH,)
    assert health.similarity == pytest.approx(1.0, abs=1e-6)


async def test_exclude_falls_to_the_next_tool_or_to_a_miss() -> None:
    """After the upvote, SetPlayerAttribute is 1.0 for the health prompt and SetPlayerHealth
    (created on the miss) 0.644; excluding the downvoted one on the retry falls to the other."""
    store = FieldStore()
    agent = seed_tools(store)
    agent.feedback(agent.decide(ATTRIBUTE_TOOL, HEALTH), 1.0)
    agent.decide(HEALTH_TOOL, HEALTH_DESCRIPTION)
    memory = store.memory()

    first = await memory.select_tool("P1", HEALTH)
    assert first.selected is not None
    assert first.selected.name == ATTRIBUTE_TOOL

    retry = await memory.select_tool("P1", HEALTH, exclude=[ATTRIBUTE_TOOL])
    assert retry.reason == "selected"
    assert retry.selected is not None
    assert retry.selected.name == HEALTH_TOOL
    assert retry.similarity == pytest.approx(0.6444, abs=1e-4)

    speed = await memory.select_tool("P1", SPEED, exclude=(ATTRIBUTE_TOOL, "Forgotten"))
    assert speed.reason == "below_threshold"
    assert speed.closest is not None
    assert speed.closest.name == HEALTH_TOOL
    assert speed.similarity == pytest.approx(0.3834, abs=1e-4)

    everything = await memory.select_tool("P1", HEALTH, exclude={ATTRIBUTE_TOOL, HEALTH_TOOL})
    assert everything.reason == "all_excluded"
    assert (everything.selected, everything.closest, everything.similarity) == (None, None, None)


async def test_a_similarity_equal_to_the_threshold_is_selected() -> None:
    store = FieldStore()
    seed_tools(store)
    memory = store.memory()
    measured = (await memory.select_tool("P1", SPEED)).similarity
    assert measured is not None

    at = await memory.select_tool("P1", SPEED, min_similarity=measured)
    above = await memory.select_tool("P1", SPEED, min_similarity=float(np.nextafter(measured, 1)))
    assert (at.reason, at.threshold) == ("selected", measured)
    assert above.reason == "below_threshold"


async def test_a_tool_is_selected_whatever_its_success_rate() -> None:
    """Recalling procedures asks 0.6 by default; a failing tool is still the tool that fits
    (its feedback moves its rate, and the agent decides what to make of it)."""
    store = FieldStore()
    agent = seed_tools(store)
    decision = agent.decide(ATTRIBUTE_TOOL, "Set player strength to 3")
    for _ in range(3):
        agent.feedback(decision, -1.0)
    memory = store.memory()

    chosen = await memory.select_tool("P1", SPEED)
    assert chosen.selected is not None
    assert chosen.selected.success_rate == pytest.approx(0.3645)
    assert (await memory.procedures("P1", SPEED)).procedures == ()


async def test_an_agent_without_procedures_has_no_tools() -> None:
    store = FieldStore()
    seed_tools(store, "P1")
    chosen = await store.memory().select_tool("P2", SPEED, exclude=[ATTRIBUTE_TOOL])
    assert (chosen.reason, chosen.selected, chosen.closest) == ("no_tools", None, None)
    assert chosen.similarity is None


async def test_recall_and_selection_compare_the_same_embeddings() -> None:
    """Both read a procedure's description and attached texts through one gathering."""
    store = FieldStore()
    agent = seed_tools(store)
    agent.feedback(agent.decide(ATTRIBUTE_TOOL, HEALTH), 1.0)
    memory = store.memory()
    for prompt in (SPEED, HEALTH, "Plant tomatoes in the garden"):
        chosen = await memory.select_tool("P1", prompt)
        recalled = await memory.procedures("P1", prompt, min_success_rate=0.0, min_similarity=-1)
        (procedure,) = recalled.procedures
        assert procedure.score == chosen.similarity
        assert procedure.attached_texts == (HEALTH,)
        assert procedure.description == ATTRIBUTE_DESCRIPTION


async def test_recall_still_filters_by_rate_and_keeps_a_procedure_its_name_words_match() -> None:
    """Recalling procedures, read through the same gathering: seed 000's rate filter and sort,
    and a word of the name in the context keeping a procedure the embedding finds unrelated."""
    store = FieldStore()
    agent = seed_tools(store)
    heal = agent.decide("heal_player", "Restore hit points with a potion")
    agent.feedback(heal, 1.0)
    memory = store.memory()

    listed = (await memory.procedures("P1", min_success_rate=0.0)).procedures
    assert [(p.name, p.score) for p in listed] == [("heal_player", None), (ATTRIBUTE_TOOL, None)]
    assert [p.name for p in (await memory.procedures("P1", min_success_rate=0.52)).procedures] == [
        "heal_player"
    ]

    (named,) = (
        await memory.procedures("P1", "should we heal now?", min_success_rate=0.0)
    ).procedures
    assert (named.name, named.name_words) == ("heal_player", ("heal",))
    assert named.score is not None
    assert named.score < PROCEDURE_SIMILARITY


def _stated(store: FieldStore, agent: LearningAgent, n: int, when: datetime, city: str) -> str:
    observation = Observation.model_validate(
        {
            "agent_id": agent.agent_id,
            "event_id": f"city-{n}",
            "occurred_at": when,
            "content": f"the user lives in {city}",
            "fact": FactStatement(subject="user", attribute="city", value=city),
        }
    )
    learned, agent.state = learn(observation, agent.state, CTX)
    store.apply(learned)
    return city


T = datetime(2026, 5, 1, 12, tzinfo=UTC)
LATER_ELSEWHERE = (T + timedelta(minutes=30)).astimezone(timezone(timedelta(hours=-5)))
"""Half an hour after ``T``, written as 07:30-05:00: as text it sorts before 12:00Z."""


@pytest.mark.parametrize(
    "second",
    [
        T + timedelta(hours=1),
        T - timedelta(hours=1),  # a backdated restatement
        LATER_ELSEWHERE,
    ],
    ids=["in-order", "backdated", "other-offset"],
)
async def test_the_fact_read_last_is_current_whatever_time_it_carries(second: datetime) -> None:
    """Which fact replaces which is the order the worker read them in. The read chose the
    "latest" by sorting its time as text: a backdated restatement, or a later time written in
    another offset ("07:30-05:00" sorts before "12:00Z"), left the agent with no current fact."""
    store = FieldStore()
    agent = LearningAgent(store, "U1")
    _stated(store, agent, 1, T, "Paris")
    _stated(store, agent, 2, second, "Berlin")
    facts = (await store.memory().facts("U1", history=True)).facts
    assert {f.value: f.current for f in facts} == {"Paris": False, "Berlin": True}
    assert [f.value for f in (await store.memory().facts("U1")).facts] == ["Berlin"]


async def test_of_facts_the_worker_left_unended_the_later_is_current() -> None:
    """Past the pairs the worker tracks, a restatement replaces nothing it knows: both facts
    stand unended, and the later time (compared as a time) is the current one."""
    store = FieldStore()
    _stated(store, LearningAgent(store, "U1"), 1, T, "Paris")
    _stated(store, LearningAgent(store, "U1"), 2, LATER_ELSEWHERE, "Berlin")
    facts = (await store.memory().facts("U1", history=True)).facts
    assert {f.value: (f.current, f.valid_to) for f in facts} == {
        "Paris": (False, None),
        "Berlin": (True, None),
    }
