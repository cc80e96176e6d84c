"""From an agent event to the derived events that change memory: the processor's pure core.

``record`` is ``(event, state) -> (events, new state)``: it scores importance, routes, embeds
and applies the capacities of seed 004_b17958cd3fbe918a.txt (working memory 10 items, FIFO;
episodic 50 items, the least important evicted first, as ``max_longterm`` of seed 003). Every
eviction is a :class:`MemoryForgotten` event, so projections only apply what the log says.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from processors.config import ProcessingConfig
from processors.embedding import Embedder
from processors.importance import importance_of
from processors.routing import destination_for
from schemas.agent_events import AgentEvent, agent_event_fields
from schemas.memory_events import (
    Destination,
    MemoryForgotten,
    MemoryRecorded,
    SourcePosition,
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
class AgentMemoryState:
    """What a processor must remember per agent to apply capacities deterministically."""

    next_seq: int = 0
    working: tuple[str, ...] = ()
    episodic: tuple[EpisodicEntry, ...] = field(default=())


@dataclass(frozen=True)
class Recorded:
    """The outcome of one event: the memory, what it pushed out, and the state after."""

    memory: MemoryRecorded
    forgotten: tuple[MemoryForgotten, ...]
    state: AgentMemoryState


def _forget(
    memory_id: str,
    destination: Destination,
    cause: MemoryRecorded,
    config_version: str,
) -> MemoryForgotten:
    return MemoryForgotten(
        event_id=derived_event_id(memory_id, "forgotten"),
        agent_id=cause.agent_id,
        occurred_at=cause.occurred_at,
        step=cause.step,
        year=cause.year,
        memory_id=memory_id,
        destination=destination,
        reason="capacity",
        caused_by=cause.event_id,
        source_position=cause.source_position,
        config_version=config_version,
    )


def record(
    event: AgentEvent,
    state: AgentMemoryState,
    *,
    config: ProcessingConfig,
    embedder: Embedder,
    config_version: str,
    position: SourcePosition | None = None,
) -> Recorded:
    importance, inputs = importance_of(event, config.profile_for(event.agent_type))
    destination = destination_for(importance, config.episodic_threshold)
    memory = MemoryRecorded(
        event_id=derived_event_id(event.event_id, "recorded"),
        memory_id=memory_id_for(event.event_id),
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
        **agent_event_fields(event),
    )
    forgotten: list[MemoryForgotten] = []
    working, episodic = state.working, state.episodic
    if destination == "working":
        working = (*working, memory.memory_id)
        while len(working) > config.working_capacity:
            forgotten.append(_forget(working[0], "working", memory, config_version))
            working = working[1:]
    else:
        episodic = (*episodic, EpisodicEntry(importance, memory.seq, memory.memory_id))
        if len(episodic) > config.episodic_capacity:
            ranked = sorted(episodic, key=lambda e: (e.importance, e.seq))
            excess = ranked[: len(episodic) - config.episodic_capacity]
            gone = {e.memory_id for e in excess}
            forgotten.extend(
                _forget(e.memory_id, "episodic", memory, config_version) for e in excess
            )
            episodic = tuple(e for e in episodic if e.memory_id not in gone)
    new_state = AgentMemoryState(next_seq=state.next_seq + 1, working=working, episodic=episodic)
    return Recorded(memory=memory, forgotten=tuple(forgotten), state=new_state)
