"""The timeline of an agent's memories, built from events as the log returns them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from projections.history import (
    ENTRY_KINDS,
    LoggedEvent,
    LogPosition,
    PositionedEvent,
    build_timeline,
)
from schemas.learned_events import FactAccessed
from schemas.memory_events import (
    FACTS_READ_MODE,
    AgentForgotten,
    ConsolidationCompleted,
    ConsolidationOutcome,
    ImportanceInputs,
    MemoryForgotten,
    MemoryPromoted,
    MemoryRecorded,
    MemoryRetrieved,
    MemorySummarised,
    MusBreakdown,
    PromotionDecision,
    RetrievedItem,
    encode_vector,
)

AGENT = "H001"
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
TOPIC = {"items": "memory.items", "lifecycle": "memory.lifecycle", "access": "memory.access"}


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def memory_fields(memory_id: str, content: str, **extra: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "agent_id": AGENT,
        "memory_id": memory_id,
        "agent_type": "household",
        "source_event_id": f"source-{memory_id}",
        "source_event_type": "observation",
        "seq": 0,
        "content": content,
        "importance": 0.5,
        "destination": "working",
        "embedding": encode_vector([0.0, 1.0]),
        "embedder": "hashing-64",
        "config_version": "cfg1",
    }
    return values | extra


def recorded(memory_id: str, content: str, when: datetime, **extra: Any) -> MemoryRecorded:
    return MemoryRecorded(
        occurred_at=when,
        scoring=ImportanceInputs(method="explicit"),
        **memory_fields(memory_id, content, **extra),
    )


def forgotten(memory_id: str, when: datetime, **extra: Any) -> MemoryForgotten:
    values: dict[str, Any] = {
        "agent_id": AGENT,
        "occurred_at": when,
        "memory_id": memory_id,
        "destination": "working",
        "reason": "capacity",
        "caused_by": "cause",
        "config_version": "cfg1",
    }
    return MemoryForgotten(**(values | extra))


def retrieved(ids: list[str], when: datetime, **extra: Any) -> MemoryRetrieved:
    values: dict[str, Any] = {
        "agent_id": AGENT,
        "occurred_at": when,
        "mode": "two_phase",
        "parameters": {"top_k": 5},
        "results": tuple(
            RetrievedItem(memory_id=m, rank=i + 1, score=1.0 - i / 10, store="working")
            for i, m in enumerate(ids)
        ),
        "took_ms": 1.25,
    }
    return MemoryRetrieved(**(values | extra))


def on(topic: str, offset: int, event: LoggedEvent, partition: int = 1) -> PositionedEvent:
    return PositionedEvent(
        event, LogPosition(topic=TOPIC[topic], partition=partition, offset=offset)
    )


def test_entries_follow_time_then_topic_then_offset() -> None:
    flood = recorded("m-flood", "Year 3: A major flood", at(0))
    # The forgetting the flood caused carries the flood's time and is on lifecycle: after it.
    pushed_out = forgotten("m-old", at(0), caused_by=flood.event_id)
    # Retrieved at the same instant: access comes after items and lifecycle.
    asked = retrieved(["m-flood"], at(0))
    later = recorded("m-later", "Year 4: I waited", at(5))
    early_forget = forgotten("m-older", at(-5))
    # Two lifecycle records at one instant keep their log order.
    first, second = forgotten("m-a", at(10)), forgotten("m-b", at(10))
    events = [
        on("access", 0, asked),
        on("lifecycle", 9, second),
        on("items", 7, later),
        on("lifecycle", 3, pushed_out),
        on("lifecycle", 8, first),
        on("items", 2, flood),
        on("lifecycle", 1, early_forget),
    ]
    timeline = build_timeline(AGENT, events)
    assert [e.event_id for e in timeline.entries] == [
        early_forget.event_id,
        flood.event_id,
        pushed_out.event_id,
        asked.event_id,
        later.event_id,
        first.event_id,
        second.event_id,
    ]
    # Reading the log again, in any interleaving, gives the same timeline.
    assert build_timeline(AGENT, reversed(events)) == timeline


def test_every_kind_is_rendered_with_what_matters() -> None:
    promoted = MemoryPromoted(
        occurred_at=at(1),
        promoted_from="m-working-flood",
        decision=PromotionDecision(rule="burn", consolidated_year=3, draw=0.42),
        **memory_fields("m-episodic-copy", "Year 3: A major flood", destination="episodic"),
    )
    summary = MemorySummarised(
        occurred_at=at(2),
        summarises=("m-1", "m-2", "m-3"),
        covers_upto_seq=3,
        summariser="extractive-v1",
        trigger="year",
        **memory_fields("m-summary", "Floods in years 1 and 3;\n  insurance bought", level=1),
    )
    utility = forgotten(
        "m-gardening",
        at(3),
        destination="episodic",
        reason="utility",
        level=2,
        mus=MusBreakdown(
            score=0.1234,
            retrieval_frequency=0.0,
            relevance=0.2,
            recency=0.3,
            threshold=0.25,
            retrievals=2,
            age=40,
            age_unit="steps",
        ),
    )
    consolidation = ConsolidationCompleted(
        agent_id=AGENT,
        occurred_at=at(4),
        year=3,
        consolidated_year=3,
        considered=(
            ConsolidationOutcome(memory_id="a", importance=0.9, outcome="promoted"),
            ConsolidationOutcome(memory_id="b", importance=0.65, outcome="burned", draw=0.9),
            ConsolidationOutcome(memory_id="c", importance=0.3, outcome="below_gate"),
        ),
        promoted=("m-episodic-copy",),
        working_after=7,
        episodic_after=12,
        caused_by="tick",
        config_version="cfg1",
    )
    many = [f"mem{i:05d}-rest-of-id" for i in range(7)]
    events = [
        on("items", 0, recorded("m-flood", "Year 3: A major flood", at(0), kind="flood.major")),
        on("lifecycle", 0, promoted),
        on("lifecycle", 1, summary),
        on("lifecycle", 2, forgotten("m-wait", at(3))),
        on("lifecycle", 3, utility),
        on("lifecycle", 4, consolidation),
        on("access", 0, retrieved(many, at(5), mode="weighted", step=12)),
        on("access", 1, retrieved([], at(6))),
    ]
    timeline = build_timeline(AGENT, events)
    entries = timeline.entries
    assert [e.kind for e in entries] == [
        "recorded",
        "promoted",
        "summarised",
        "forgotten",
        "forgotten",
        "consolidated",
        "retrieved",
        "retrieved",
    ]
    texts = [e.text for e in entries]
    assert texts[0] == 'into working, importance 0.50 (flood.major): "Year 3: A major flood"'
    assert texts[1] == (
        "copied to episodic from m-workin (burn rule, year 3), importance 0.50: "
        '"Year 3: A major flood"'
    )
    assert entries[1].related_ids == ("m-working-flood",)
    assert texts[2] == (
        'L1 summary of 3 memories (year) into working: "Floods in years 1 and 3; insurance bought"'
    )
    assert entries[2].related_ids == ("m-1", "m-2", "m-3")
    assert texts[3] == "left working (capacity)"
    assert texts[4] == "left episodic L2 (utility: MUS 0.123, threshold 0.250, 2 retrievals)"
    assert texts[5] == (
        "year 3 consolidated: 3 considered, 1 promoted, 1 burned; after: working 7, episodic 12"
    )
    assert entries[5].memory_id is None
    assert entries[5].related_ids == ("m-episodic-copy",)
    assert texts[6] == (
        "weighted retrieval, 7 returned: mem00000, mem00001, mem00002, mem00003, mem00004 "
        "+2 more (1.2 ms)"
    )
    assert entries[6].related_ids == tuple(many)
    assert entries[6].step == 12
    assert texts[7] == "two_phase retrieval, nothing returned (1.2 ms)"
    assert timeline.counts == {
        "recorded": 1,
        "promoted": 1,
        "summarised": 1,
        "forgotten": 2,
        "consolidated": 1,
        "agent_forgotten": 0,
        "retrieved": 2,
        "procedure": 0,
        "plan": 0,
        "fact": 0,
        "rated": 0,
        "fact_accessed": 0,
    }
    assert entries[4].position == LogPosition(topic="memory.lifecycle", partition=1, offset=3)


def test_a_forgotten_agent_has_an_entry_without_content() -> None:
    """The erasure is on the timeline, after what it erased, and names no memory or content."""
    flood = recorded("m-flood", "Year 3: A major flood", at(0))
    erased = AgentForgotten(
        agent_id=AGENT,
        occurred_at=at(1),
        key_ids=("k1", "k2"),
        requested_at=at(1),
        caused_by="forget-command",
    )
    timeline = build_timeline(AGENT, [on("lifecycle", 4, erased), on("items", 2, flood)])
    assert [e.kind for e in timeline.entries] == ["recorded", "agent_forgotten"]
    entry = timeline.entries[1]
    assert (entry.memory_id, entry.related_ids) == (None, ())
    assert (
        entry.text == "agent forgotten: every memory left the projections, 2 sealing keys deleted"
    )
    assert entry.event_id == erased.event_id
    assert timeline.counts["agent_forgotten"] == 1


def test_long_content_is_previewed_on_one_line() -> None:
    content = "Year 5: " + "water " * 40
    (entry,) = build_timeline(AGENT, [on("items", 0, recorded("m", content, at(0)))]).entries
    quoted = entry.text.split(": ", 1)[1]
    assert quoted.startswith('"Year 5: water water')
    assert quoted.endswith('…"')
    assert len(quoted) == 60 + 2


def test_retrieval_results_are_listed_by_rank() -> None:
    event = retrieved([], at(0)).model_copy(
        update={
            "results": (
                RetrievedItem(memory_id="second", rank=2, score=0.5, store="episodic"),
                RetrievedItem(memory_id="first", rank=1, score=0.9, store="working"),
            )
        }
    )
    (entry,) = build_timeline(AGENT, [on("access", 0, event)]).entries
    assert entry.related_ids == ("first", "second")


def test_a_facts_search_and_the_counts_it_left_are_told_as_such() -> None:
    """A facts read with a query is on memory.access like a retrieval, told as a search of
    facts with its query; each count it left on a fact is an entry of its own."""
    search = retrieved([], at(0)).model_copy(
        update={
            "mode": FACTS_READ_MODE,
            "parameters": {"query": "flood  insurance\npremium", "top_k": 5},
            "results": (
                RetrievedItem(memory_id="fact-premium-id", rank=1, score=0.8, store="facts"),
                RetrievedItem(memory_id="fact-levee-id", rank=2, score=0.4, store="facts"),
            ),
        }
    )
    counted = FactAccessed(
        agent_id=AGENT,
        occurred_at=at(0),
        caused_by=search.event_id,
        config_version="cfg1",
        fact_id="fact-premium-id",
        subject="insurance",
        attribute="premium",
        access_count=3,
        revision=2,
        rank=1,
        score=0.8,
    )
    first = counted.model_copy(update={"access_count": 1, "revision": 0, "event_id": "e-1"})
    events = [on("access", 4, search), on("lifecycle", 9, counted), on("lifecycle", 2, first)]
    timeline = build_timeline(AGENT, events)
    # The counts share the search's time, and follow it.
    assert [e.kind for e in timeline.entries] == ["retrieved", "fact_accessed", "fact_accessed"]
    found, counted_once, told = timeline.entries
    assert found.text == (
        'facts search for "flood insurance premium", 2 facts returned: fact-pre, fact-lev (1.2 ms)'
    )
    assert found.related_ids == ("fact-premium-id", "fact-levee-id")
    assert counted_once.text == (
        "fact insurance premium returned by a search (rank 1): returned once in all"
    )
    assert told.text == (
        "fact insurance premium returned by a search (rank 1): returned 3 times in all"
    )
    assert told.related_ids == ("fact-premium-id", search.event_id)
    assert timeline.counts["fact_accessed"] == 2
    assert timeline.counts["retrieved"] == 1
    nothing = search.model_copy(update={"results": ()})
    (empty,) = build_timeline(AGENT, [on("access", 0, nothing)]).entries
    assert empty.text == 'facts search for "flood insurance premium", no fact returned (1.2 ms)'


def test_other_agents_are_left_out() -> None:
    neighbour = recorded("m-n", "Their flood", at(0)).model_copy(update={"agent_id": "H002"})
    mine = recorded("m-mine", "My flood", at(1))
    timeline = build_timeline(AGENT, [on("items", 0, neighbour), on("items", 1, mine)])
    assert [e.memory_id for e in timeline.entries] == ["m-mine"]
    assert timeline.total == 1


def test_limit_keeps_the_latest_and_counts_everything() -> None:
    events = [on("items", i, recorded(f"m{i}", f"event {i}", at(i))) for i in range(5)]
    events.append(on("access", 0, retrieved(["m4"], at(10))))
    timeline = build_timeline(AGENT, events, limit=2)
    assert [e.kind for e in timeline.entries] == ["recorded", "retrieved"]
    assert timeline.entries[0].memory_id == "m4"
    assert (timeline.total, timeline.truncated) == (6, True)
    assert timeline.counts["recorded"] == 5
    whole = build_timeline(AGENT, events, limit=6)
    assert (len(whole.entries), whole.truncated) == (6, False)


def test_an_agent_without_records_has_an_empty_history() -> None:
    timeline = build_timeline(AGENT, [])
    assert timeline.entries == ()
    assert timeline.total == 0
    assert timeline.counts == dict.fromkeys(ENTRY_KINDS, 0)
    assert not timeline.truncated


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        build_timeline(AGENT, [], limit=0)


def test_the_history_round_trips_through_json() -> None:
    timeline = build_timeline(
        AGENT,
        [on("items", 0, recorded("m", "x", at(0))), on("access", 0, retrieved(["m"], at(1)))],
    )
    assert type(timeline).model_validate_json(timeline.model_dump_json()) == timeline
