"""Seed 000's ``access_count``: a search of the agent's facts (a facts read with a query on
``memory.access``) counts one more on every fact it returned that the agent still holds,
each count a learned event that the fold (takeover, replay) applies to the same state."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from processors.batch import RawRecord, process_batch
from processors.fact_access import on_facts_read
from processors.learned_state import MAX_FACT_KEYS, LearnedState, fact_key, fold_learned
from processors.learning import learn
from processors.recording import AgentMemoryState
from processors.state_fold import FoldedState
from schemas.agent_events import FactStatement, Observation
from schemas.codec import decode_retrieval, encode_event
from schemas.learned_events import FactAccessed, FactStated
from schemas.memory_events import (
    FACTS_READ_MODE,
    MemoryRetrieved,
    RetrievedItem,
    RetrievedStore,
    SourcePosition,
    encode_vector,
)
from tests.agent_streams import CTX, FAILED_AT, TOPICS

AGENT = "H001"
T0 = datetime(2026, 3, 1, tzinfo=UTC)
AT = SourcePosition(topic=TOPICS.access, partition=0, offset=41)


def stated(state: AgentMemoryState, n: int, attribute: str, value: str) -> AgentMemoryState:
    observation = Observation(
        agent_id=AGENT,
        event_id=f"obs-{n}",
        occurred_at=T0 + timedelta(minutes=n),
        content=f"the house {attribute} is {value}",
        fact=FactStatement(subject="house", attribute=attribute, value=value),
    )
    _, state = learn(observation, state, CTX)
    return state


def current(state: AgentMemoryState, attribute: str) -> str:
    return state.learned.facts[fact_key("house", attribute)]


def search(
    *fact_ids: str, event_id: str = "search-1", store: RetrievedStore = "facts"
) -> MemoryRetrieved:
    return MemoryRetrieved(
        agent_id=AGENT,
        event_id=event_id,
        occurred_at=T0 + timedelta(hours=1),
        mode=FACTS_READ_MODE,
        parameters={"query": "the house", "top_k": 5},
        results=tuple(
            RetrievedItem(memory_id=f, rank=rank, score=1.0 - rank / 10, store=store)
            for rank, f in enumerate(fact_ids, start=1)
        ),
        took_ms=0.4,
    )


def house() -> AgentMemoryState:
    """Two current facts of the house, elevation and roof."""
    return stated(stated(AgentMemoryState(), 1, "elevation", "1 m"), 2, "roof", "tiles")


def test_a_search_counts_once_on_each_current_fact_it_returned() -> None:
    state = house()
    elevation, roof = current(state, "elevation"), current(state, "roof")

    first, state = on_facts_read(search(roof, elevation, roof), state, "cfg", AT)
    second, state = on_facts_read(search(elevation, event_id="search-2"), state, "cfg", AT)

    assert [(e.fact_id, e.access_count, e.revision, e.rank) for e in first] == [
        (roof, 1, 0, 1),
        (elevation, 1, 0, 2),
    ], "best ranked first, a fact returned twice counted once"
    assert [(e.fact_id, e.access_count, e.revision) for e in second] == [(elevation, 2, 1)]
    assert state.learned.access_counts == {roof: 1, elevation: 2}
    told = first[0]
    assert (told.subject, told.attribute, told.caused_by) == ("house", "roof", "search-1")
    assert (told.source_position, told.occurred_at, told.score) == (
        AT,
        T0 + timedelta(hours=1),
        0.9,
    )
    again, _ = on_facts_read(search(roof, elevation, roof), house(), "cfg", AT)
    assert [e.event_id for e in again] == [e.event_id for e in first], "a redelivery logs the same"


def test_what_the_agent_does_not_hold_counts_nothing() -> None:
    """A superseded fact (read with history), an id never stated, a fact beyond what the
    agent holds: nothing, and the state is the one given."""
    state = house()
    superseded = current(state, "elevation")
    state = stated(state, 3, "elevation", "3 m")
    nothing = [
        search(superseded),
        search("no-such-fact"),
        search(current(state, "roof"), store="episodic"),
        search(),
    ]
    for record in nothing:
        counted, after = on_facts_read(record, state, "cfg", AT)
        assert (counted, after) == ([], state)
        assert after is state
    no_facts = AgentMemoryState()
    assert on_facts_read(search(superseded), no_facts, "cfg", AT) == ([], no_facts)


def accessed(fact_id: str, attribute: str, count: int, subject: str = "house") -> FactAccessed:
    return FactAccessed(
        agent_id=AGENT,
        caused_by=f"search-{count}",
        config_version="cfg",
        fact_id=fact_id,
        subject=subject,
        attribute=attribute,
        access_count=count,
        revision=count - 1,
        rank=1,
    )


def test_the_fold_keeps_the_highest_count_of_a_fact_still_held() -> None:
    learned = house().learned
    roof = learned.facts[fact_key("house", "roof")]
    three = fold_learned(learned, accessed(roof, "roof", 3))
    assert three.access_counts == {roof: 3}
    assert fold_learned(three, accessed(roof, "roof", 3)) is three, "applied again"
    assert fold_learned(three, accessed(roof, "roof", 2)) is three, "an older one after it"
    assert fold_learned(learned, accessed("other", "roof", 5)) is learned, "not the current one"


def fact(n: int, subject: str, attribute: str) -> FactStated:
    return FactStated(
        agent_id=AGENT,
        event_id=f"stated-{n}",
        caused_by=f"obs-{n}",
        config_version="cfg",
        fact_id=f"fact-{n}",
        subject=subject,
        attribute=attribute,
        value=str(n),
        valid_from=T0,
        source_event_ids=(f"obs-{n}",),
        embedding=encode_vector([1.0, 0.0]),
    )


def test_a_fact_that_leaves_the_state_takes_its_count_along() -> None:
    """Superseded, or past the bound on the pairs the state keeps: the count is no longer
    carried (the projection keeps the last one), so the state stays bounded."""
    learned = LearnedState()
    for n in range(MAX_FACT_KEYS):
        learned = fold_learned(learned, fact(n, f"thing {n}", "colour"))
    oldest, second, latest = "fact-0", "fact-1", f"fact-{MAX_FACT_KEYS - 1}"
    for fact_id, n in ((oldest, 0), (second, 1), (latest, MAX_FACT_KEYS - 1)):
        learned = fold_learned(learned, accessed(fact_id, "colour", 2, f"thing {n}"))
    assert learned.access_counts == {oldest: 2, second: 2, latest: 2}

    last = f"thing {MAX_FACT_KEYS - 1}"
    restated = fold_learned(learned, fact(MAX_FACT_KEYS - 1, last, "colour"))
    assert restated.access_counts == learned.access_counts, "the same fact folded again"
    superseded = fold_learned(learned, fact(5000, last, "colour"))
    assert superseded.access_counts == {oldest: 2, second: 2}
    evicted = fold_learned(superseded, fact(5001, "a new thing", "colour"))
    assert len(evicted.facts) == MAX_FACT_KEYS
    assert evicted.access_counts == {second: 2}


def raw(n: int, record: MemoryRetrieved | Observation) -> RawRecord:
    if isinstance(record, Observation):
        value = encode_event(record)
        return RawRecord(TOPICS.observations, 0, n, AGENT.encode(), value, "observation")
    return RawRecord(TOPICS.access, 0, n, AGENT.encode(), encode_event(record), None, "retrieval")


def test_a_batch_derives_the_counts_and_a_fold_of_its_log_holds_them() -> None:
    """Live (a batch) and takeover (the fold of what it logged, then the retrievals of
    memory.access) agree; the facts read itself is not counted a second time by the fold,
    nor a retrieval of memories as a facts read, even of an id that is a fact's."""
    statement = Observation(
        agent_id=AGENT,
        event_id="obs-1",
        occurred_at=T0,
        content="the house elevation is 1 m",
        fact=FactStatement(subject="house", attribute="elevation", value="1 m"),
    )
    live = process_batch(
        [raw(0, statement)], lambda _: AgentMemoryState(), ctx=CTX, failed_at=FAILED_AT
    )
    elevation = current(live.states[AGENT], "elevation")
    memories = search(elevation, event_id="r-1", store="episodic").model_copy(
        update={"mode": "two_phase"}
    )
    reads = [search(elevation), memories, search(elevation, event_id="search-2")]
    records = [raw(n, r) for n, r in enumerate(reads)]
    batch = process_batch(records, lambda a: live.states[a], ctx=CTX, failed_at=FAILED_AT)
    counted = [e for e in batch.derived if isinstance(e, FactAccessed)]
    assert [(e.access_count, e.source_position) for e in counted] == [
        (1, SourcePosition(topic=TOPICS.access, partition=0, offset=0)),
        (2, SourcePosition(topic=TOPICS.access, partition=0, offset=2)),
    ]
    assert batch.derived == counted
    assert batch.states[AGENT].learned.access_counts == {elevation: 2}

    folded = FoldedState(TOPICS.schedule).apply_all([*live.derived, *batch.derived])
    for record, read in zip(records, reads, strict=True):
        where = SourcePosition(topic=record.topic, partition=0, offset=record.offset)
        folded.apply_retrieval(read, where)
    assert folded.states == batch.states


