"""What agents learned, projected into Redis and read back: procedures, facts, plans, and
their erasure with the agent. The events are the processors' own
(:func:`processors.learning.learn`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import redis.asyncio as aioredis

from processors.config import load_processing_config
from processors.embedding import HashingEmbedder
from processors.learning import learn
from processors.lifecycle import Deriving
from processors.recording import AgentMemoryState
from processors.summarising import ExtractiveSummariser
from projections.learned.reads import FACTS, PROCEDURES, LearnedMemory
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import AgentEvent, Decision, FactStatement, Feedback, Observation
from schemas.memory_events import AgentForgotten, DerivedEvent, SourcePosition

pytestmark = pytest.mark.integration

EMBEDDER = HashingEmbedder()
CONFIG = load_processing_config()
CTX = Deriving(CONFIG, EMBEDDER, ExtractiveSummariser(), "cfg")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Agent:
    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        self.state = AgentMemoryState()
        self.n = 0

    def events(self, *made: AgentEvent) -> list[DerivedEvent]:
        out: list[DerivedEvent] = []
        for event in made:
            self.n += 1
            position = SourcePosition(topic="agent.x", partition=0, offset=self.n)
            learned, self.state = learn(event, self.state, CTX, position)
            out.extend(learned)
        return out

    def when(self, i: int) -> dict[str, object]:
        return {
            "agent_id": self.agent_id,
            "agent_type": "household",
            "event_id": f"{self.agent_id}-{i}",
            "occurred_at": T0 + timedelta(days=i),
        }


def history(agent: Agent) -> list[DerivedEvent]:
    w = agent.when
    elevate = Decision.model_validate(
        {
            **w(1),
            "skill": "elevate",
            "content": "Elevate the house above the flood line",
            "prompt": "Protect the house from the spring flood",
            "actions": [{"tool": "contractor", "input": "raise 2 m", "observation": "booked"}],
        }
    )
    insure = Decision.model_validate(
        {**w(2), "skill": "insure", "content": "Buy flood insurance for the house"}
    )
    return agent.events(
        elevate,
        insure,
        Feedback.model_validate({**w(3), "target_event_id": elevate.event_id, "signal": 1.0}),
        Feedback.model_validate({**w(4), "target_event_id": elevate.event_id, "signal": 1.0}),
        Feedback.model_validate({**w(5), "target_event_id": insure.event_id, "signal": -1.0}),
        Observation.model_validate(
            {
                **w(6),
                "content": "The house stands 1 m above the street",
                "fact": FactStatement(subject="house", attribute="elevation", value="1 m"),
            }
        ),
        Observation.model_validate(
            {
                **w(7),
                "content": "The house now stands 3 m above the street",
                "fact": FactStatement(subject="house", attribute="elevation", value="3 m"),
            }
        ),
    )


async def test_learned_items_are_read_back_ranked(working_store: RedisWorkingMemory) -> None:
    agent = Agent("L1")
    events = history(agent)
    await working_store.apply(events)
    await working_store.apply(events[:3])  # an older prefix again takes nothing back
    memory = LearnedMemory(lambda: working_store, EMBEDDER)

    everything = await memory.procedures("L1", min_success_rate=0.0)
    rates = {p.name: (round(p.success_rate, 4), p.usage_count) for p in everything.procedures}
    assert rates == {"elevate": (0.595, 2), "insure": (0.45, 1)}
    assert [p.name for p in everything.procedures] == ["elevate", "insure"]

    relevant = await memory.procedures("L1", "elevate the house", min_success_rate=0.5)
    (elevate,) = relevant.procedures
    assert elevate.description == "Elevate the house above the flood line"
    assert elevate.score is not None
    assert elevate.score >= 0.4
    # Seed 002: an upvote attaches the decision's prompt, the request it answered.
    assert elevate.attached_texts == ("Protect the house from the spring flood",) * 2
    assert (await memory.procedures("L1", "plant tomatoes", min_success_rate=0.0)).procedures == ()

    current = await memory.facts("L1", "how high is the house")
    assert [(f.value, f.current) for f in current.facts] == [("3 m", True)]
    full = await memory.facts("L1", history=True)
    assert [(f.value, f.current) for f in full.facts] == [("3 m", True), ("1 m", False)]
    assert full.facts[1].valid_to == full.facts[0].valid_from

    hit = await memory.lookup_plan("L1", "Protect the house from the next spring flood")
    assert hit.hit
    assert hit.plan is not None
    assert hit.plan.actions[0].tool == "contractor"
    assert hit.similarity is not None
    assert hit.similarity >= 0.8
    assert hit.score == pytest.approx(1.0)
    miss = await memory.lookup_plan("L1", "Protect the barn from the spring flood")
    assert not miss.hit
    assert miss.similarity is not None
    assert miss.similarity < 0.8


async def test_a_procedure_named_in_the_context_is_relevant(
    working_store: RedisWorkingMemory,
) -> None:
    """Seed 000's ``get_procedures``: a word of the name in the context makes a procedure
    relevant, however far the context's embedding is from its texts."""
    agent = Agent("L4")
    await working_store.apply(history(agent))
    memory = LearnedMemory(lambda: working_store, EMBEDDER)
    context = "should we insure?"
    (insure,) = (await memory.procedures("L4", context, min_success_rate=0.0)).procedures
    assert insure.name == "insure"
    assert insure.name_words == ("insure",)
    assert insure.score is not None
    assert insure.score < 0.4
    (elevate,) = (await memory.procedures("L4", "Elevate!", min_success_rate=0.0)).procedures
    assert elevate.name_words == ("elevate",)


