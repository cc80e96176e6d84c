"""The lifecycle rules as pure functions: year-end consolidation (seeds 004 and 003), L1/L2
summaries and MUS pruning (seed 001), retrievals and determinism. No servers."""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import count
from typing import TypeVar

import pytest
from pydantic import BaseModel

from processors.config import (
    ConsolidationRules,
    LifecycleRules,
    ProcessingConfig,
    PruningRules,
    load_processing_config,
)
from processors.embedding import HashingEmbedder
from processors.learning import learn
from processors.lifecycle import (
    Deriving,
    burn_draw,
    decide_promotion,
    on_agent_event,
    on_retrieval,
    on_tick,
)
from processors.memory_feedback import rated_summaries
from processors.memory_utility import memory_utility
from processors.recording import AgentMemoryState
from processors.state_fold import fold
from processors.summarising import ExtractiveSummariser
from schemas.agent_events import Feedback, Observation
from schemas.learned_events import MemoryRated
from schemas.memory_events import (
    ConsolidationCompleted,
    DerivedEvent,
    MemoryForgotten,
    MemoryPromoted,
    MemoryRecorded,
    MemoryRetrieved,
    MemorySummarised,
    PromotionDecision,
    RetrievedItem,
    ScheduleTick,
    SourcePosition,
    memory_id_for,
)

T0 = datetime(2030, 1, 1, tzinfo=UTC)
AGENT = "H001"
EMBEDDER = HashingEmbedder()
SUMMARISER = ExtractiveSummariser()
E = TypeVar("E", bound=BaseModel)


def deriving(config: ProcessingConfig | None = None) -> Deriving:
    config = config or load_processing_config()
    return Deriving(config, EMBEDDER, SUMMARISER, config.version(EMBEDDER.id, SUMMARISER.id))


CTX = deriving()
WORKING_08 = deriving(load_processing_config(episodic_threshold=0.95))
"""Routing above 0.8, so a memory of 0.8 lands in working memory as in seed 004's add_working."""


def obs(
    event_id: str,
    importance: float,
    *,
    step: int | None = None,
    year: int | None = None,
    at: datetime = T0,
    agent: str = AGENT,
    content: str | None = None,
) -> Observation:
    return Observation(
        agent_id=agent,
        event_id=event_id,
        content=content or f"Observed {event_id} near the river.",
        importance=importance,
        step=step,
        year=year,
        occurred_at=at,
    )


def session(step: int, prefix: str, importances: Sequence[float]) -> list[Observation]:
    return [obs(f"{prefix}-{i}", imp, step=step) for i, imp in enumerate(importances)]


def feed(
    events: Sequence[Observation], ctx: Deriving = CTX, state: AgentMemoryState | None = None
) -> tuple[list[DerivedEvent], AgentMemoryState]:
    state = AgentMemoryState() if state is None else state
    derived: list[DerivedEvent] = []
    for event in events:
        position = SourcePosition(topic="agent.events", partition=0, offset=state.next_seq)
        out = on_agent_event(event, state, ctx, position)
        derived.extend(out.events)
        state = out.state
    return derived, state


def only(events: Sequence[BaseModel], kind: type[E]) -> list[E]:
    return [e for e in events if isinstance(e, kind)]


def kinds(events: Sequence[BaseModel]) -> list[type[BaseModel]]:
    return [type(e) for e in events]


def retrieval(
    *items: tuple[str, float], step: int | None = None, at: datetime = T0
) -> MemoryRetrieved:
    return MemoryRetrieved(
        agent_id=AGENT,
        occurred_at=at,
        step=step,
        mode="semantic",
        parameters={},
        results=tuple(
            RetrievedItem(memory_id=m, rank=i + 1, score=s, store="episodic")
            for i, (m, s) in enumerate(items)
        ),
        took_ms=1.0,
    )


def tick(event_id: str, at: datetime, interval: float = 60.0) -> ScheduleTick:
    return ScheduleTick(event_id=event_id, occurred_at=at, partition=0, interval_seconds=interval)


