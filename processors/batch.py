"""One batch of raw records from the agent topics to derived events and dead letters.

Pure: the caller supplies a loader of per-agent states and gets the new ones back, so the
Faust shell,
the benchmarks and a reprocess all run exactly this code. A record that cannot be decoded
becomes a :class:`DeadLetter` with the reason; the records around it are processed normally.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from processors.config import ProcessingConfig
from processors.embedding import Embedder
from processors.recording import AgentMemoryState, record
from schemas.codec import DecodeError, decode_agent_event
from schemas.deadletter import DeadLetter
from schemas.memory_events import DerivedEvent, SourcePosition


@dataclass(frozen=True)
class RawRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    expected_type: str | None = None
    """The event type the topic carries; an event of another type there is refused."""


@dataclass
class BatchResult:
    derived: list[DerivedEvent] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    states: dict[str, AgentMemoryState] = field(default_factory=dict)
    """Only the states of agents this batch touched."""


def process_batch(
    records: Sequence[RawRecord],
    load_state: Callable[[str], AgentMemoryState],
    *,
    config: ProcessingConfig,
    embedder: Embedder,
    config_version: str,
    failed_at: datetime,
) -> BatchResult:
    result = BatchResult()
    for raw in records:
        position = SourcePosition(topic=raw.topic, partition=raw.partition, offset=raw.offset)
        try:
            if raw.value is None:
                raise DecodeError("empty", "record has no value (a tombstone?)")
            event = decode_agent_event(raw.value, expected_type=raw.expected_type)
        except DecodeError as exc:
            result.dead_letters.append(
                DeadLetter(
                    reason=exc.reason,
                    error_kind=exc.kind,
                    topic=raw.topic,
                    partition=raw.partition,
                    offset=raw.offset,
                    key_b64=DeadLetter.b64(raw.key),
                    value_b64=DeadLetter.b64(raw.value) or "",
                    failed_at=failed_at,
                )
            )
            continue
        agent = event.agent_id
        state = result.states.get(agent) or load_state(agent)
        outcome = record(
            event,
            state,
            config=config,
            embedder=embedder,
            config_version=config_version,
            position=position,
        )
        result.states[agent] = outcome.state
        result.derived.append(outcome.memory)
        result.derived.extend(outcome.forgotten)
    return result
