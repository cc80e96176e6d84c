"""From an agent event to the derived events that change memory: the processor's pure core.

``record`` is ``(event, state) -> (events, new state)``: it scores importance, routes, embeds, reads
surprise (:mod:`processors.surprise`, carried on the recording) and applies the capacities of seed
004 (working memory 10 items, FIFO; episodic 50 items, the least important evicted first, as
``max_longterm`` of seed 003), or the capacities of the event's agent type where its profile
sets them (the ``assistant`` type keeps more). Every eviction is a :class:`MemoryForgotten`
event, so projections only apply what the log says.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from operator import attrgetter

from processors.config import ProcessingConfig
from processors.embedding import Embedder
from processors.importance import importance_of
from processors.learned_state import LearnedState
from processors.routing import destination_for
from processors.surprise import assess
from schemas.agent_events import AgentEvent, agent_event_fields
from schemas.memory_events import (
    Destination,
    MemoryForgotten,
    MemoryPromoted,
    MemoryRecorded,
    MemorySummarised,
    SourcePosition,
    SurpriseReading,
    derived_event_id,
    encode_vector,
    memory_id_for,
)


@dataclass(frozen=True)
class EpisodicEntry:
    importance: float
    seq: int
    memory_id: str


@dataclass(frozen=True)
class WorkingEntry:
    """A working memory as the lifecycle rules need it: enough to summarise it and to promote
    it (the embedding is recomputed from the content by the same embedder, so the state stays
    small: about 10 of these per agent)."""

    memory_id: str
    seq: int
    importance: float
    content: str
    tags: tuple[str, ...]
    kind: str | None
    step: int | None
    year: int | None
    occurred_at: datetime
    source_event_id: str
    source_event_type: str
    agent_type: str
    considered: bool = False
    """Already decided on by a year-end consolidation: a memory gets one draw, never two."""

    @classmethod
    def of(cls, memory: MemoryRecorded) -> WorkingEntry:
        return cls(
            memory_id=memory.memory_id,
            seq=memory.seq,
            importance=memory.importance,
            content=memory.content,
            tags=memory.tags,
            kind=memory.kind,
            step=memory.step,
            year=memory.year,
            occurred_at=memory.occurred_at,
            source_event_id=memory.source_event_id,
            source_event_type=memory.source_event_type,
            agent_type=memory.agent_type,
        )

    def as_considered(self) -> WorkingEntry:
        """This entry once a year-end consolidation decided on it. Built from its fields: a
        year end marks every working memory of every agent, and ``dataclasses.replace``, which
        checks each field first, costs 1.6 times as much."""
        return WorkingEntry(**{**self.__dict__, "considered": True})


UNITS_PER_RELEVANCE = 1_000_000_000


def to_relevance_units(relevance: float) -> int:
    return round(relevance * UNITS_PER_RELEVANCE)


@dataclass(frozen=True)
class SummaryEntry:
    """A live summary and how it has been used, for MUS pruning (seed 001)."""

    memory_id: str
    level: int
    seq: int
    content: str
    importance: float
    tags: tuple[str, ...]
    step: int | None
    year: int | None
    occurred_at: datetime
    retrievals: int = 0
    relevance_units: int = 0
    """The summed relevance of its retrievals and feedback, in billionths (the property
    :attr:`relevance_sum` gives it back as a number): integers add up to the same in any
    order, floats do not, and a worker folding the log on takeover meets retrievals and
    feedback in another order than the live run did."""
    last_access_step: int | None = None
    last_access_year: int | None = None
    last_access_at: datetime | None = None

    @property
    def relevance_sum(self) -> float:
        return self.relevance_units / UNITS_PER_RELEVANCE

    @classmethod
    def of(cls, summary: MemorySummarised) -> SummaryEntry:
        return cls(
            memory_id=summary.memory_id,
            level=summary.level,
            seq=summary.seq,
            content=summary.content,
            importance=summary.importance,
            tags=summary.tags,
            step=summary.step,
            year=summary.year,
            occurred_at=summary.occurred_at,
        )


@dataclass(frozen=True)
class AgentMemoryState:
    """What a processor must remember per agent to apply capacities and lifecycle rules
    deterministically. Folded back from the log on takeover (:mod:`processors.state_fold`)."""

    next_seq: int = 0
    agent_type: str = "default"
    working: tuple[WorkingEntry, ...] = ()
    episodic: tuple[EpisodicEntry, ...] = field(default=())
    year: int | None = None
    """The agent's clock: the latest year and step its events carried."""
    step: int | None = None
    l1_upto_seq: int = -1
    """Working memories with a higher seq are not in any L1 summary yet."""
    pending_l1: tuple[SummaryEntry, ...] = ()
    """L1 summaries not yet in an L2 chapter summary."""
    summaries: tuple[SummaryEntry, ...] = ()
    """Summaries still in the projections, with their use."""
    surprise: SurpriseReading | None = None
    """The agent's latest surprise reading (its arousal, and the strategy's state to go on
    from), as carried by the recording of seq ``surprise_seq``."""
    surprise_seq: int = -1
    learned: LearnedState = field(default_factory=LearnedState)
    """Procedures, plans, facts and recent decisions (:mod:`processors.learned_state`)."""

    @property
    def working_ids(self) -> tuple[str, ...]:
        return tuple(entry.memory_id for entry in self.working)

    def holds(self, memory_id: str) -> bool:
        """Whether the memory is in the agent's working or episodic memory. Scanned in C
        (``map``): it runs for every recording, and an agent type may keep a thousand episodic
        memories."""
        return memory_id in map(MEMORY_ID, self.working) or memory_id in map(
            MEMORY_ID, self.episodic
        )

    @property
    def wall_clock(self) -> bool:
        """An agent whose events carry no simulation time: ticks end its sessions."""
        return self.year is None and self.step is None