def gate_band_id(*, promoted: bool) -> str:
    """An event id whose seeded draw promotes (draw < 0.8) or burns a gate-band memory."""
    return next(f"gate-{i}" for i in count() if (burn_draw(f"gate-{i}") < 0.8) == promoted)


def one_l1() -> tuple[MemorySummarised, AgentMemoryState]:
    """Three working memories at step 1, closed by an event at step 2."""
    derived, state = feed([*session(1, "s1", [0.3, 0.5, 0.4]), obs("s2-0", 0.3, step=2)])
    (summary,) = only(derived, MemorySummarised)
    return summary, state


def test_retrievals_and_feedback_sum_the_same_relevance_in_any_order() -> None:
    """(0.5 + 0.1) - 0.5 and (0.5 - 0.5) + 0.1 differ as floats: a worker folding the log on
    takeover, which meets the feedback before the second retrieval, must hold the same state."""
    summary, state = one_l1()
    first = retrieval((summary.memory_id, 0.5), step=2)
    second = retrieval((summary.memory_id, 0.1), step=3)
    downvote = MemoryRated(
        event_id="r1",
        agent_id=AGENT,
        occurred_at=T0,
        caused_by="f1",
        config_version="cfg",
        memory_id=summary.memory_id,
        target_event_id=summary.memory_id,
        signal=-0.5,
        level=1,
        upvotes=0,
        downvotes=1,
        revision=0,
    )

    def rated(s: AgentMemoryState) -> AgentMemoryState:
        return replace(s, summaries=rated_summaries(s.summaries, downvote))

    live = rated(on_retrieval(second, on_retrieval(first, state)))
    folded = on_retrieval(second, rated(on_retrieval(first, state)))
    assert live == folded
    assert live.summaries[0].relevance_sum == 0.1


# --- consolidation (seed 004 sections 4.3, 5.1, 7.1; seed 003 gate and burn) ---------------


def test_seed_004_consolidation_promotes_one_of_two_and_working_memory_stays() -> None:
    events = [
        obs("low", 0.3, year=1, content="Low importance"),
        obs("high", 0.8, year=1, content="High importance"),
    ]
    _, state = feed(events, WORKING_08)
    assert state.working_ids == (memory_id_for(AGENT, "low"), memory_id_for(AGENT, "high"))
    out, state = feed([obs("next", 0.3, year=2)], WORKING_08, state)
    assert kinds(out) == [MemoryPromoted, ConsolidationCompleted, MemoryRecorded]
    promoted, done = out[0], out[1]
    assert isinstance(promoted, MemoryPromoted)
    assert isinstance(done, ConsolidationCompleted)
    assert promoted.promoted_from == memory_id_for(AGENT, "high") != promoted.memory_id
    assert (promoted.content, promoted.importance, promoted.seq) == ("High importance", 0.8, 1)
    assert promoted.destination == "episodic"
    assert promoted.decision == PromotionDecision(rule="threshold", consolidated_year=1)
    assert [(c.memory_id, c.outcome) for c in done.considered] == [
        (memory_id_for(AGENT, "low"), "below_gate"),
        (memory_id_for(AGENT, "high"), "promoted"),
    ]
    assert done.promoted == (promoted.memory_id,)
    assert (done.consolidated_year, done.working_after, done.episodic_after) == (1, 2, 1)
    assert done.caused_by == "next"
    # "Working memory remains intact": the original is still there, the copy is episodic.
    assert memory_id_for(AGENT, "high") in state.working_ids
    assert [e.memory_id for e in state.episodic] == [promoted.memory_id]


@pytest.mark.parametrize("promoted", [True, False])
def test_gate_band_memory_is_promoted_iff_its_draw_is_below_the_burn_probability(
    promoted: bool,
) -> None:
    event_id = gate_band_id(promoted=promoted)
    draw = burn_draw(event_id)
    out, state = feed([obs(event_id, 0.65, year=1), obs("next", 0.3, year=2)])
    (done,) = only(out, ConsolidationCompleted)
    assert [(c.outcome, c.draw) for c in done.considered] == [
        ("promoted" if promoted else "burned", draw)
    ]
    copies = only(out, MemoryPromoted)
    if promoted:
        assert [c.decision for c in copies] == [
            PromotionDecision(rule="burn", consolidated_year=1, draw=draw)
        ]
        assert done.promoted == (copies[0].memory_id,)
    else:
        assert copies == []
        assert done.promoted == ()
    assert memory_id_for(AGENT, event_id) in state.working_ids


