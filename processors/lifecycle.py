"""Memory over time, as events: year-end consolidation, L1/L2 summaries and utility pruning.

Pure functions of an agent's state and the event that triggers them, so the live path, a reprocess
and the tests all decide the same (streams/README.md, invariant 2). Two clocks trigger them:

* **simulation time**, read from the agent's own stream: when an event carries a later step (or,
  without steps, a later year) than the agent's clock, the session that just ended is closed
  (an L1 summary, seed 001); a later year closes the year (consolidation, seed 004 section 4.3
  and seed 003's gate and burn); crossing a multiple of ``chapter_length`` steps (seed 001: 10)
  closes a chapter (an L2 summary of the pending L1s); then summaries are pruned by MUS;
* **wall-clock time**, read from ticks on ``memory.schedule``: for agents whose events carry no
  simulation time, a tick closes the session, the first tick ``sessions_per_chapter`` sessions
  after a chapter's first L1 closes the chapter, and pruning measures ages in seconds from the
  tick's own time.

Retrievals (``memory.access``) only update the state: how often and how well each summary was
retrieved, which MUS reads (seed 001). A search of facts there counts on facts instead
(:mod:`processors.fact_access`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

from processors.config import ProcessingConfig, SummaryRules
from processors.embedding import Embedder
from processors.fact_patterns import derive_pattern_facts
from processors.memory_utility import AgeUnit, ages_of, memory_utility
from processors.recording import (
    MEMORY_ID,
    AgentMemoryState,
    EpisodicEntry,
    SummaryEntry,
    WorkingEntry,
    add_episodic,
    capacity_forgetting,
    record,
    to_relevance_units,
)
from processors.summarising import Summariser, SummaryItem, SummaryRequest
from schemas.agent_events import AgentEvent
from schemas.memory_events import (
    ConsolidationCompleted,
    ConsolidationOutcome,
    DerivedEvent,
    MemoryForgotten,
    MemoryPromoted,
    MemoryRetrieved,
    MemorySummarised,
    MusBreakdown,
    PromotionDecision,
    ScheduleTick,
    SourcePosition,
    SummaryTrigger,
    derived_event_id,
    encode_vector,
)

MAX_SUMMARY_TAGS = 64


@dataclass(frozen=True)
class Deriving:
    """Everything besides the events that derived events depend on."""

    config: ProcessingConfig
    embedder: Embedder
    summariser: Summariser
    config_version: str
    placement: Callable[[str], int] | None = None  # an agent's partition (None: unchecked)


@dataclass(frozen=True)
class Trigger:
    """The record whose processing emits lifecycle events: they carry its id and position."""

    event_id: str
    event_type: str
    occurred_at: datetime
    position: SourcePosition | None
    step: int | None = None
    year: int | None = None


@dataclass(frozen=True)
class Derived:
    events: tuple[DerivedEvent, ...]
    state: AgentMemoryState


def on_agent_event(
    event: AgentEvent,
    state: AgentMemoryState,
    ctx: Deriving,
    position: SourcePosition | None = None,
) -> Derived:
    """Close whatever period the event's time ends, then record the event itself."""
    trigger = Trigger(
        event.event_id, event.event_type, event.occurred_at, position, event.step, event.year
    )
    out: list[DerivedEvent] = []
    state = close_simulation_periods(
        state, event.year, event.step, trigger, ctx, out, agent_id=event.agent_id
    )
    recorded = record(
        event,
        state,
        config=ctx.config,
        embedder=ctx.embedder,
        config_version=ctx.config_version,
        position=position,
    )
    return Derived((*out, recorded.memory, *recorded.forgotten), recorded.state)


