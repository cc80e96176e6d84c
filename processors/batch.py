"""One batch of raw records (agent events, schedule ticks, retrievals) to derived events and
dead letters.

Pure: the caller supplies a loader of per-agent states and gets the new ones back, so the
Faust shell, the benchmarks and a reprocess all run exactly this code. A record that cannot be
decoded becomes a :class:`DeadLetter` with the reason; the records around it are processed normally.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import Literal, Protocol, assert_never

from processors.batch_embedding import PreparedEmbedder
from processors.fact_access import is_facts_read, on_facts_read
from processors.learning import learn, still_learned_from
from processors.lifecycle import Deriving, on_agent_event, on_retrieval, on_tick
from processors.recording import AgentMemoryState
from schemas.agent_events import AgentEvent, Decision, Feedback, Observation
from schemas.codec import (
    DecodeError,
    RecordOrigin,
    decode_agent_event,
    decode_retrieval,
    decode_schedule,
)
from schemas.deadletter import DeadLetter
from schemas.memory_events import (
    AgentForgotten,
    DerivedEvent,
    ForgetAgent,
    MemoryRetrieved,
    ScheduleTick,
    SourcePosition,
    derived_event_id,
    memory_id_for,
)

RecordKind = Literal["agent", "tick", "retrieval"]

MAX_KEPT_BYTES = 128 * 1024
"""How much of a poison record's key and of its value a dead letter copies. A producer refuses
records above ~1 MB, and base64 makes a copy a third larger: a letter holding all of a record
near that size could never be written, and the worker would stop on it at every restart. The
whole record stays on its topic, at the position the letter names."""


@dataclass(frozen=True)
class RawRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    expected_type: str | None = None
    """The event type an agent topic carries; an event of another type there is refused."""
    kind: RecordKind = "agent"
    """Agent events, ticks from ``memory.schedule``, or retrievals from ``memory.access``."""
    timestamp_ms: int | None = None
    """The record's timestamp in the log: the time of an agent event that gives none."""

    @property
    def origin(self) -> RecordOrigin:
        return RecordOrigin(self.topic, self.partition, self.offset, self.timestamp_ms)


FORGOTTEN = "forgotten"
"""The :class:`DecodeError` kind of a record sealed with a forgotten agent's deleted key."""


class RecordOpener(Protocol):
    """Turns a record's value into event bytes: the identity, or :mod:`streams.privacy.sealing`,
    which decrypts sealed records (keys fetched before the batch) and raises ``forgotten``."""

    def open(self, raw: bytes) -> bytes: ...

    def forget(self, agent_id: str, key_ids: Iterable[str]) -> None:
        """Records of these keys later in the batch are forgotten too."""


class PlainRecords:
    """Records as they are: for logs written without a keyring."""

    def open(self, raw: bytes) -> bytes:
        return raw

    def forget(self, agent_id: str, key_ids: Iterable[str]) -> None:
        return None


@dataclass
class BatchResult:
    derived: list[DerivedEvent] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    states: dict[str, AgentMemoryState] = field(default_factory=dict)
    """Only the states of agents this batch touched."""
    forgotten_agents: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Agents a ``ForgetAgent`` command of this batch forgot, with the key ids to delete; their
    states are dropped (and absent from ``states``)."""
    forgotten_records: int = 0
    """Records skipped because their agent's key was deleted."""


def _decode(
    raw: RawRecord, opener: RecordOpener, placement: Callable[[str], int] | None
) -> AgentEvent | ScheduleTick | ForgetAgent | MemoryRetrieved:
    if raw.value is None:
        raise DecodeError("empty", "record has no value (a tombstone?)")
    value = opener.open(raw.value)
    match raw.kind:
        case "tick":
            return decode_schedule(value)
        case "retrieval":
            return decode_retrieval(value)
        case "agent":
            event = decode_agent_event(value, expected_type=raw.expected_type, origin=raw.origin)
            _check_placed(raw, event.agent_id, placement)
            return event
        case _:
            assert_never(raw.kind)


def _check_placed(raw: RawRecord, agent_id: str, placement: Callable[[str], int] | None) -> None:
    """An agent event is keyed by its agent id, which puts every event of the agent on one
    partition: its state is folded per partition, and its history read from that partition
    alone. One keyed otherwise, or not keyed, or placed by another partitioner than murmur2
    (librdkafka's default, crc32), landed elsewhere and split the agent (memories missing from
    its history, its working memory out of order, the wrong ones evicted after a takeover)."""
    key = raw.key
    if key is None:
        raise DecodeError(
            "misplaced", f"an event of agent {agent_id!r} without a key: key it by the agent id"
        )
    if key != agent_id.encode():
        shown = key[:200].decode("utf-8", "replace")
        raise DecodeError(
            "misplaced",
            f"an event of agent {agent_id!r} keyed {shown!r}: key it by the agent id",
        )
    if placement is not None and (home := placement(agent_id)) != raw.partition:
        raise DecodeError(
            "misplaced",
            f"an event of agent {agent_id!r} on partition {raw.partition}: its events belong on "
            f"partition {home}, where Kafka's default partitioner (murmur2 of the key) puts "
            "them (with kcat or librdkafka: -X topic.partitioner=murmur2_random)",
        )