def test_decide_promotion_bands() -> None:
    config = CTX.config
    assert decide_promotion(0.7, "x", config) == ("promoted", "threshold", None)
    assert decide_promotion(0.59, "x", config) == ("below_gate", None, None)
    outcome, _, draw = decide_promotion(0.6, "x", config)
    assert draw == burn_draw("x")
    assert outcome == ("promoted" if draw < 0.8 else "burned")


def test_burn_promotes_about_eighty_percent_of_gate_band_memories() -> None:
    decisions = [decide_promotion(0.65, f"evt-{i}", CTX.config) for i in range(2000)]
    draws = [d for _, _, d in decisions]
    assert all(d is not None and 0.0 <= d < 1.0 for d in draws)
    share = sum(outcome == "promoted" for outcome, _, _ in decisions) / 2000
    assert abs(share - 0.8) <= 0.03


def test_the_draw_is_deterministic() -> None:
    assert burn_draw("evt-42") == burn_draw("evt-42")
    assert burn_draw("evt-42") != burn_draw("evt-43")
    runs = [feed([obs("evt-42", 0.65, year=1), obs("n", 0.3, year=2)])[0] for _ in range(2)]
    assert runs[0] == runs[1]
    assert only(runs[0], ConsolidationCompleted)[0].considered[0].draw == burn_draw("evt-42")


def test_a_memory_is_considered_at_one_year_end_only() -> None:
    burned = gate_band_id(promoted=False)
    out, _ = feed([obs(burned, 0.65, year=1), obs("y2", 0.65, year=2), obs("y3", 0.3, year=3)])
    first, second = only(out, ConsolidationCompleted)
    assert [c.memory_id for c in first.considered] == [memory_id_for(AGENT, burned)]
    assert [c.memory_id for c in second.considered] == [memory_id_for(AGENT, "y2")]
    assert all(p.promoted_from != memory_id_for(AGENT, burned) for p in only(out, MemoryPromoted))


def test_promotion_respects_episodic_capacity() -> None:
    year_1 = [obs(f"big-{i}", 0.99, year=1) for i in range(49)] + [obs("w75", 0.75, year=1)]
    out, state = feed([*year_1, obs("w80", 0.8, year=2)], WORKING_08)
    (copy_75,) = only(out, MemoryPromoted)
    assert len(state.episodic) == 50  # 49 + the copy of w75: full, nothing evicted yet
    assert only(out, MemoryForgotten) == []
    out, state = feed([obs("y3", 0.3, year=3)], WORKING_08, state)
    (copy_80,) = only(out, MemoryPromoted)
    assert copy_80.promoted_from == memory_id_for(AGENT, "w80")
    # The least important episodic memory (0.75 < 0.8 < 0.99) leaves, because of the promotion.
    (gone,) = only(out, MemoryForgotten)
    assert (gone.memory_id, gone.caused_by) == (copy_75.memory_id, copy_80.event_id)
    assert (gone.reason, gone.destination) == ("capacity", "episodic")
    (done,) = only(out, ConsolidationCompleted)
    assert done.episodic_after == 50
    kept = {e.memory_id for e in state.episodic}
    assert len(kept) == 50
    assert copy_80.memory_id in kept
    assert copy_75.memory_id not in kept


def test_a_jump_of_several_years_consolidates_once() -> None:
    out, _ = feed([obs("a", 0.3, year=1), obs("b", 0.3, year=5), obs("c", 0.3, year=5)])
    (done,) = only(out, ConsolidationCompleted)
    assert done.consolidated_year == 1
    assert [c.memory_id for c in done.considered] == [memory_id_for(AGENT, "a")]


