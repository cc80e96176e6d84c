"""What the processors derive (memories recorded, promoted, summarised and forgotten, and the
year-end consolidation record), plus the schedule ticks and retrieval records they read
(schema version 1 each, unless a class says otherwise).

Projections are functions of these events alone (streams/README.md, invariant 7), so they carry
everything a projection needs, the embedding included: a replay never re-embeds.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Annotated, Any, Literal, assert_never

import numpy as np
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from schemas.derived_fields import Embedding, SourcePosition, decode_vector, encode_vector
from schemas.envelope import AgentId, Event, EventId, Tag
from schemas.learned_events import (
    FactAccessed,
    FactStated,
    LearnedChange,
    MemoryRated,
    PlanChanged,
    ProcedureChanged,
)

Destination = Literal["working", "episodic"]

MEMORY_NAMESPACE = uuid.UUID("3f0c8a52-6d0b-4b8e-9a51-2a4f9f5c0e11")
"""Namespace of the deterministic ids: the same source event always yields the same memory id."""


def memory_id_for(agent_id: str, source_event_id: str) -> str:
    """The memory id (and Qdrant point id) of the memory recorded from one agent event.

    Scoped by the agent: producers choose event ids on their own (``turn-1``, ``D1:1``), so two
    agents may well use the same one, and an id of the event alone would make the second
    agent's memory overwrite the first's in a store shared by every agent. Agent ids cannot hold
    ``/``, so the pair maps to one name only."""
    return name_uuid(f"{agent_id}/{source_event_id}")


def derived_event_id(source_event_id: str, what: str) -> str:
    return name_uuid(f"{what}:{source_event_id}")


_NAMESPACE_BYTES = MEMORY_NAMESPACE.bytes


def name_uuid(name: str) -> str:
    """``str(uuid.uuid5(MEMORY_NAMESPACE, name))``, the same text at a third of the cost: every
    derived event takes one or two, and ``uuid.UUID`` spends most of it checking its input."""
    digest = bytearray(hashlib.sha1(_NAMESPACE_BYTES + name.encode("utf-8")).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    x = digest.hex()
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"


class ImportanceInputs(BaseModel):
    """Why a memory got its importance: the audit trail of the score (seeds 003 and 004)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: Literal["explicit", "event_table", "emotion_source"]
    table_key: str | None = None
    emotion: str | None = None
    emotion_weight: float | None = None
    source: str | None = None
    source_weight: float | None = None


CognitiveSystem = Literal["SYSTEM_1", "SYSTEM_2"]
"""Habit (low arousal) or deliberation (high arousal): seed 003, sections 2b (P1) and 3.1."""

SymbolCount = tuple[str, int]
"""A symbol (a signature, an action) and how many times it was seen."""

TransitionCount = tuple[str, str, int]
"""A previous action, the action that followed it, and how many times it did."""


class EmaState(BaseModel):
    """The expectation of the EMA strategy (seed 003, section 3.1); None before any stimulus."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    strategy: Literal["ema"] = "ema"
    expectation: float | None = None
    observations: int = Field(default=0, ge=0)


class SymbolicState(BaseModel):
    """How often each signature was seen (seed 003, section 4). ``seen`` is ordered from the
    least recently seen to the most recently seen, which breaks ties when the table is full."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    strategy: Literal["symbolic"] = "symbolic"
    observations: int = Field(default=0, ge=0)
    seen: tuple[SymbolCount, ...] = ()
    period: int | None = None
    """The simulation time (year, else step) of the situation being observed: every event of
    one time adds to one situation, counted in ``seen`` once the next time begins (None: each
    event is a situation of its own)."""
    situation: tuple[str, ...] = ()
    """The ``NAME:LEVEL`` parts of that situation so far, sorted."""