async def test_an_evicted_plan_misses_and_a_replay_cannot_bring_it_back(
    working_store: RedisWorkingMemory,
) -> None:
    agent = Agent("L2")
    events = history(agent)
    decision = "L2-1"
    downvotes = agent.events(
        *(
            Feedback.model_validate(
                {**agent.when(8 + i), "target_event_id": decision, "signal": -1}
            )
            for i in range(3)
        )
    )
    await working_store.apply(events + downvotes)
    await working_store.apply(events)
    memory = LearnedMemory(lambda: working_store, EMBEDDER)
    lookup = await memory.lookup_plan("L2", "Protect the house from the spring flood")
    assert not lookup.hit
    assert lookup.similarity is None


async def test_a_fact_is_as_certain_as_it_was_stated_and_restating_it_revises_that(
    working_store: RedisWorkingMemory,
) -> None:
    """Seed 000: ``store_fact(..., confidence)``, and ``update_fact(new_confidence)`` as a
    restatement that supersedes the fact."""
    agent = Agent("L4")
    w = agent.when

    def premium(i: int, confidence: float | None) -> Observation:
        sure = {} if confidence is None else {"confidence": confidence}
        return Observation.model_validate(
            {
                **w(i),
                "content": "The flood insurance premium is $1,200 a year",
                "fact": {"subject": "insurance", "attribute": "premium", "value": "$1,200"} | sure,
            }
        )

    memory = LearnedMemory(lambda: working_store, EMBEDDER)
    await working_store.apply(agent.events(premium(1, None)))
    (fact,) = (await memory.facts("L4")).facts
    assert fact.confidence == 1.0
    await working_store.apply(agent.events(premium(2, 0.6)))
    (fact,) = (await memory.facts("L4")).facts
    assert fact.confidence == 0.6
    assert (await memory.facts("L4", min_confidence=0.7)).facts == ()
    await working_store.apply(agent.events(premium(3, 0.9)))
    full = await memory.facts("L4", history=True)
    assert [(f.confidence, f.current) for f in full.facts] == [
        (0.9, True),
        (0.6, False),
        (1.0, False),
    ]
    sure = await memory.facts("L4", history=True, min_confidence=0.7)
    assert [f.confidence for f in sure.facts] == [0.9, 1.0]


async def test_forgetting_the_agent_erases_what_it_learned(
    working_store: RedisWorkingMemory,
) -> None:
    agent = Agent("L3")
    await working_store.apply(history(agent))
    memory = LearnedMemory(lambda: working_store, EMBEDDER)
    assert (await memory.procedures("L3", min_success_rate=0.0)).procedures
    await working_store.apply(
        [AgentForgotten(agent_id="L3", occurred_at=T0, requested_at=T0, caused_by="forget-1")]
    )
    assert await working_store.learned_fields("L3") == {}
    assert (await memory.facts("L3", history=True)).facts == ()