def test_nothing_happens_while_the_year_stays() -> None:
    _, state = feed([obs("a", 0.9, year=3)], WORKING_08)
    for name in ("b", "c", "d"):
        out, state = feed([obs(name, 0.8, year=3)], WORKING_08, state)
        assert kinds(out) == [MemoryRecorded]


def test_consolidation_disabled_promotes_nothing() -> None:
    off = LifecycleRules(consolidation=ConsolidationRules(enabled=False))
    ctx = deriving(load_processing_config(episodic_threshold=0.95, lifecycle=off))
    out, state = feed([obs("a", 0.3, year=1), obs("b", 0.8, year=1), obs("c", 0.3, year=2)], ctx)
    assert kinds(out) == [MemoryRecorded] * 3
    assert state.episodic == ()


# --- L1 session summaries and L2 chapter summaries (seed 001) ------------------------------


def test_l1_summarises_the_working_memories_of_the_ended_step() -> None:
    events = [*session(1, "s1", [0.3, 0.5, 0.4]), obs("epi", 0.9, step=1)]
    out, _ = feed([*events, obs("s2-0", 0.3, step=2)])
    (summary,) = only(out, MemorySummarised)
    assert summary.summarises == tuple(memory_id_for(AGENT, f"s1-{i}") for i in range(3))
    assert (summary.level, summary.trigger, summary.destination) == (1, "step", "episodic")
    assert summary.covers_upto_seq == 2
    assert (summary.importance, summary.step, summary.seq) == (0.5, 2, 4)  # made at step 2
    assert summary.source_event_id == "s2-0"
    assert out.index(summary) == len(out) - 2  # before the memory of the triggering event


def test_fewer_than_three_working_memories_make_no_l1() -> None:
    out, state = feed([*session(1, "s1", [0.3, 0.5]), obs("s2-0", 0.3, step=2)])
    assert only(out, MemorySummarised) == []
    assert state.pending_l1 == ()


def test_the_next_l1_covers_only_newer_memories() -> None:
    first, state = one_l1()
    out, _ = feed(
        [obs("s2-1", 0.2, step=2), obs("s2-2", 0.6, step=2), obs("s3", 0.1, step=3)], CTX, state
    )
    (second,) = only(out, MemorySummarised)
    assert second.summarises == tuple(memory_id_for(AGENT, f"s2-{i}") for i in range(3))
    assert second.covers_upto_seq > first.covers_upto_seq
    assert second.importance == 0.6


def test_year_only_agents_end_a_session_with_the_year() -> None:
    events = [obs(f"y1-{i}", imp, year=1) for i, imp in enumerate([0.3, 0.4, 0.5])]
    out, _ = feed([*events, obs("y2", 0.3, year=2)])
    (summary,) = only(out, MemorySummarised)
    assert (summary.trigger, summary.level, summary.year) == ("year", 1, 2)
    assert summary.summarises == tuple(memory_id_for(AGENT, f"y1-{i}") for i in range(3))
    (done,) = only(out, ConsolidationCompleted)
    assert out.index(summary) < out.index(done)


def chapter_at_step_10() -> tuple[list[DerivedEvent], list[DerivedEvent], AgentMemoryState]:
    before, state = feed([*session(8, "a", [0.3, 0.5, 0.4]), *session(9, "b", [0.3, 0.6, 0.2])])
    at_10, state = feed([obs("c-0", 0.3, step=10)], CTX, state)
    return before, at_10, state


def test_l2_summarises_the_pending_l1s_when_a_chapter_of_ten_steps_ends() -> None:
    before, at_10, state = chapter_at_step_10()
    (l1a,) = only(before, MemorySummarised)
    assert kinds(at_10) == [MemorySummarised, MemorySummarised, MemoryRecorded]
    l1b, l2 = only(at_10, MemorySummarised)
    assert (l1b.level, l2.level) == (1, 2)
    assert l2.summarises == (l1a.memory_id, l1b.memory_id)
    assert (l2.trigger, l2.destination, l2.importance) == ("chapter", "episodic", 0.6)
    assert l2.covers_upto_seq == max(l1a.seq, l1b.seq)
    assert state.pending_l1 == ()
    assert {s.memory_id for s in state.summaries} == {l1a.memory_id, l1b.memory_id, l2.memory_id}