class ConsistencyState(BaseModel):
    """The agent's action history for decision-consistency surprise (seed 003, section 2b):
    how often each action was taken and (bigram mode) how often each followed another, both
    ordered from the least to the most recently seen."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    strategy: Literal["decision_consistency"] = "decision_consistency"
    observations: int = Field(default=0, ge=0)
    actions: tuple[SymbolCount, ...] = ()
    previous: str | None = None
    transitions: tuple[TransitionCount, ...] = ()


SurpriseState = Annotated[
    EmaState | SymbolicState | ConsistencyState, Field(discriminator="strategy")
]
"""What a surprise strategy needs to continue: a worker that folds the log back restores it
from the agent's latest reading."""


class SurpriseReading(BaseModel):
    """How surprising one agent event was, the arousal it left, and the state after it.

    Computed by the processor from the agent's own stream (``processors.surprise``) and carried
    on the event's :class:`MemoryRecorded`, so the log alone rebuilds it. ``observed`` is what
    the strategy looked at (the stimulus, the signature or the action); ``expectation`` the EMA
    expectation it was compared with (None for the very first stimulus), ``probability`` the
    probability the frequency strategies gave it: together the trace of seed 003's P1
    ``get_surprise_trace()``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    strategy: Literal["ema", "symbolic", "decision_consistency"]
    observed: str | float
    expectation: float | None = None
    probability: float | None = Field(default=None, ge=0.0, le=1.0)
    surprise: float = Field(ge=0.0, le=1.0)
    arousal: float = Field(ge=0.0, le=1.0)
    threshold: float = Field(ge=0.0, le=1.0)
    system: CognitiveSystem
    state: SurpriseState


Level = Literal[0, 1, 2]
"""0: a memory of one event; 1: an L1 session summary; 2: an L2 chapter summary (seed 001)."""


class MemoryWritten(Event):
    """Fields shared by every event that puts a memory into a projection.

    Recorded, promoted and summarised memories all carry the whole memory, embedding included, so a
    projection applies any of them without reading anything else (streams/README.md, invariant 7).
    """

    memory_id: str
    agent_type: str
    source_event_id: EventId = Field(
        description="The agent event remembered, or the event that triggered a summary."
    )
    source_event_type: str
    source_position: SourcePosition | None = None
    seq: int = Field(ge=0, description="Per-agent order of recording, for FIFO and recency.")
    content: str
    tags: tuple[Tag, ...] = ()
    kind: str | None = None
    importance: float = Field(ge=0.0, le=1.0)
    destination: Destination
    level: Level = 0
    embedding: Embedding
    embedder: str
    config_version: str

    def vector(self) -> np.ndarray:
        return decode_vector(self.embedding)


class MemoryRecorded(MemoryWritten):
    """A memory of one agent event entered working or episodic memory.

    Version 2: a symbolic surprise state may carry the situation being observed
    (:class:`SymbolicState` ``period`` and ``situation``), which a reader of version 1 would
    refuse; a version-1 payload reads as it is."""

    schema_version: int = 2
    event_type: Literal["memory.recorded"] = "memory.recorded"
    scoring: ImportanceInputs
    surprise: SurpriseReading | None = Field(
        default=None,
        description="Set when the agent type's surprise strategy read this event; absent in "
        "events from before surprise, and for events the strategy does not read.",
    )


class PromotionDecision(BaseModel):
    """Why a working memory was promoted: the audit of seed 004 section 9.3.

    ``threshold``: importance at or above the promotion threshold (004 section 4.3, 0.7).
    ``burn``: importance at or above the consolidation gate (003, 0.6) and a draw below the burn
    probability (003, 0.8); ``draw`` is seeded from the memory's source event id.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    rule: Literal["threshold", "burn"]
    consolidated_year: int
    draw: float | None = None


class MemoryPromoted(MemoryWritten):
    """A copy of a working memory entered episodic memory at year end (seed 004 section 4.3).

    The working memory stays where it is and leaves by FIFO, as in the seed; the copy has its
    own memory id, so the two projections never fight over one id, and keeps the original's
    ``seq`` and ``source_event_id`` (retrieval shows the experience once).
    """

    event_type: Literal["memory.promoted"] = "memory.promoted"
    promoted_from: str
    decision: PromotionDecision


SummaryTrigger = Literal["step", "year", "tick", "chapter"]