async def test_a_tool_is_selected_from_redis_as_seed_002_selects_it(
    working_store: RedisWorkingMemory,
) -> None:
    """Seed 002's example over the real store: the description matches one prompt (0.472) and
    misses the other (0.280) until an upvote attaches it; the failing ``insure`` (0.45) is
    selectable, and excluding it falls to the next tool, then to a miss."""
    agent = Agent("L5")
    w = agent.when
    health = "Set player's health to 75"
    attribute = Decision.model_validate(
        {
            **w(10),
            "skill": "SetPlayerAttribute",
            "content": "Set an attribute of the player, such as speed or strength, to a value",
        }
    )
    events = history(agent) + agent.events(attribute)
    await working_store.apply(events)
    memory = LearnedMemory(lambda: working_store, EMBEDDER)

    speed = await memory.select_tool("L5", "Set player speed to 20")
    assert speed.selected is not None
    assert speed.selected.name == "SetPlayerAttribute"
    assert speed.similarity == pytest.approx(0.4721, abs=1e-4)
    missed = await memory.select_tool("L5", health)
    assert missed.reason == "below_threshold"
    assert missed.similarity == pytest.approx(0.2801, abs=1e-4)

    used = Decision.model_validate({**w(20), "skill": "SetPlayerAttribute", "content": health})
    upvote = Feedback.model_validate({**w(21), "target_event_id": used.event_id, "signal": 1.0})
    await working_store.apply(agent.events(used, upvote))
    learned = await memory.select_tool("L5", health)
    assert learned.selected is not None
    assert learned.selected.name == "SetPlayerAttribute"
    assert learned.similarity == pytest.approx(1.0, abs=1e-6)

    insure = await memory.select_tool("L5", "Buy flood insurance for the house")
    assert insure.selected is not None
    assert insure.selected.name == "insure"
    assert insure.selected.success_rate == pytest.approx(0.45)
    retry = await memory.select_tool("L5", "Buy flood insurance for the house", exclude=["insure"])
    assert retry.selected is not None
    assert retry.selected.name == "elevate"  # the next tool, 0.459
    last = await memory.select_tool("L5", "Buy flood insurance", exclude=["insure", "elevate"])
    assert last.reason == "below_threshold"


async def test_a_read_takes_the_fields_of_its_kind_alone_from_a_long_fact_history(
    working_store: RedisWorkingMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool selection read the agent's whole hash (HGETALL): every superseded fact, with its
    embedding, travelled and was decoded for each prompt. The glob is matched in Redis, over
    as many HSCAN calls as the hash takes (here several: a count of 50 over 600 fields)."""
    monkeypatch.setattr("projections.working.redis_store.LEARNED_SCAN_COUNT", 50)
    agent = Agent("L5")
    await working_store.apply(history(agent))
    moves = [
        Observation.model_validate(
            {
                **agent.when(100 + i),
                "content": f"The family now lives at number {i}",
                "fact": {"subject": "family", "attribute": "address", "value": f"number {i}"},
            }
        )
        for i in range(300)
    ]
    await working_store.apply(agent.events(*moves))

    procedures = await working_store.learned_fields("L5", PROCEDURES)
    facts = await working_store.learned_fields("L5", FACTS)
    everything = await working_store.learned_fields("L5")
    assert procedures
    assert all(field.startswith(b"#l:p:") for field in procedures)
    assert all(field.startswith(b"#l:f:") for field in facts)
    assert len(facts) >= 300 + 299  # each address, and the end of each but the last
    assert {k: v for k, v in everything.items() if k.startswith(b"#l:f:")} == facts
    memory = LearnedMemory(lambda: working_store, EMBEDDER)
    current = [f for f in (await memory.facts("L5")).facts if f.attribute == "address"]
    assert [f.value for f in current] == ["number 299"]
    assert (await memory.procedures("L5", min_success_rate=0.0)).procedures
    with pytest.raises(ValueError, match="names no learned field"):
        await working_store.learned_fields("L5", b"*")


async def test_facts_live_apart_and_a_store_written_before_that_reads_the_same(
    working_store: RedisWorkingMemory, redis_server_url: str
) -> None:
    """Facts have a hash of their own, so a read of procedures or plans never touches them. A
    store written when they lived in the memories hash answers as before, and a restatement
    applied to it ends the old fact where it lies."""
    agent = Agent("L6")
    await working_store.apply(history(agent))
    memory = LearnedMemory(lambda: working_store, EMBEDDER)
    before = await memory.facts("L6", history=True)
    assert before.facts
    ns = working_store.namespace
    memories_key, facts_key = f"{ns}:wm:mem:L6", f"{ns}:wm:facts:L6"
    raw = aioredis.from_url(redis_server_url)
    try:
        in_memories = await raw.hkeys(memories_key)
        in_facts = await raw.hkeys(facts_key)
        assert not [k for k in in_memories if k.startswith((b"#l:f:", b"#v:f:"))]
        assert in_facts
        assert all(k.startswith((b"#l:f:", b"#v:f:")) for k in in_facts)
        # As an older store holds them: in the memories hash, no facts hash.
        await raw.hset(memories_key, mapping=await raw.hgetall(facts_key))
        await raw.delete(facts_key)
    finally:
        await raw.aclose()
    assert await memory.facts("L6", history=True) == before
    [stated] = [f for f in before.facts if f.current]
    restated = Observation.model_validate(
        {
            **agent.when(50),
            "content": "The premium went up",
            "fact": {"subject": stated.subject, "attribute": stated.attribute, "value": "more"},
        }
    )
    await working_store.apply(agent.events(restated))
    after = {f.value: f.current for f in (await memory.facts("L6", history=True)).facts}
    assert after == {**{f.value: False for f in before.facts}, "more": True}