def test_a_single_pending_l1_waits_for_the_next_chapter() -> None:
    out, state = feed([*session(8, "a", [0.3, 0.5, 0.4]), obs("b", 0.3, step=9)])
    (l1a,) = only(out, MemorySummarised)
    out, state = feed([obs("c", 0.3, step=10)], CTX, state)
    assert only(out, MemorySummarised) == []
    assert [s.memory_id for s in state.pending_l1] == [l1a.memory_id]
    out, state = feed([*session(12, "d", [0.2, 0.2, 0.2]), obs("e", 0.3, step=13)], CTX, state)
    (l1b,) = only(out, MemorySummarised)
    out, state = feed([obs("f", 0.3, step=21)], CTX, state)  # crosses step 20
    (l2,) = [s for s in only(out, MemorySummarised) if s.level == 2]
    assert l2.summarises == (l1a.memory_id, l1b.memory_id)
    assert state.pending_l1 == ()


def test_an_l1_pruned_while_it_waits_for_its_chapter_is_left_out_of_it() -> None:
    """Seed 001's L2 reads the L1 summaries still in the store: one pruned while it waited
    (alone at its chapter's end, then older than ten steps with a low MUS) is not among them,
    and the state a takeover folds from the log agrees."""
    derived, state = feed([*session(1, "a", [0.3, 0.5, 0.4]), obs("b", 0.3, step=2)])
    (l1a,) = only(derived, MemorySummarised)
    out, state = feed([obs("c", 0.3, step=10)], CTX, state)  # the chapter's only L1 waits
    derived += out
    assert [p.memory_id for p in state.pending_l1] == [l1a.memory_id]
    out, state = feed([obs("d", 0.3, step=12)], CTX, state)
    derived += out
    assert [f.memory_id for f in only(out, MemoryForgotten)] == [l1a.memory_id]
    assert state.pending_l1 == ()
    events = [*session(13, "e", [0.2] * 3), obs("f", 0.3, step=14), *session(15, "g", [0.2] * 3)]
    out, state = feed([*events, obs("h", 0.3, step=21)], CTX, state)  # crosses step 20
    derived += out
    l1s = [s.memory_id for s in only(out, MemorySummarised) if s.level == 1]
    (l2,) = [s for s in only(out, MemorySummarised) if s.level == 2]
    assert l2.summarises == tuple(l1s)
    assert l1a.memory_id not in l2.summarises
    folded = AgentMemoryState()
    for event in derived:
        folded = fold(folded, event)
    assert (folded.pending_l1, folded.summaries) == (state.pending_l1, state.summaries)


# --- MUS and pruning (seed 001: 0.4 F + 0.4 Rel + 0.2 Rec; L1 0.2, L2 0.3) ---------------


def test_memory_utility_numbers() -> None:
    rules = PruningRules()
    never = memory_utility(retrievals=0, relevance_sum=0.0, since_access=10, rules=rules)
    assert never == pytest.approx((0.2 / 11, 0.0, 0.0, 1 / 11))
    once = memory_utility(retrievals=1, relevance_sum=0.5, since_access=0, rules=rules)
    assert once[0] == pytest.approx(0.4 * math.log(2) + 0.4 * 0.5 + 0.2 * 1.0)
    assert once[1:] == pytest.approx((math.log(2), 0.5, 1.0))
    often = memory_utility(retrievals=5, relevance_sum=3.0, since_access=1, rules=rules)
    assert often == pytest.approx((0.4 + 0.4 * 0.6 + 0.1, 1.0, 0.6, 0.5))