def _decode_agent_events(
    records: Sequence[RawRecord], opener: RecordOpener, placement: Callable[[str], int] | None
) -> dict[int, AgentEvent | DecodeError]:
    """The batch's agent events decoded ahead (by index), so their texts are embedded in one
    call (:mod:`processors.batch_embedding`) before the rules run one event at a time."""
    early: dict[int, AgentEvent | DecodeError] = {}
    for index, raw in enumerate(records):
        if raw.kind != "agent":
            continue
        try:
            event = _decode(raw, opener, placement)
        except DecodeError as exc:
            early[index] = exc
            continue
        assert isinstance(event, Observation | Decision | Feedback)
        early[index] = event
    return early


def _prepared(ctx: Deriving) -> PreparedEmbedder:
    embedder = ctx.embedder
    return embedder if isinstance(embedder, PreparedEmbedder) else PreparedEmbedder(embedder)


def agent_forgotten(
    command: ForgetAgent, position: SourcePosition, next_seq: int
) -> AgentForgotten:
    """What a forget command derives: deterministic, so a redelivered command logs the same."""
    return AgentForgotten(
        event_id=derived_event_id(command.event_id, "agent_forgotten"),
        agent_id=command.agent_id,
        occurred_at=command.requested_at,
        key_ids=command.key_ids,
        requested_at=command.requested_at,
        caused_by=command.event_id,
        source_position=position,
        next_seq=next_seq,
    )


def _kept(data: bytes | None) -> bytes | None:
    return None if data is None else data[:MAX_KEPT_BYTES]


MAX_REASON_CHARS = 2_000
"""A reason quotes the input it refuses (an unknown event_type, a field's name): a record can
make it as long as itself, and a letter past the broker's request size stopped the worker
(exit 70) on that record at every restart."""


def _bounded(reason: str) -> str:
    if len(reason) <= MAX_REASON_CHARS:
        return reason
    return f"{reason[:MAX_REASON_CHARS]}... ({len(reason) - MAX_REASON_CHARS:,} characters cut)"


def _cut_note(raw: RawRecord) -> str:
    cut = [
        f"{name} ({len(data):,} bytes)"
        for name, data in (("key", raw.key), ("value", raw.value))
        if data is not None and len(data) > MAX_KEPT_BYTES
    ]
    if not cut:
        return ""
    return (
        f"; this letter keeps the first {MAX_KEPT_BYTES:,} bytes of the {' and '.join(cut)}, "
        f"the whole record is {raw.topic}[{raw.partition}]@{raw.offset}"
    )


def process_batch(
    records: Sequence[RawRecord],
    load_state: Callable[[str], AgentMemoryState],
    *,
    ctx: Deriving,
    failed_at: datetime,
    agents_of_partition: Callable[[int], Iterable[str]] = lambda _: (),
    opener: RecordOpener | None = None,
) -> BatchResult:
    """Derive from a batch in record order. ``agents_of_partition`` names the agents a tick
    of that partition concerns, besides those this batch already touched.

    With an embedder whose calls are dear, the texts the rules make are answered with
    placeholders, one call embeds them after, and their rows take the placeholders' places
    (:mod:`processors.batch_embedding`). That pass keeps every key (a request to forget one
    is only noted), so a batch that forgets an agent is derived again, with the keys
    forgotten and every row prepared, as is one whose placeholders cannot all be filled."""
    opener = opener or PlainRecords()
    early = _decode_agent_events(records, opener, ctx.placement)
    prepared = _prepared(ctx)
    prepared.prepare(
        event.content for event in early.values() if not isinstance(event, DecodeError)
    )
    derive = partial(
        _derive, records, early, load_state, replace(ctx, embedder=prepared), failed_at
    )
    if prepared.batches_misses and not ctx.summariser.blocking:
        with prepared.noting_misses() as misses:
            first = derive(agents_of_partition, _KeepingKeys(opener))
        prepared.add(misses)  # nothing to embed: no call
        if not first.forgotten_agents:
            filled = prepared.filled(first.derived, misses) if misses else first.derived
            if filled is not None:
                first.derived = filled
                return first
    return derive(agents_of_partition, opener)


class _KeepingKeys:
    """An opener that forgets no keys: a pass that may be derived again leaves them as they were."""

    def __init__(self, opener: RecordOpener) -> None:
        self._opener = opener

    def open(self, raw: bytes) -> bytes:
        return self._opener.open(raw)

    def forget(self, agent_id: str, key_ids: Iterable[str]) -> None:
        return None