def test_one_read_delivered_twice_derives_counts_of_ids_of_their_own() -> None:
    """The recorder's producer is not idempotent: a read it delivered twice counts twice, and
    each delivery's counts are events of their own, never two events under one id."""
    state = house()
    roof = current(state, "roof")
    twice = search(roof)
    first, state = on_facts_read(twice, state, "cfg", AT)
    later = SourcePosition(topic=AT.topic, partition=AT.partition, offset=AT.offset + 1)
    second, state = on_facts_read(twice, state, "cfg", later)
    assert [e.access_count for e in (*first, *second)] == [1, 2]
    assert first[0].event_id != second[0].event_id


def test_a_retrieval_of_memories_is_written_at_version_1() -> None:
    """Only a search of facts needs version 2 (a fact's store): a retrieval of memories stays
    at version 1, which a worker not yet upgraded reads, so the summaries keep their uses."""
    of_facts = search("f-1")
    of_memories = search("m-1", store="episodic").model_copy(update={"mode": "two_phase"})
    of_memories = MemoryRetrieved.model_validate(of_memories.model_dump(exclude={"schema_version"}))
    assert (of_facts.schema_version, of_memories.schema_version) == (2, 1)
    assert b'"schema_version":1' in encode_event(of_memories)
    decoded = decode_retrieval(encode_event(of_memories))
    assert decoded.model_dump(exclude={"schema_version"}) == of_memories.model_dump(
        exclude={"schema_version"}
    )