class MemorySummarised(MemoryWritten):
    """An L1 session summary of recent working memories, or an L2 chapter summary of L1s
    (seed 001). ``summarises`` names the memories it came from."""

    event_type: Literal["memory.summarised"] = "memory.summarised"
    summarises: tuple[str, ...] = Field(min_length=1)
    covers_upto_seq: int = Field(
        ge=0, description="The highest seq of the memories it summarises; the next L1 starts above."
    )
    summariser: str
    trigger: SummaryTrigger


class ConsolidationOutcome(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    memory_id: str
    importance: float
    outcome: Literal["promoted", "burned", "below_gate"]
    """``burned``: passed the gate, but the draw was at or above the burn probability."""
    draw: float | None = None


class ConsolidationCompleted(Event):
    """The year-end consolidation of one agent: what was considered and what was promoted.

    The audit record of seed 004 section 9.3; it also lets a worker that folds the log know
    which memories were already considered, so a replay never draws for them again.
    """

    event_type: Literal["memory.consolidated"] = "memory.consolidated"
    consolidated_year: int
    considered: tuple[ConsolidationOutcome, ...]
    promoted: tuple[str, ...] = Field(description="Memory ids of the episodic copies.")
    working_after: int = Field(ge=0)
    episodic_after: int = Field(ge=0)
    caused_by: EventId
    source_position: SourcePosition | None = None
    config_version: str


class MusBreakdown(BaseModel):
    """The Memory Utility Score of seed 001 and its parts, as computed at the pruning."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    score: float
    retrieval_frequency: float
    relevance: float
    recency: float
    threshold: float
    retrievals: int = Field(ge=0)
    age: float = Field(ge=0.0)
    age_unit: Literal["steps", "years", "seconds"]


ForgetReason = Literal["capacity", "utility"]


class MemoryForgotten(Event):
    """A memory left a projection. It stays in the log; only the read models drop it."""

    schema_version: int = 2
    """Version 2 added ``seq``."""
    event_type: Literal["memory.forgotten"] = "memory.forgotten"
    memory_id: str
    seq: int | None = Field(
        default=None,
        description="The seq of the memory forgotten (None before version 2). A store that "
        "holds a later memory under the same id (its event id used again once this one was "
        "forgotten) keeps it when this forgetting is applied again.",
    )
    destination: Destination
    reason: ForgetReason
    level: Level = 0
    caused_by: EventId = Field(
        description="The event whose processing forgot it: a recording, promotion or trigger."
    )
    source_position: SourcePosition | None = None
    mus: MusBreakdown | None = Field(default=None, description="Set when reason is utility.")
    config_version: str


class AgentForgotten(Event):
    """Every memory of an agent left every projection, and its sealing keys were deleted.

    Derived from a :class:`ForgetAgent` command by the worker that owns the agent's partition,
    in log order, so whatever the agent published before the command is applied first and
    erased by this. It carries no content (it must stay readable once the keys are gone); the
    agent's sealed events before it can no longer be decrypted, so a replay skips them and
    then applies this, which erases nothing more (deploy/README.md, "Forgetting an agent").
    """

    schema_version: int = 2
    event_type: Literal["memory.agent_forgotten"] = "memory.agent_forgotten"
    key_ids: tuple[str, ...] = ()
    """The agent's sealing keys deleted with it."""
    next_seq: int | None = Field(default=None, ge=0)
    """The agent's next ``seq`` when it was forgotten: what it records after continues from
    here, so a reader of the log tells its earlier life (``seq`` below) from its next one
    (:func:`processors.emission_order.causal_order`). None in a version-1 erasure."""
    requested_at: AwareDatetime
    caused_by: EventId = Field(description="The ForgetAgent command's event id.")
    source_position: SourcePosition | None = None


MemoryPut = MemoryRecorded | MemoryPromoted | MemorySummarised
"""The events that put a memory into a projection."""

DerivedEvent = (
    MemoryRecorded
    | MemoryPromoted
    | MemorySummarised
    | MemoryForgotten
    | ConsolidationCompleted
    | AgentForgotten
    | ProcedureChanged
    | PlanChanged
    | FactStated
    | MemoryRated
    | FactAccessed
)

DerivedTopic = Literal["items", "lifecycle"]
"""The two topics derived events are logged on: ``memory.items`` and ``memory.lifecycle``."""


def derived_topic_of(event: DerivedEvent) -> DerivedTopic:
    """The derived topic ``event`` is logged on: recordings on ``memory.items``, everything else
    on ``memory.lifecycle``. The one place that says so: the worker sends by it, and the
    markers and every reader of the log tell the two topics' events apart by it. A type this
    match does not name fails mypy, and raises here at run time."""
    match event:
        case MemoryRecorded():
            return "items"
        case (
            MemoryPromoted()
            | MemorySummarised()
            | MemoryForgotten()
            | ConsolidationCompleted()
            | AgentForgotten()
            | LearnedChange()
        ):
            return "lifecycle"
        case _:
            assert_never(event)


class LogRange(BaseModel):
    """Offsets ``first`` to ``last`` (both included) of one partition of a derived topic."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    first: int = Field(ge=0)
    last: int = Field(ge=0)

    def __contains__(self, offset: object) -> bool:
        return isinstance(offset, int) and self.first <= offset <= self.last


class DerivedUpTo(BaseModel):
    """A worker logged everything one batch derived from these source records ("logged up to").

    The last record a worker writes for a batch, on ``memory.lifecycle`` at ``partition``, once
    the broker took every derived event and dead letter of the batch. It names where the
    batch's events landed (``items``, ``lifecycle``: the producer's offsets), and only events
    there count: what an attempt cut short by a crash logged is left out by every reader of the
    log, and the batch is derived again (the fold, takeover, replay; see
    :mod:`processors.batch_markers`), possibly with other outcomes, since a redelivery may
    cut the batch elsewhere.

    Not an :class:`~schemas.envelope.Event` nor part of :data:`DerivedEvent`: it concerns a
    partition, not an agent (no ``agent_id``, as :class:`ScheduleTick`), and changes no memory,
    so the fold and the projections' ``apply`` never see it; stores move their applied marks
    with it (``advance``). Its id is random: two markers of the same records (a batch done
    again after a takeover) are both true.

    A worker also writes one before its first batch of a partition number that has none,
    covering what the log held before markers existed (by the older rule: ``upto`` then holds
    the highest source offsets with a recording) or nothing: from then on markers rule it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = 1
    event_type: Literal["memory.logged"] = "memory.logged"
    event_id: EventId
    occurred_at: AwareDatetime
    partition: int = Field(ge=0, description="The partition number of the batch's sources.")
    upto: tuple[SourcePosition, ...] = Field(
        description="Per source topic of that partition number, the highest offset of the "
        "batch: every record, including those that derived nothing or were skipped.",
    )
    items: LogRange | None = Field(
        default=None, description="Where the batch's recordings are in memory.items[partition]."
    )
    lifecycle: LogRange | None = Field(
        default=None,
        description="Where the batch's other events are in memory.lifecycle[partition].",
    )

    def covers(self, where: SourcePosition, event: DerivedEvent) -> bool:
        """Whether ``event``, read at ``where`` in the derived log, is one of this batch's."""
        logged = self.items if derived_topic_of(event) == "items" else self.lifecycle
        source = event.source_position
        if logged is None or where.partition != self.partition or where.offset not in logged:
            return False
        if source is None:
            return True
        return any(
            (p.topic, p.partition) == (source.topic, source.partition) and source.offset <= p.offset
            for p in self.upto
        )