def _derive(
    records: Sequence[RawRecord],
    early: dict[int, AgentEvent | DecodeError],
    load_state: Callable[[str], AgentMemoryState],
    ctx: Deriving,
    failed_at: datetime,
    agents_of_partition: Callable[[int], Iterable[str]],
    opener: RecordOpener,
) -> BatchResult:
    batch = _Batch(load_state, ctx, agents_of_partition, opener)
    for index, raw in enumerate(records):
        position = SourcePosition(topic=raw.topic, partition=raw.partition, offset=raw.offset)
        # What a forget command earlier in the batch forgot must not decode: decode again.
        decoded = early.get(index) if not batch.result.forgotten_agents else None
        try:
            if isinstance(decoded, DecodeError):
                raise decoded
            event = decoded or _decode(raw, batch.opener, ctx.placement)
        except DecodeError as exc:
            batch.refuse(raw, exc, failed_at)
            continue
        match event:
            case ForgetAgent():
                batch.forget(event, position)
            case ScheduleTick():
                batch.tick(event, position)
            case MemoryRetrieved():
                batch.retrieval(event, position)
            case Observation() | Decision() | Feedback():
                refusal = batch.agent_event(event, position)
                if refusal is not None:
                    batch.refuse(raw, refusal, failed_at)
            case _:
                assert_never(event)
    return batch.result


@dataclass
class _Batch:
    """One batch in progress: what it derived so far, and which agents each partition's
    records touched (a tick concerns them too)."""

    load_state: Callable[[str], AgentMemoryState]
    ctx: Deriving
    agents_of_partition: Callable[[int], Iterable[str]]
    opener: RecordOpener
    result: BatchResult = field(default_factory=BatchResult)
    touched_in: dict[int, set[str]] = field(default_factory=dict)

    def refuse(self, raw: RawRecord, exc: DecodeError, failed_at: datetime) -> None:
        """A record that does not decode: a dead letter, unless its agent was forgotten."""
        if exc.kind == FORGOTTEN:
            self.result.forgotten_records += 1
            return
        self.result.dead_letters.append(
            DeadLetter(
                reason=_bounded(exc.reason) + _cut_note(raw),
                error_kind=exc.kind,
                topic=raw.topic,
                partition=raw.partition,
                offset=raw.offset,
                key_b64=DeadLetter.b64(_kept(raw.key)),
                value_b64=DeadLetter.b64(_kept(raw.value)) or "",
                failed_at=failed_at,
            )
        )

    def forget(self, command: ForgetAgent, position: SourcePosition) -> None:
        result, agent = self.result, command.agent_id
        self.opener.forget(agent, command.key_ids)
        # Nothing of its memories is kept; its seq goes on, so its next life is told apart
        # from this one in the log by seq alone.
        next_seq = self._state_of(agent).next_seq
        result.derived.append(agent_forgotten(command, position, next_seq))
        result.states[agent] = AgentMemoryState(next_seq=next_seq)
        result.forgotten_agents[agent] = command.key_ids
        for touched in self.touched_in.values():
            touched.discard(agent)

    def tick(self, tick: ScheduleTick, position: SourcePosition) -> None:
        result, partition = self.result, position.partition
        agents = set(self.agents_of_partition(partition)) | self.touched_in.get(partition, set())
        # A forgotten agent's state here is its next life's (what it recorded since, or
        # nothing), never the one it had before the batch.
        states = {a: result.states.get(a) or self.load_state(a) for a in agents}
        derived, changed = on_tick(tick, states, self.ctx, position)
        result.derived.extend(derived)
        result.states.update(changed)

    def _state_of(self, agent: str) -> AgentMemoryState:
        """The agent's state as this batch left it (a forgotten agent's starts afresh)."""
        result = self.result
        return result.states.get(agent) or self.load_state(agent)

    def retrieval(self, retrieval: MemoryRetrieved, position: SourcePosition) -> None:
        """A retrieval of memories counts the summaries it returned (MUS); a facts read counts
        the facts it returned, each count a learned event (:mod:`processors.fact_access`)."""
        agent = retrieval.agent_id
        state = self._state_of(agent)
        if is_facts_read(retrieval):
            accessed, updated = on_facts_read(retrieval, state, self.ctx.config_version, position)
            self.result.derived.extend(accessed)
        else:
            updated = on_retrieval(retrieval, state)
        if updated is not state:
            self.result.states[agent] = updated

    def agent_event(self, event: AgentEvent, position: SourcePosition) -> DecodeError | None:
        """Derive from an agent event, or refuse it if it reuses the event id of a memory the
        agent still holds (or of a decision, plan or fact it still knows: see
        :func:`processors.learning.still_learned_from`). Recorded again, it would be a second
        memory under one id: the live projections kept the second, a rebuild the first, and
        the state and the log disagreed from then on. Once all that is forgotten, the id may
        record a new memory."""
        agent = event.agent_id
        state = self._state_of(agent)
        memory_id = memory_id_for(agent, event.event_id)
        if state.holds(memory_id) or still_learned_from(event, memory_id, state.learned):
            return DecodeError(
                "duplicate_event_id",
                f"agent {agent!r} already holds the memory of event id {event.event_id!r} "
                "(or what it learned from it): "
                "event ids must be unique per agent. A producer's retry of that event needs "
                "nothing more; another event needs publishing again under an id of its own",
            )
        outcome = on_agent_event(event, state, self.ctx, position)
        learned, state = learn(event, outcome.state, self.ctx, position)
        self.result.states[agent] = state
        self.result.derived.extend(outcome.events)
        self.result.derived.extend(learned)
        self.touched_in.setdefault(position.partition, set()).add(agent)
        return None
