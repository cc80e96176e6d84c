"""Learning from decisions, feedback and facts: the EMA sequences of seeds 000 and 002,
supersession of facts, plan cache hits, misses and evictions, and that the live state is the
fold of what was logged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from processors.config import load_processing_config
from processors.embedding import HashingEmbedder
from processors.learned_state import (
    MAX_RATED_MEMORIES,
    MAX_RECENT_DECISIONS,
    LearnedState,
    Rating,
    fact_key,
    fold_learned,
)
from processors.learning import learn
from processors.learning_config import LearningRules, PlanRules, ProcedureRules
from processors.lifecycle import Deriving, on_agent_event
from processors.plan_cache import CachedPlan, best_plan
from processors.procedures import ema
from processors.recording import AgentMemoryState
from processors.state_fold import fold
from processors.summarising import ExtractiveSummariser
from schemas.agent_events import AgentEvent, Decision, FactStatement, Feedback, Observation
from schemas.learned_events import FactStated, MemoryRated, PlanChanged, ProcedureChanged
from schemas.memory_events import DerivedEvent, decode_vector

EMBEDDER = HashingEmbedder()
CONFIG = load_processing_config()
CTX = Deriving(CONFIG, EMBEDDER, ExtractiveSummariser(), "cfg")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Agent:
    """One agent's events through :func:`learn`, with the state carried on and checked
    against the fold of everything learned."""

    def __init__(self, ctx: Deriving = CTX) -> None:
        self.state = AgentMemoryState()
        self.folded = AgentMemoryState()
        self.ctx = ctx
        self.n = 0

    def send(self, event: AgentEvent) -> list[DerivedEvent]:
        learned, self.state = learn(event, self.state, self.ctx)
        for change in learned:
            self.folded = fold(self.folded, change)
            self.folded = fold(self.folded, change)  # idempotent
        assert self.folded.learned == self.state.learned
        return list(learned)

    def when(self) -> dict[str, object]:
        self.n += 1
        return {
            "agent_id": "H001",
            "agent_type": "household",
            "event_id": f"e{self.n}",
            "occurred_at": T0 + timedelta(days=self.n),
        }

    def decide(self, skill: str, content: str, prompt: str | None = None) -> str:
        actions = [{"tool": skill, "input": "house", "observation": "done"}] if prompt else []
        decision = Decision.model_validate(
            {
                **self.when(),
                "skill": skill,
                "content": content,
                "prompt": prompt,
                "actions": actions,
            }
        )
        self.send(decision)
        return decision.event_id

    def feedback(self, target: str, signal: float) -> list[DerivedEvent]:
        return self.send(Feedback(**self.when(), target_event_id=target, signal=signal))  # type: ignore[arg-type]


def test_the_success_rate_follows_seed_000s_ema() -> None:
    """0.5 -> 0.55 -> 0.595 -> 0.5355 for a success, a success, a failure (alpha 0.1)."""
    agent = Agent()
    first = agent.decide("elevate", "Elevate the house on stilts")
    procedure = agent.state.learned.procedures["elevate"]
    assert (procedure.success_rate, procedure.usage_count) == (0.5, 0)
    rates = []
    for signal in (1.0, 0.4, -0.7):
        (change,) = agent.feedback(first, signal)
        assert isinstance(change, ProcedureChanged)
        assert change.change == "outcome"
        rates.append(change.success_rate)
    assert rates == pytest.approx([0.55, 0.595, 0.5355])
    assert agent.state.learned.procedures["elevate"].usage_count == 3
    assert ema(0.5, 1.0, 0.1) == pytest.approx(0.55)


def test_a_neutral_signal_changes_nothing_and_alpha_is_per_agent_type() -> None:
    profile = CONFIG.agent_types["household"].model_copy(
        update={"learning": LearningRules(procedures=ProcedureRules(alpha=0.5))}
    )
    config = CONFIG.model_copy(update={"agent_types": {**CONFIG.agent_types, "household": profile}})
    agent = Agent(Deriving(config, EMBEDDER, ExtractiveSummariser(), "cfg"))
    decision = agent.decide("insure", "Buy flood insurance")
    assert agent.feedback(decision, 0.0) == []
    (change,) = agent.feedback(decision, -1.0)
    assert isinstance(change, ProcedureChanged)
    assert change.success_rate == pytest.approx(0.25)
    assert change.alpha == 0.5


def test_later_decisions_invoke_and_upvotes_attach_their_text() -> None:
    agent = Agent()
    agent.decide("elevate", "Elevate the house on stilts")
    second = agent.decide("elevate", "Raise the foundation above the flood line")
    (upvote,) = agent.feedback(second, 1.0)
    assert isinstance(upvote, ProcedureChanged)
    assert upvote.attached is not None
    assert upvote.attached.text == "Raise the foundation above the flood line"
    (downvote,) = agent.feedback(second, -1.0)
    assert isinstance(downvote, ProcedureChanged)
    assert downvote.attached is None


def test_a_later_fact_supersedes_the_earlier_on_the_same_subject_and_attribute() -> None:
    agent = Agent()

    def state(attribute: str, value: str) -> FactStated:
        fact = FactStatement(subject="house", attribute=attribute, value=value)
        (event,) = agent.send(
            Observation(**agent.when(), content=f"{attribute} {value}", fact=fact)
        )  # type: ignore[arg-type]
        assert isinstance(event, FactStated)
        return event

    first = state("elevation", "1 m")
    other = state("insured", "yes")
    second = state("elevation", "3 m")
    assert first.supersedes is None
    assert other.supersedes is None
    assert second.supersedes == first.fact_id
    assert agent.state.learned.facts[fact_key("house", "elevation")] == second.fact_id


def test_a_plan_is_cached_scored_and_evicted_below_epsilon() -> None:
    agent = Agent()
    decision = agent.decide("elevate", "Elevated", prompt="Protect the house from the flood")
    plan = agent.state.learned.plans
    (plan_id,) = plan
    assert plan[plan_id].score == 1.0
    changes = agent.feedback(decision, -1.0)
    scored = [c for c in changes if isinstance(c, PlanChanged)]
    assert [(c.change, round(c.score, 3)) for c in scored] == [("scored", 0.7)]
    changes = agent.feedback(decision, -1.0)
    scored = [c for c in changes if isinstance(c, PlanChanged)]
    assert [(c.change, round(c.score, 3)) for c in scored] == [("scored", 0.49), ("evicted", 0.49)]
    assert agent.state.learned.plans == {}
    assert [c for c in agent.feedback(decision, -1.0) if isinstance(c, PlanChanged)] == []


def test_plans_beyond_capacity_evict_the_lowest_score() -> None:
    profile = CONFIG.agent_types["household"].model_copy(
        update={"learning": LearningRules(plans=PlanRules(max_plans=2))}
    )
    config = CONFIG.model_copy(update={"agent_types": {**CONFIG.agent_types, "household": profile}})
    agent = Agent(Deriving(config, EMBEDDER, ExtractiveSummariser(), "cfg"))
    a = agent.decide("a", "A", prompt="first request")
    agent.decide("b", "B", prompt="second request")
    agent.feedback(a, -1.0)
    agent.decide("c", "C", prompt="third request")
    assert len(agent.state.learned.plans) == 2
    remaining = {e.decision_event_id for e in agent.state.learned.plans.values()}
    assert a not in remaining


def cached(prompt: str, score: float = 1.0) -> CachedPlan:
    return CachedPlan(prompt, EMBEDDER.embed(prompt), score, 0.8, 0.5)


def test_a_lookup_hits_a_similar_prompt_and_misses_another_or_a_low_score() -> None:
    plans = [cached("Protect the house from the spring flood"), cached("Buy flood insurance")]
    hit = best_plan(EMBEDDER.embed("Protect the house from the next spring flood"), plans)
    assert hit is not None
    assert hit[0].plan_id == "Protect the house from the spring flood"
    assert 0.8 <= hit[1] < 1.0
    assert best_plan(EMBEDDER.embed("Protect the barn from the spring flood"), plans) is None
    low = [cached("Protect the house from the spring flood", score=0.4)]
    assert best_plan(EMBEDDER.embed("Protect the house from the spring flood"), low) is None


def test_feedback_on_an_observation_is_counted_on_its_memory() -> None:
    agent = Agent()
    observation = Observation(**agent.when(), content="The river is rising")  # type: ignore[arg-type]
    agent.state = on_agent_event(observation, agent.state, CTX).state
    (rated,) = agent.feedback(observation.event_id, 1.0)
    assert isinstance(rated, MemoryRated)
    assert (rated.upvotes, rated.downvotes, rated.level) == (1, 0, 0)
    (rated,) = agent.feedback(observation.event_id, -0.5)
    assert isinstance(rated, MemoryRated)
    assert (rated.upvotes, rated.downvotes, rated.revision) == (1, 1, 1)
    assert agent.feedback("never-published", 1.0) == []


def test_the_description_embedding_is_the_decisions_text() -> None:
    agent = Agent()
    decision = Decision(**agent.when(), skill="elevate", content="Elevate the house")  # type: ignore[arg-type]
    (created,) = agent.send(decision)
    assert isinstance(created, ProcedureChanged)
    assert created.description_embedding is not None
    vector = decode_vector(created.description_embedding)
    # Embeddings travel as float16: equal to 11 significant bits.
    assert np.allclose(vector, EMBEDDER.embed("Elevate the house"), rtol=2.0**-10, atol=1e-6)


def test_feedback_teaches_on_the_latest_128_decisions_and_nothing_on_an_older_one() -> None:
    """Feedback names its decision long after it, and the worker keeps only an agent's latest
    128 decisions (its state is carried for every agent): the second latest and the oldest
    still kept take feedback; one decision more pushes that oldest out, and feedback on it
    then teaches nothing."""
    assert MAX_RECENT_DECISIONS == 128
    agent = Agent()
    kept = [agent.decide("elevate", f"Elevate the house by {i} cm") for i in range(128)]
    first = kept[0]

    (change,) = agent.feedback(kept[-2], 1.0)
    assert isinstance(change, ProcedureChanged)
    assert (change.change, change.usage_count) == ("outcome", 1)
    (change,) = agent.feedback(first, -1.0)
    assert isinstance(change, ProcedureChanged)
    assert (change.change, change.usage_count) == ("outcome", 2)

    latest = agent.decide("elevate", "Elevate the house by 128 cm")
    assert list(agent.state.learned.decisions) == [*kept[1:], latest]
    assert agent.feedback(first, 1.0) == []
    assert agent.state.learned.procedures["elevate"].usage_count == 2
    (change,) = agent.feedback(kept[1], 1.0)  # now the oldest kept
    assert isinstance(change, ProcedureChanged)
    assert change.usage_count == 3


def rated(memory_id: str, revision: int = 0, upvotes: int = 1) -> MemoryRated:
    return MemoryRated(
        event_id=f"rated-{memory_id}-{revision}",
        agent_id="H001",
        occurred_at=T0,
        caused_by=f"f-{memory_id}-{revision}",
        config_version="cfg",
        memory_id=memory_id,
        target_event_id=memory_id,
        signal=1.0,
        level=0,
        upvotes=upvotes,
        downvotes=0,
        revision=revision,
    )


def test_ratings_keep_the_latest_1024_memories_rated_and_drop_the_oldest() -> None:
    """Every memory an agent ever rated would grow its state without end: the state keeps the
    counts of the latest 1,024 memories rated. Rated again, a memory is the latest rated, so
    the next new one drops the memory rated longest ago, not the one recorded first."""
    assert MAX_RATED_MEMORIES == 1024
    state = LearnedState()
    for i in range(1025):
        state = fold_learned(state, rated(f"m{i}"))
    assert len(state.ratings) == 1024
    assert list(state.ratings) == [f"m{i}" for i in range(1, 1025)]

    state = fold_learned(state, rated("m1", revision=1, upvotes=2))
    state = fold_learned(state, rated("m1025"))
    assert len(state.ratings) == 1024
    assert "m2" not in state.ratings
    assert state.ratings["m1"] == Rating(upvotes=2, downvotes=0, revision=1)
    assert list(state.ratings)[-2:] == ["m1", "m1025"]