DerivedRecord = DerivedEvent | DerivedUpTo
"""What ``memory.items`` and ``memory.lifecycle`` hold."""


class ScheduleTick(BaseModel):
    """A wall-clock tick on ``memory.schedule``, one per partition per interval.

    Its own time is what the lifecycle rules read, never the processor's clock, so a replay
    of the tick decides the same (streams/README.md, invariant 2).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = 1
    event_type: Literal["schedule.tick"] = "schedule.tick"
    event_id: EventId
    occurred_at: AwareDatetime
    partition: int = Field(ge=0)
    interval_seconds: float = Field(gt=0)


class ForgetAgent(BaseModel):
    """A request to forget an agent (``engram forget-agent``), on ``memory.schedule`` at the
    agent's partition so the worker owning the agent handles it in order with its events.

    ``key_ids`` are the agent's sealing keys when it was requested; keys made afterwards (the
    agent publishing again) belong to a new life of the agent and are kept.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = 1
    event_type: Literal["agent.forget"] = "agent.forget"
    event_id: EventId
    agent_id: AgentId
    requested_at: AwareDatetime
    key_ids: tuple[str, ...] = ()
    reason: str | None = Field(default=None, max_length=500)


RetrievedStore = Literal["working", "episodic", "facts"]
"""Where a retrieved item was: a memory's store, or the agent's facts (a facts read)."""

