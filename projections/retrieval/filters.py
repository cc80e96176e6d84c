"""Which memories a retrieval may return at all, whatever the scoring mode.

A :class:`MemoryFilter` is applied in process to what the stores returned (:meth:`admits`), so it
holds whichever store is read; a store may also filter natively to read less, but the in-process
check stays the guarantee. The kinds follow seed 000's layers: working and episodic memories,
L1/L2 summaries, and the semantic ("fact") and procedural ("procedure")
layers that no memory belongs to yet; asking for those returns nothing rather than an error, so
a caller written against the full layer set keeps working when they arrive.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from projections.memory import StoredMemory
from schemas.envelope import SimulationTime, Tag, TimeAsked
from schemas.memory_events import Level

MemoryKind = Literal["working", "episodic", "summary_l1", "summary_l2", "fact", "procedure"]

MAX_FILTER_TAGS = 64


_LEVEL_OF_KIND: dict[MemoryKind, Level] = {
    "working": 0,
    "episodic": 0,
    "summary_l1": 1,
    "summary_l2": 2,
}
"""The store level each kind lives at; "fact" and "procedure" live at none yet."""


def memory_kind(memory: StoredMemory) -> MemoryKind:
    """A summary's kind is its level, whichever store holds it; a memory of one event is the
    kind of the store it is in."""
    if memory.level == 1:
        return "summary_l1"
    if memory.level == 2:
        return "summary_l2"
    return memory.destination


class MemoryFilter(BaseModel):
    """Conditions every returned memory meets; an empty filter admits everything.

    A range whose start is after its end admits nothing, as an empty interval does: no JSON
    Schema can compare two fields, so refusing it would make a request valid by the OpenAPI
    document one the service refuses."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    tags: tuple[Tag, ...] = Field(
        default=(),
        max_length=MAX_FILTER_TAGS,
        description="Keep memories carrying any of these tags (case-insensitive); () = any tags.",
    )
    kinds: tuple[MemoryKind, ...] = Field(
        default=(),
        description=(
            "Keep memories of these kinds: working, episodic (memories of one event, by store), "
            "summary_l1, summary_l2, fact, procedure; () = every kind."
        ),
    )
    min_importance: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Keep memories at least this important."
    )
    year_from: SimulationTime | None = Field(
        default=None, description="Earliest simulation year, inclusive."
    )
    year_to: SimulationTime | None = Field(
        default=None, description="Latest simulation year, inclusive."
    )
    step_from: SimulationTime | None = Field(
        default=None, description="Earliest simulation step, inclusive."
    )
    step_to: SimulationTime | None = Field(
        default=None, description="Latest simulation step, inclusive."
    )
    occurred_after: TimeAsked | None = Field(
        default=None,
        description="Keep memories of events that occurred at or after this time "
        "(ISO 8601 with an offset), the wall clock of agents without years or steps.",
    )
    occurred_before: TimeAsked | None = Field(
        default=None, description="Keep memories of events that occurred at or before this time."
    )

    def admits(self, memory: StoredMemory) -> bool:
        """A memory without a year (step) fails any bound on years (steps): its time is unknown,
        and an imputed time would make the filter depend on the other memories read."""
        if self.kinds and memory_kind(memory) not in self.kinds:
            return False
        if self.min_importance is not None and memory.importance < self.min_importance:
            return False
        if self.tags:
            wanted = {tag.casefold() for tag in self.tags}
            if not any(tag.casefold() in wanted for tag in memory.tags):
                return False
        if self.occurred_after is not None and memory.occurred_at < self.occurred_after:
            return False
        if self.occurred_before is not None and memory.occurred_at > self.occurred_before:
            return False
        return _within(memory.year, self.year_from, self.year_to) and _within(
            memory.step, self.step_from, self.step_to
        )


def levels_for(
    memory_filter: MemoryFilter | None, levels: Sequence[Level]
) -> tuple[tuple[Level, ...], bool]:
    """The store levels to read and whether working memory must be read at all.

    Without kinds, the request's ``levels`` stand and working memory is read when level 0 is.
    Kinds, when given, decide the levels instead, being the more precise statement: each kind
    reads the level it lives at (working and episodic 0, summary_l1 1, summary_l2 2), and
    working memory is read only for kind "working". The levels may come out empty (kinds
    "fact" and "procedure" only): then nothing is read.
    """
    if memory_filter is None or not memory_filter.kinds:
        return tuple(sorted(levels)), 0 in levels
    kinds = set(memory_filter.kinds)
    wanted = {_LEVEL_OF_KIND[kind] for kind in kinds if kind in _LEVEL_OF_KIND}
    return tuple(sorted(wanted)), "working" in kinds


def _within(value: int | None, low: int | None, high: int | None) -> bool:
    if low is None and high is None:
        return True
    if value is None:
        return False
    return (low is None or value >= low) and (high is None or value <= high)