def test_l1_older_than_ten_steps_with_low_mus_is_forgotten_younger_kept() -> None:
    summary, state = one_l1()
    out, state = feed([obs("s10", 0.3, step=10)], CTX, state)  # made at step 2: age 8, kept
    assert only(out, MemoryForgotten) == []
    out, state = feed([obs("s12", 0.3, step=12)], CTX, state)  # age 10
    (gone,) = only(out, MemoryForgotten)
    assert (gone.memory_id, gone.reason, gone.level) == (summary.memory_id, "utility", 1)
    assert (gone.destination, gone.caused_by) == ("episodic", "s12")
    assert gone.mus is not None
    assert (gone.mus.threshold, gone.mus.age, gone.mus.age_unit) == (0.2, 10.0, "steps")
    assert gone.mus.retrievals == 0
    assert gone.mus.score == pytest.approx(0.2 / 11)
    assert state.summaries == ()


def test_a_retrieved_l1_survives_where_an_unretrieved_one_is_pruned() -> None:
    summary, state = one_l1()
    used = on_retrieval(retrieval((summary.memory_id, 0.9), step=2), state)
    later = [obs("s12", 0.3, step=12)]
    assert len(only(feed(later, CTX, state)[0], MemoryForgotten)) == 1
    out, used = feed(later, CTX, used)
    assert only(out, MemoryForgotten) == []
    assert [s.memory_id for s in used.summaries] == [summary.memory_id]


def test_an_upvote_on_an_l1_counts_as_a_retrieval_scored_by_its_signal() -> None:
    """An agent's upvote says a summary was useful, as a retrieval does (processors/README):
    it counts as one retrieval scored by the signal at the feedback's step. The L1 made at
    step 2, never used, is pruned at step 12 (MUS 0.2 / 11 < 0.2); upvoted 0.8 at step 7 it
    is kept, with MUS 0.4 ln 2 + 0.4 x 0.8 + 0.2 / (1 + 12 - 7) = 0.6306."""
    summary, state = one_l1()
    later = [obs("s12", 0.3, step=12)]
    (unused,) = only(feed(later, CTX, state)[0], MemoryForgotten)
    assert unused.memory_id == summary.memory_id

    upvote = Feedback.model_validate(
        {"agent_id": AGENT, "event_id": "f7", "step": 7, "occurred_at": T0}
        | {"target_event_id": summary.memory_id, "signal": 0.8}
    )
    state = on_agent_event(upvote, state, CTX).state  # recorded, then learned from, as live
    (rated, *more), state = learn(upvote, state, CTX)
    assert more == []
    assert isinstance(rated, MemoryRated)
    assert (rated.memory_id, rated.level, rated.upvotes) == (summary.memory_id, 1, 1)
    (entry,) = state.summaries
    assert (entry.retrievals, entry.relevance_sum) == (1, 0.8)
    assert (entry.last_access_step, entry.last_access_year) == (7, None)

    out, kept = feed(later, CTX, state)
    assert only(out, MemoryForgotten) == []
    assert [s.memory_id for s in kept.summaries] == [summary.memory_id]
    # Its MUS, which pruning reports when the threshold is above it.
    strict = LifecycleRules(pruning=PruningRules(l1_threshold=0.7))
    (gone,) = only(
        feed(later, deriving(load_processing_config(lifecycle=strict)), state)[0], MemoryForgotten
    )
    assert gone.mus is not None
    assert (gone.mus.retrievals, gone.mus.age, gone.mus.threshold) == (1, 10.0, 0.7)
    assert gone.mus.retrieval_frequency == pytest.approx(0.693147, abs=1e-6)
    assert gone.mus.relevance == pytest.approx(0.8)
    assert gone.mus.recency == pytest.approx(0.166667, abs=1e-6)
    assert gone.mus.score == pytest.approx(0.630592, abs=1e-6)