def close_simulation_periods(
    state: AgentMemoryState,
    year: int | None,
    step: int | None,
    trigger: Trigger,
    ctx: Deriving,
    out: list[DerivedEvent],
    *,
    agent_id: str,
) -> AgentMemoryState:
    """The lifecycle events due when the agent's clock moves from ``state``'s to (year, step).

    Order: the session's L1 first (it summarises the working memories of the period that
    ended), then the year's consolidation, then the chapter's L2 (which includes that L1),
    then pruning.
    """
    step_moved = step is not None and state.step is not None and step > state.step
    year_moved = year is not None and state.year is not None and year > state.year
    if not (step_moved or year_moved):
        return state
    rules = ctx.config.lifecycle
    if rules.summaries.enabled:
        why: SummaryTrigger = "step" if step_moved else "year"
        state = session_summary(state, trigger, why, ctx, out, agent_id=agent_id)
    if year_moved and rules.consolidation.enabled and state.year is not None:
        state = consolidate(state, state.year, trigger, ctx, out, agent_id=agent_id)
    unit: AgeUnit
    if step is not None and state.step is not None:
        unit, before, now = "steps", state.step, step
    elif year is not None and state.year is not None:
        unit, before, now = "years", state.year, year
    else:  # pragma: no cover - one of the two moved, so one axis has both values
        return state
    length = rules.summaries.chapter_length
    if rules.summaries.enabled and now // length > before // length:
        state = chapter_summary(state, trigger, ctx, out, agent_id=agent_id)
    if rules.pruning.enabled:
        state = prune(state, trigger, ctx, out, unit=unit, now=float(now), agent_id=agent_id)
    return state


def on_tick(
    tick: ScheduleTick,
    states: Mapping[str, AgentMemoryState],
    ctx: Deriving,
    position: SourcePosition | None = None,
) -> tuple[list[DerivedEvent], dict[str, AgentMemoryState]]:
    """A wall-clock tick for the agents of its partition; simulation agents ignore it (their
    periods are closed by their own stream, so a replay never depends on when ticks fell)."""
    trigger = Trigger(tick.event_id, tick.event_type, tick.occurred_at, position)
    rules = ctx.config.lifecycle
    out: list[DerivedEvent] = []
    changed: dict[str, AgentMemoryState] = {}
    for agent_id in sorted(states):
        state = states[agent_id]
        if not state.wall_clock:
            continue
        before = len(out)
        if rules.summaries.enabled:
            state = session_summary(state, trigger, "tick", ctx, out, agent_id=agent_id)
            if chapter_ended(state, tick, rules.summaries):
                state = chapter_summary(state, trigger, ctx, out, agent_id=agent_id)
        if rules.pruning.enabled:
            state = prune(
                state,
                trigger,
                ctx,
                out,
                unit="seconds",
                now=tick.occurred_at.timestamp(),
                agent_id=agent_id,
            )
        if len(out) > before:
            changed[agent_id] = state
    return out, changed


def chapter_ended(state: AgentMemoryState, tick: ScheduleTick, rules: SummaryRules) -> bool:
    """Whether ``tick`` ends a wall-clock agent's chapter: ``sessions_per_chapter`` sessions (of
    the ticks' interval) since its first pending L1 (a quiet session makes none), or, when too
    few L1s were pending then, the tick that makes enough. Log times decide: a fold agrees."""
    if not state.pending_l1:
        return False
    first = min(entry.occurred_at for entry in state.pending_l1)
    # n sessions end n - 1 intervals after the tick that made the first L1; half an interval
    # of slack, as the leader writes ticks about an interval apart.
    span = (rules.sessions_per_chapter - 1.5) * tick.interval_seconds
    return (tick.occurred_at - first).total_seconds() >= span


def on_retrieval(retrieval: MemoryRetrieved, state: AgentMemoryState) -> AgentMemoryState:
    """Count a retrieval of the agent's summaries: frequency and relevance for MUS (seed 001).

    Relevance is the retrieval's score, clipped to [0, 1]; the latest access is a maximum, so
    folding retrievals in any order gives the same state.
    """
    scores = {item.memory_id: item.score for item in retrieval.results}
    if not scores or not any(s.memory_id in scores for s in state.summaries):
        return state
    summaries = tuple(
        _accessed(s, scores[s.memory_id], retrieval) if s.memory_id in scores else s
        for s in state.summaries
    )
    return replace(state, summaries=summaries)


def _accessed(entry: SummaryEntry, score: float, retrieval: MemoryRetrieved) -> SummaryEntry:
    return replace(
        entry,
        retrievals=entry.retrievals + 1,
        relevance_units=entry.relevance_units + to_relevance_units(min(1.0, max(0.0, score))),
        last_access_step=_max(entry.last_access_step, retrieval.step),
        last_access_year=_max(entry.last_access_year, retrieval.year),
        last_access_at=(
            retrieval.occurred_at
            if entry.last_access_at is None or retrieval.occurred_at > entry.last_access_at
            else entry.last_access_at
        ),
    )