FACTS_READ_MODE = "facts"
"""The ``mode`` of a :class:`MemoryRetrieved` that records a facts read with a query (seed
000's ``search``): one item per fact returned, its ``memory_id`` the fact id, its store
``facts``."""


class RetrievedItem(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    memory_id: str = Field(description="The memory's id; in a facts read, the fact's.")
    rank: int = Field(ge=1)
    score: float
    store: RetrievedStore
    level: Level = 0
    breakdown: dict[str, Any] | None = None
    """The score's parts as the answer gave them (the mode's breakdown): why this memory ranked
    here, kept for the audit. None in records written before it was added."""


class MemoryRetrieved(Event):
    """One retrieval, as the query service answered it: the audit trail of seed 004 section 8.3,
    the retrieval frequency and relevance that MUS pruning reads (seed 001), and (mode
    :data:`FACTS_READ_MODE`) a search of the agent's facts, which counts their use (seed 000).

    Version 2: an item's ``store`` may be ``facts``, which a reader of version 1 would refuse;
    a version-1 payload reads as it is. A record is written at the lowest version that holds
    it (:meth:`_lowest_version`)."""

    schema_version: int = 2
    event_type: Literal["memory.retrieved"] = "memory.retrieved"
    mode: str
    parameters: dict[str, Any]
    results: tuple[RetrievedItem, ...]
    took_ms: float = Field(ge=0.0)

    @model_validator(mode="before")
    @classmethod
    def _lowest_version(cls, data: Any) -> Any:
        """Version 1 unless an item is a fact: a worker of version 1 then still reads every
        retrieval of memories, and only searches of facts wait for workers that know them
        (a rolling upgrade that reaches the query services first loses no summary's use)."""
        if isinstance(data, dict) and "schema_version" not in data:
            items = data.get("results") or ()
            facts = any(
                (item.get("store") if isinstance(item, dict) else getattr(item, "store", None))
                == "facts"
                for item in items
            )
            data = {**data, "schema_version": 2 if facts else 1}
        return data


__all__ = [
    "FACTS_READ_MODE",
    "AgentForgotten",
    "AwareDatetime",
    "CognitiveSystem",
    "ConsistencyState",
    "ConsolidationCompleted",
    "ConsolidationOutcome",
    "DerivedEvent",
    "DerivedRecord",
    "DerivedTopic",
    "DerivedUpTo",
    "Destination",
    "EmaState",
    "Embedding",
    "ForgetAgent",
    "ImportanceInputs",
    "Level",
    "LogRange",
    "MemoryForgotten",
    "MemoryPromoted",
    "MemoryPut",
    "MemoryRecorded",
    "MemoryRetrieved",
    "MemorySummarised",
    "MemoryWritten",
    "MusBreakdown",
    "PromotionDecision",
    "RetrievedItem",
    "RetrievedStore",
    "ScheduleTick",
    "SourcePosition",
    "SurpriseReading",
    "SurpriseState",
    "SymbolicState",
    "decode_vector",
    "derived_event_id",
    "derived_topic_of",
    "encode_vector",
    "memory_id_for",
]