def test_l2_uses_threshold_0_3_and_its_own_minimum_age() -> None:
    before, at_10, state = chapter_at_step_10()
    (l1a,) = only(before, MemorySummarised)
    l1b, l2 = only(at_10, MemorySummarised)
    # Retrieved once, with no relevance: MUS about 0.28, above L1's 0.2, below L2's 0.3.
    state = on_retrieval(retrieval((l1b.memory_id, 0.0), (l2.memory_id, 0.0), step=10), state)
    out, state = feed([obs("d", 0.3, step=58)], CTX, state)  # L2 (made at step 10) aged 48 < 50
    assert [f.memory_id for f in only(out, MemoryForgotten)] == [l1a.memory_id]
    out, state = feed([obs("e", 0.3, step=60)], CTX, state)  # L2 aged 50
    (gone,) = only(out, MemoryForgotten)
    assert (gone.memory_id, gone.level) == (l2.memory_id, 2)
    assert gone.mus is not None
    assert (gone.mus.threshold, gone.mus.age, gone.mus.retrievals) == (0.3, 50.0, 1)
    assert gone.mus.score == pytest.approx(0.4 * math.log(2) + 0.2 / 51)
    assert [s.memory_id for s in state.summaries] == [l1b.memory_id]


def wall_session(i: int, start: datetime) -> list[Observation]:
    return [
        obs(f"w{i}-{k}", 0.4, agent="W1", at=start + timedelta(seconds=10 * k)) for k in range(3)
    ]


def test_wall_clock_ticks_close_sessions_and_chapters() -> None:
    state = AgentMemoryState()
    l1s: list[MemorySummarised] = []
    last: list[DerivedEvent] = []
    for i in range(10):
        start = T0 + timedelta(minutes=5 * i)
        _, state = feed(wall_session(i, start), CTX, state)
        at = start + timedelta(minutes=4)
        last, changed = on_tick(tick(f"t{i}", at, interval=300), {"W1": state}, CTX)
        state = changed["W1"]
        l1 = last[0]
        assert isinstance(l1, MemorySummarised)
        assert (l1.level, l1.trigger, l1.source_event_id) == (1, "tick", f"t{i}")
        assert l1.summarises == tuple(memory_id_for("W1", f"w{i}-{k}") for k in range(3))
        assert (l1.step, l1.year) == (None, None)
        assert len(last) == (2 if i == 9 else 1)
        l1s.append(l1)
    l2 = last[1]
    assert isinstance(l2, MemorySummarised)
    assert (l2.level, l2.trigger) == (2, "chapter")
    assert l2.summarises == tuple(s.memory_id for s in l1s)
    assert state.pending_l1 == ()


def test_a_wall_clock_chapter_spans_ten_sessions_not_ten_l1s() -> None:
    """An L1 every third session (the others too quiet to make one): the chapter still closes
    at the tenth session from its first L1, as seed 001's closes every 10 steps; counting
    L1s made it wait for thirty sessions."""
    state, l1s, chapters = AgentMemoryState(), list[str](), list[MemorySummarised]()
    for i in range(30):
        start = T0 + timedelta(minutes=i)
        if i % 3 == 0:
            _, state = feed(wall_session(i, start), CTX, state)
        out, changed = on_tick(tick(f"t{i}", start + timedelta(seconds=50)), {"W1": state}, CTX)
        state = changed.get("W1", state)
        l1s += [s.memory_id for s in only(out, MemorySummarised) if s.level == 1]
        chapters += [s for s in only(out, MemorySummarised) if s.level == 2]
        if i == 8:
            assert chapters == [], "nine sessions are not a chapter"
    # L1s at sessions 0, 3, 6, 9 close at 9; the next chapter begins with the L1 of 12.
    assert [c.source_event_id for c in chapters] == ["t9", "t21"]
    assert [c.summarises for c in chapters] == [tuple(l1s[0:4]), tuple(l1s[4:8])]
    assert len(l1s) == 10
    assert [s.memory_id for s in state.pending_l1] == l1s[8:]


