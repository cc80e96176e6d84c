"""The read model of one memory, as the projections store it and retrieval scores it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from schemas.memory_events import Destination, MemoryWritten


class StoredMemory(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    memory_id: str
    agent_id: str
    agent_type: str = "default"
    content: str
    importance: float
    destination: Destination
    seq: int
    occurred_at: datetime
    step: int | None = None
    year: int | None = None
    tags: tuple[str, ...] = ()
    kind: str | None = None
    source_event_id: str
    source_event_type: str
    level: int = Field(
        default=0,
        description="0 a memory of one event, 1 an L1 session summary, 2 an L2 chapter summary.",
    )
    similarity: float | None = None
    """Cosine similarity to the query vector, when the store was searched with one."""
    lexical: float | None = None
    """The keyword score of a hybrid search (``processors/lexical.py``: the sum over the stems
    the memory shares with the query of IDF x BM25 term weight); None when the memory was not
    among the lexical matches or no query text was given."""

    @classmethod
    def from_event(cls, event: MemoryWritten) -> StoredMemory:
        """What a store holds for a recorded, promoted or summarised memory: all three are
        one read model, so retrieval ranks them together."""
        return cls(
            memory_id=event.memory_id,
            agent_id=event.agent_id,
            agent_type=event.agent_type,
            content=event.content,
            importance=event.importance,
            destination=event.destination,
            seq=event.seq,
            occurred_at=event.occurred_at,
            step=event.step,
            year=event.year,
            tags=event.tags,
            kind=event.kind,
            source_event_id=event.source_event_id,
            source_event_type=event.source_event_type,
            level=event.level,
        )

    def payload(self) -> dict[str, Any]:
        """JSON-ready fields, without the query-time scores."""
        return self.model_dump(mode="json", exclude=set(QUERY_FIELDS))


QUERY_FIELDS = frozenset({"similarity", "lexical"})
"""What a search adds to a memory; never stored."""
PAYLOAD_FIELDS = tuple(name for name in StoredMemory.model_fields if name not in QUERY_FIELDS)
_missing = [name for name in PAYLOAD_FIELDS if name not in MemoryWritten.model_fields]
if _missing:
    raise ImportError(f"StoredMemory fields that MemoryWritten lacks: {_missing}")


def memory_json(event: MemoryWritten) -> bytes:
    """The JSON of ``StoredMemory.from_event(event).payload()``, without building the model.

    Validating a StoredMemory and dumping it costs ~8 us per memory against ~2.4 us for this;
    both stores write it on the hot path, and their tests check what is read back equals
    ``StoredMemory.from_event``.
    """
    return orjson.dumps(
        {name: getattr(event, name) for name in PAYLOAD_FIELDS}, option=orjson.OPT_UTC_Z
    )


def point_payload(event: MemoryWritten, *, active: bool = True, lexical: bool) -> dict[str, Any]:
    """The payload of a Qdrant point: the fields filters and ordering need, and the memory as
    one JSON string.

    ``tags_lc`` holds the tags casefolded, for the case-insensitive tag filter of a search;
    ``occurred_ts`` the event's time in seconds since the epoch, for time ranges and the wall
    clock's recency; ``archived`` 1 marks a memory kept in the archive only (an integer: Qdrant
    Edge matches no boolean value).

    Qdrant Edge converts a payload field by field across the Rust boundary (~3 us a field), so
    one string for the whole memory is several times cheaper than the 15 fields of a memory,
    and a field without a value is left out rather than stored as null or []: a filter on a
    missing field matches nothing, as one on null or [] does, and every point costs less. A list
    costs the most (~9 us for two tags, in Edge): ``tags``, the tags as given, is written only
    to a store built before hybrid search (``lexical`` False), whose tag filter reads it; the
    others filter on ``tags_lc`` and read the tags from the memory's JSON.
    """
    payload: dict[str, Any] = {
        "agent_id": event.agent_id,
        "seq": event.seq,
        "level": event.level,
        "importance": event.importance,
        "occurred_ts": event.occurred_at.timestamp(),
        "archived": 0 if active else 1,
        "memory": memory_json(event).decode(),
    }
    if event.year is not None:
        payload["year"] = event.year
    if event.step is not None:
        payload["step"] = event.step
    if event.tags:
        if not lexical:
            payload["tags"] = list(event.tags)
        payload["tags_lc"] = sorted({tag.casefold() for tag in event.tags})
    return payload


_SCORED = frozenset({"similarity"})
STORED_FIELDS: tuple[str, ...] = tuple(StoredMemory.model_fields)
"""The fields of a memory in declaration order: :func:`field_values` and
:func:`memory_of_values` speak in this order."""


def with_similarity(memory: StoredMemory, similarity: float) -> StoredMemory:
    """A copy of ``memory`` carrying a search's cosine: what ``model_copy(update=...)`` makes
    (a shallow copy, no validation), built directly. A retrieval copies a few hundred decoded
    candidates, and pydantic's generic copy (private attributes, extras, ``copy.copy`` of each
    part) was ~7% of a query service's CPU on relevance reads: 1.8 us a copy against 0.7."""
    fields = dict(memory.__dict__)
    fields["similarity"] = similarity
    return _built(fields, memory.model_fields_set | _SCORED)


def field_values(memory: StoredMemory) -> tuple[Any, ...]:
    """A memory's field values, in :data:`STORED_FIELDS` order: a plain tuple of strings,
    numbers, datetimes and tuples of strings, which Python's cycle collector stops tracking,
    whereas a model (an object, its ``__dict__``, its set of fields) stays tracked and makes
    every full collection longer (measured in process, with some 14,000 decoded memories kept:
    a full collection took 91 ms with them kept as models, 71 ms as tuples)."""
    fields = memory.__dict__
    return tuple(fields[name] for name in STORED_FIELDS)


def memory_of_values(
    values: tuple[Any, ...], fields_set: frozenset[str], similarity: float | None = None
) -> StoredMemory:
    """The memory of :func:`field_values`, as validated before (``fields_set`` its
    ``model_fields_set``), with a search's cosine when given."""
    fields = dict(zip(STORED_FIELDS, values, strict=True))
    if similarity is not None:
        fields["similarity"] = similarity
        fields_set = fields_set | _SCORED
    return _built(fields, fields_set)


_new_object = object.__new__
_set_attribute = object.__setattr__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def _built(fields: dict[str, Any], fields_set: frozenset[str] | set[str]) -> StoredMemory:
    """A model from fields already valid, as pydantic's own copy builds one. Its slots are set
    through their descriptors, looked up once: a relevance read builds a few hundred memories,
    and ``object.__setattr__`` by name took 0.69 us a memory against 0.32 (timeit)."""
    memory = _new_object(StoredMemory)
    _set_attribute(memory, "__dict__", fields)
    _set_fields_set(memory, set(fields_set))
    _set_extra(memory, None)
    _set_private(memory, None)
    return memory


def memory_from_point(
    payload: Any, similarity: float | None = None, lexical: float | None = None
) -> StoredMemory:
    """The memory of a point's payload, with a search's scores. The scores go into the data
    validated rather than onto a copy: a retrieval reads a few hundred candidates, and the copy
    cost ~4 us each."""
    if similarity is None and lexical is None:
        return StoredMemory.model_validate_json(payload["memory"])
    data = orjson.loads(payload["memory"])
    data["similarity"] = similarity
    data["lexical"] = lexical
    return StoredMemory.model_validate(data)