MEMORY_ID = attrgetter("memory_id")
"""An entry's memory id, for the scans that ``map`` runs in C."""


def _later(current: int | None, seen: int | None) -> int | None:
    if current is None:
        return seen
    return current if seen is None or seen <= current else seen


def with_clock(state: AgentMemoryState, year: int | None, step: int | None) -> AgentMemoryState:
    """The clock moves forward only: an out-of-order event never rewinds it."""
    new_year = (
        year if state.year is None or (year is not None and year > state.year) else state.year
    )
    new_step = (
        step if state.step is None or (step is not None and step > state.step) else state.step
    )
    if new_year == state.year and new_step == state.step:
        return state
    return replace(state, year=new_year, step=new_step)


@dataclass(frozen=True)
class Recorded:
    """The outcome of one event: the memory, what it pushed out, and the state after."""

    memory: MemoryRecorded
    forgotten: tuple[MemoryForgotten, ...]
    state: AgentMemoryState


def capacity_forgetting(
    memory_id: str,
    seq: int,
    destination: Destination,
    cause: MemoryRecorded | MemoryPromoted,
    config_version: str,
) -> MemoryForgotten:
    return MemoryForgotten(
        event_id=derived_event_id(memory_id, "forgotten"),
        agent_id=cause.agent_id,
        occurred_at=cause.occurred_at,
        step=cause.step,
        year=cause.year,
        memory_id=memory_id,
        seq=seq,
        destination=destination,
        reason="capacity",
        caused_by=cause.event_id,
        source_position=cause.source_position,
        config_version=config_version,
    )


def agent_type_of(event: AgentEvent, state: AgentMemoryState) -> str:
    """The type whose rules (capacities, importance, learning) apply to ``event``. Feedback
    takes the agent's known type: it is said about the agent (often by a user, a tool or a
    ``engram feedback`` that does not know the type, so it carries the default), and taking its
    type made one feedback on an assistant (15 working memories) cut it to the default's 10.
    An agent's first event, feedback included, gives the type."""
    if event.event_type == "feedback" and state.next_seq > 0:
        return state.agent_type
    return event.agent_type


def record(
    event: AgentEvent,
    state: AgentMemoryState,
    *,
    config: ProcessingConfig,
    embedder: Embedder,
    config_version: str,
    position: SourcePosition | None = None,
) -> Recorded:
    agent_type = agent_type_of(event, state)
    profile = config.profile_for(agent_type)
    importance, inputs = importance_of(event, profile)
    destination = destination_for(importance, config.episodic_threshold_for(agent_type))
    reading = assess(profile.surprise, state.surprise, event)
    memory_id = memory_id_for(event.agent_id, event.event_id)
    memory = MemoryRecorded(
        event_id=derived_event_id(memory_id, "recorded"),
        memory_id=memory_id,
        source_event_id=event.event_id,
        source_event_type=event.event_type,
        source_position=position,
        seq=state.next_seq,
        importance=importance,
        destination=destination,
        scoring=inputs,
        embedding=encode_vector(embedder.embed(event.content)),
        embedder=embedder.id,
        config_version=config_version,
        surprise=reading,
        **(agent_event_fields(event) | {"agent_type": agent_type}),
    )
    forgotten: list[MemoryForgotten] = []
    working, episodic = state.working, state.episodic
    if destination == "working":
        working = (*working, WorkingEntry.of(memory))
        capacity = config.working_capacity_for(agent_type)
        while len(working) > capacity:
            forgotten.append(
                capacity_forgetting(
                    working[0].memory_id, working[0].seq, "working", memory, config_version
                )
            )
            working = working[1:]
    else:
        episodic, evicted = add_episodic(
            episodic,
            EpisodicEntry(importance, memory.seq, memory.memory_id),
            config.episodic_capacity_for(agent_type),
        )
        forgotten.extend(
            capacity_forgetting(e.memory_id, e.seq, "episodic", memory, config_version)
            for e in evicted
        )
    # One constructor call: this runs for every event, and dataclasses.replace costs twice it.
    new_state = AgentMemoryState(
        next_seq=state.next_seq + 1,
        agent_type=memory.agent_type,
        working=working,
        episodic=episodic,
        year=_later(state.year, memory.year),
        step=_later(state.step, memory.step),
        l1_upto_seq=state.l1_upto_seq,
        pending_l1=state.pending_l1,
        summaries=state.summaries,
        surprise=state.surprise if reading is None else reading,
        surprise_seq=state.surprise_seq if reading is None else memory.seq,
        learned=state.learned,
    )
    return Recorded(memory=memory, forgotten=tuple(forgotten), state=new_state)


def _eviction_rank(entry: EpisodicEntry) -> tuple[float, int]:
    return entry.importance, entry.seq


def add_episodic(
    episodic: tuple[EpisodicEntry, ...], entry: EpisodicEntry, capacity: int
) -> tuple[tuple[EpisodicEntry, ...], list[EpisodicEntry]]:
    """Add a memory and evict beyond ``capacity``, the least important (then oldest) first
    (seed 004: capacity 50; seed 003: ``max_longterm`` evicts the lowest importance).

    One over capacity, the usual case, evicts the minimum in one pass rather than sorting the
    pool: an agent type may keep a thousand episodic memories, and this runs per recording."""
    episodic = (*episodic, entry)
    if len(episodic) <= capacity:
        return episodic, []
    if len(episodic) == capacity + 1:
        excess = [min(episodic, key=_eviction_rank)]
    else:
        excess = sorted(episodic, key=_eviction_rank)[: len(episodic) - capacity]
    gone = {e.memory_id for e in excess}
    return tuple(e for e in episodic if e.memory_id not in gone), excess