def _max(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


# --- consolidation -----------------------------------------------------------------------


def burn_draw(source_event_id: str) -> float:
    """A uniform draw in [0, 1) seeded from the event id: a replay draws the same number."""
    digest = hashlib.sha256(f"burn:{source_event_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def decide_promotion(
    importance: float, source_event_id: str, config: ProcessingConfig
) -> tuple[
    Literal["promoted", "burned", "below_gate"], Literal["threshold", "burn"] | None, float | None
]:
    """(outcome, rule, draw) for one working memory at year end.

    At or above the promotion threshold (seed 004 section 4.3: 0.7) a memory is promoted; at or
    above the gate (seed 003: 0.6) it is promoted when the seeded draw is below the burning
    probability (seed 003: 0.8); below the gate it stays in working memory only.
    """
    rules = config.lifecycle.consolidation
    if importance >= rules.promotion_threshold:
        return "promoted", "threshold", None
    if importance >= rules.gate:
        draw = burn_draw(source_event_id)
        if draw < rules.burn_probability:
            return "promoted", "burn", draw
        return "burned", None, draw
    return "below_gate", None, None


def consolidate(
    state: AgentMemoryState,
    year: int,
    trigger: Trigger,
    ctx: Deriving,
    out: list[DerivedEvent],
    *,
    agent_id: str,
) -> AgentMemoryState:
    """Year-end consolidation of the working memories not yet considered.

    The working memories stay (seed 004: "will evict naturally"); a promoted one gets an
    episodic copy, and the episodic capacity then applies to the copy as to any memory. Last,
    an observation kind they repeat becomes a fact (:mod:`processors.fact_patterns`)."""
    fresh = [w for w in state.working if not w.considered]
    if not fresh:
        return state
    episodic, capacity = state.episodic, ctx.config.episodic_capacity_for(state.agent_type)
    outcomes: list[ConsolidationOutcome] = []
    promoted: list[str] = []
    for entry in fresh:
        outcome, rule, draw = decide_promotion(entry.importance, entry.source_event_id, ctx.config)
        outcomes.append(
            ConsolidationOutcome(
                memory_id=entry.memory_id,
                importance=entry.importance,
                outcome=outcome,
                draw=draw,
            )
        )
        if rule is None or derived_event_id(entry.memory_id, "promoted") in map(
            MEMORY_ID, episodic
        ):
            # Its copy is still there (the working memory was forgotten and its event id
            # recorded again): kept as it is, as the fold keeps it.
            continue
        copy = _promoted_copy(agent_id, entry, year, rule, draw, trigger, ctx)
        out.append(copy)
        promoted.append(copy.memory_id)
        episodic, evicted = add_episodic(
            episodic, EpisodicEntry(entry.importance, entry.seq, copy.memory_id), capacity
        )
        out.extend(
            capacity_forgetting(e.memory_id, e.seq, "episodic", copy, ctx.config_version)
            for e in evicted
        )
    working = tuple(w if w.considered else w.as_considered() for w in state.working)
    out.append(
        ConsolidationCompleted(
            event_id=derived_event_id(trigger.event_id, f"consolidated:{agent_id}"),
            agent_id=agent_id,
            occurred_at=trigger.occurred_at,
            year=year,
            consolidated_year=year,
            considered=tuple(outcomes),
            promoted=tuple(promoted),
            working_after=len(working),
            episodic_after=len(episodic),
            caused_by=trigger.event_id,
            source_position=trigger.position,
            config_version=ctx.config_version,
        )
    )
    state = replace(state, working=working, episodic=episodic)
    return derive_pattern_facts(state, fresh, trigger, ctx, out, agent_id=agent_id)


def _promoted_copy(
    agent_id: str,
    entry: WorkingEntry,
    year: int,
    rule: Literal["threshold", "burn"],
    draw: float | None,
    trigger: Trigger,
    ctx: Deriving,
) -> MemoryPromoted:
    memory_id = derived_event_id(entry.memory_id, "promoted")
    return MemoryPromoted(
        event_id=derived_event_id(memory_id, "promoted"),
        memory_id=memory_id,
        promoted_from=entry.memory_id,
        decision=PromotionDecision(rule=rule, consolidated_year=year, draw=draw),
        agent_id=agent_id,
        agent_type=entry.agent_type,
        occurred_at=entry.occurred_at,
        step=entry.step,
        year=entry.year,
        source_event_id=entry.source_event_id,
        source_event_type=entry.source_event_type,
        source_position=trigger.position,
        seq=entry.seq,
        content=entry.content,
        tags=entry.tags,
        kind=entry.kind,
        importance=entry.importance,
        destination="episodic",
        embedding=encode_vector(ctx.embedder.embed(entry.content)),
        embedder=ctx.embedder.id,
        config_version=ctx.config_version,
    )


# --- summaries ---------------------------------------------------------------------------


def session_summary(
    state: AgentMemoryState,
    trigger: Trigger,
    why: SummaryTrigger,
    ctx: Deriving,
    out: list[DerivedEvent],
    *,
    agent_id: str,
) -> AgentMemoryState:
    """An L1 summary of the working memories recorded since the last one, when there are at
    least ``l1_min_memories`` of them (seed 001: "when enough short-term memories are
    available")."""
    fresh = [w for w in state.working if w.seq > state.l1_upto_seq]
    if len(fresh) < ctx.config.lifecycle.summaries.l1_min_memories or _made_by(
        state, trigger, 1, agent_id
    ):
        return state
    items = [SummaryItem(w.content, w.importance, w.step, w.year, w.occurred_at) for w in fresh]
    summary = _summary(
        agent_id,
        state,
        level=1,
        items=items,
        sources=[w.memory_id for w in fresh],
        covers_upto_seq=max(w.seq for w in fresh),
        tags=[t for w in fresh for t in w.tags],
        why=why,
        trigger=trigger,
        ctx=ctx,
    )
    out.append(summary)
    entry = SummaryEntry.of(summary)
    return replace(
        state,
        next_seq=state.next_seq + 1,
        l1_upto_seq=summary.covers_upto_seq,
        pending_l1=(*state.pending_l1, entry),
        summaries=(*state.summaries, entry),
    )


def chapter_summary(
    state: AgentMemoryState,
    trigger: Trigger,
    ctx: Deriving,
    out: list[DerivedEvent],
    *,
    agent_id: str,
) -> AgentMemoryState:
    """An L2 chapter summary of the pending L1 summaries (seed 001), when there are at least
    ``l2_min_summaries``; otherwise they wait for the next chapter."""
    pending = state.pending_l1
    if (
        not pending
        or len(pending) < ctx.config.lifecycle.summaries.l2_min_summaries
        or _made_by(state, trigger, 2, agent_id)
    ):
        return state
    # An L1 is made when its session has ended, so its own step/year is the next session's;
    # the period it covers is in its text, where the summariser reads it from.
    items = [SummaryItem(s.content, s.importance, None, None, s.occurred_at) for s in pending]
    summary = _summary(
        agent_id,
        state,
        level=2,
        items=items,
        sources=[s.memory_id for s in pending],
        covers_upto_seq=max(s.seq for s in pending),
        tags=[t for s in pending for t in s.tags],
        why="chapter",
        trigger=trigger,
        ctx=ctx,
    )
    out.append(summary)
    return replace(
        state,
        next_seq=state.next_seq + 1,
        pending_l1=(),
        summaries=(*state.summaries, SummaryEntry.of(summary)),
    )


def _summary_id(trigger: Trigger, level: int, agent_id: str) -> str:
    return derived_event_id(trigger.event_id, f"l{level}:{agent_id}")


def _made_by(state: AgentMemoryState, trigger: Trigger, level: int, agent_id: str) -> bool:
    """Whether the summary this trigger would make is still held: its event id was recorded
    again after its memory was forgotten. The fold keeps the summary it holds, so the live
    path makes none (it waits for the next trigger) rather than a second under the same id."""
    made = _summary_id(trigger, level, agent_id)
    return made in map(MEMORY_ID, state.summaries) or made in map(MEMORY_ID, state.pending_l1)


def _summary(
    agent_id: str,
    state: AgentMemoryState,
    *,
    level: Literal[1, 2],
    items: Sequence[SummaryItem],
    sources: Sequence[str],
    covers_upto_seq: int,
    tags: Sequence[str],
    why: SummaryTrigger,
    trigger: Trigger,
    ctx: Deriving,
) -> MemorySummarised:
    """A summary memory: as important as the most important memory it covers, with their tags
    (first seen first), made at the trigger's time. Its age, for pruning and retrieval decay,
    counts from then: a summary is never pruned by the event that makes it, and what it covers
    is in ``summarises`` and in its text."""
    request = SummaryRequest(agent_id, state.agent_type, level, items)
    text, summariser_id = ctx.summariser.summarise_with_origin(request)
    memory_id = _summary_id(trigger, level, agent_id)
    return MemorySummarised(
        event_id=derived_event_id(memory_id, "summarised"),
        memory_id=memory_id,
        agent_id=agent_id,
        agent_type=state.agent_type,
        occurred_at=trigger.occurred_at,
        step=trigger.step,
        year=trigger.year,
        source_event_id=trigger.event_id,
        source_event_type=trigger.event_type,
        source_position=trigger.position,
        seq=state.next_seq,
        content=text,
        tags=tuple(dict.fromkeys(tags))[:MAX_SUMMARY_TAGS],
        importance=max(item.importance for item in items),
        destination="episodic",
        level=level,
        embedding=encode_vector(ctx.embedder.embed(text)),
        embedder=ctx.embedder.id,
        config_version=ctx.config_version,
        summarises=tuple(sources),
        covers_upto_seq=covers_upto_seq,
        summariser=summariser_id,
        trigger=why,
    )


# --- pruning -----------------------------------------------------------------------------


def prune(
    state: AgentMemoryState,
    trigger: Trigger,
    ctx: Deriving,
    out: list[DerivedEvent],
    *,
    unit: AgeUnit,
    now: float,
    agent_id: str | None = None,
) -> AgentMemoryState:
    """Forget the summaries older than their level's minimum age whose MUS is below their
    level's threshold (seed 001: L1 0.2, L2 0.3); an L1 forgotten before its chapter was made
    is left out of the chapter."""
    if not state.summaries:
        return state
    rules = ctx.config.lifecycle.pruning
    keep: list[SummaryEntry] = []
    owner = agent_id
    for entry in state.summaries:
        ages = ages_of(entry, unit, now, rules)
        if ages is None:
            keep.append(entry)
            continue
        age, since = ages
        if entry.level == 1:
            threshold = rules.l1_threshold
            min_age = rules.l1_min_age_seconds if unit == "seconds" else rules.l1_min_age
        else:
            threshold = rules.l2_threshold
            min_age = rules.l2_min_age_seconds if unit == "seconds" else rules.l2_min_age
        if age < min_age:
            keep.append(entry)
            continue
        score, frequency, relevance, recency = memory_utility(
            retrievals=entry.retrievals,
            relevance_sum=entry.relevance_sum,
            since_access=since,
            rules=rules,
        )
        if score >= threshold:
            keep.append(entry)
            continue
        out.append(
            MemoryForgotten(
                event_id=derived_event_id(entry.memory_id, "forgotten"),
                agent_id=owner,
                occurred_at=trigger.occurred_at,
                memory_id=entry.memory_id,
                seq=entry.seq,
                destination="episodic",
                reason="utility",
                level=1 if entry.level == 1 else 2,
                caused_by=trigger.event_id,
                source_position=trigger.position,
                mus=MusBreakdown(
                    score=score,
                    retrieval_frequency=frequency,
                    relevance=relevance,
                    recency=recency,
                    threshold=threshold,
                    retrievals=entry.retrievals,
                    age=max(0.0, age),
                    age_unit=unit,
                ),
                config_version=ctx.config_version,
            )
        )
    if len(keep) == len(state.summaries):
        return state
    kept = {entry.memory_id for entry in keep}  # a pruned L1 leaves its pending chapter too
    pending = tuple(p for p in state.pending_l1 if p.memory_id in kept)
    return replace(state, summaries=tuple(keep), pending_l1=pending)