def test_wall_clock_pruning_measures_ages_in_seconds_from_the_tick() -> None:
    _, state = feed(wall_session(0, T0), CTX)
    out, changed = on_tick(tick("t0", T0 + timedelta(minutes=1)), {"W1": state}, CTX)
    (summary,) = only(out, MemorySummarised)
    state, made = changed["W1"], T0 + timedelta(minutes=1)  # the tick made it
    assert summary.occurred_at == made
    # Half an hour on: MUS 0.2 / (1 + 1/48) = 0.196 < 0.2, but younger than an hour: kept.
    assert on_tick(tick("t1", made + timedelta(seconds=1800)), {"W1": state}, CTX) == ([], {})
    out, changed = on_tick(tick("t2", made + timedelta(seconds=7200)), {"W1": state}, CTX)
    (gone,) = out
    assert isinstance(gone, MemoryForgotten)
    assert (gone.memory_id, gone.reason, gone.caused_by) == (summary.memory_id, "utility", "t2")
    assert gone.mus is not None
    assert (gone.mus.age, gone.mus.age_unit, gone.mus.threshold) == (7200.0, "seconds", 0.2)
    assert gone.mus.recency == pytest.approx(1 / (1 + 7200 / 86400))
    assert gone.mus.score == pytest.approx(0.2 / (1 + 7200 / 86400))
    assert changed["W1"].summaries == ()


def test_simulation_agents_ignore_ticks() -> None:
    _, sim = feed(session(1, "s1", [0.3, 0.4, 0.5]))
    _, wall = feed(wall_session(0, T0))
    out, changed = on_tick(tick("t", T0 + timedelta(days=30)), {AGENT: sim, "W1": wall}, CTX)
    assert set(changed) == {"W1"}
    assert all(e.agent_id == "W1" for e in out)
    assert on_tick(tick("t", T0 + timedelta(days=30)), {AGENT: sim}, CTX) == ([], {})


# --- retrievals --------------------------------------------------------------------------


def test_retrieval_counts_only_the_agents_summaries() -> None:
    summary, state = one_l1()
    hit = retrieval(
        (summary.memory_id, 0.7), (memory_id_for(AGENT, "s1-0"), 0.9), ("other", 1.0), step=2
    )
    after = on_retrieval(hit, state)
    (entry,) = after.summaries
    assert (entry.retrievals, entry.relevance_sum, entry.last_access_step) == (1, 0.7, 2)
    assert after.working == state.working
    assert after.pending_l1 == state.pending_l1
    miss = retrieval((memory_id_for(AGENT, "s1-0"), 0.9), ("other", 1.0), step=2)
    assert on_retrieval(miss, state) == state


@pytest.mark.parametrize(("score", "counted"), [(1.7, 1.0), (-0.3, 0.0), (0.4, 0.4)])
def test_retrieval_scores_are_clipped_to_the_unit_interval(score: float, counted: float) -> None:
    summary, state = one_l1()
    (entry,) = on_retrieval(retrieval((summary.memory_id, score)), state).summaries
    assert (entry.retrievals, entry.relevance_sum) == (1, counted)


def test_retrievals_fold_in_any_order() -> None:
    summary, state = one_l1()
    late = retrieval((summary.memory_id, 0.4), step=3, at=T0 + timedelta(hours=2))
    high = retrieval((summary.memory_id, 0.9), step=5, at=T0 + timedelta(hours=1))
    one_way = on_retrieval(high, on_retrieval(late, state))
    assert one_way == on_retrieval(late, on_retrieval(high, state))
    (entry,) = one_way.summaries
    assert (entry.retrievals, entry.last_access_step) == (2, 5)
    assert entry.last_access_at == T0 + timedelta(hours=2)
    assert entry.relevance_sum == pytest.approx(1.3)


# --- determinism -------------------------------------------------------------------------


def test_the_same_events_derive_the_same_events() -> None:
    importances = [0.3, 0.65, 0.5, 0.65, 0.2, 0.9]
    events = [obs(f"d{i}", importances[i % 6], step=i // 3, year=1 + i // 36) for i in range(150)]
    first, state_1 = feed(events)
    second, state_2 = feed(events)
    assert first == second
    assert state_1 == state_2
    assert {MemoryPromoted, ConsolidationCompleted, MemorySummarised, MemoryForgotten} <= set(
        kinds(first)
    )
    assert {s.level for s in only(first, MemorySummarised)} == {1, 2}
    assert any(f.reason == "utility" for f in only(first, MemoryForgotten))
    ids = [e.event_id for e in first]
    assert len(set(ids)) == len(ids)
    assert all(uuid.UUID(i).version == 5 for i in ids)
