"""A recorded retrieval beside the same retrieval recomputed from the log, with every
difference explained: ``engram recall --again``.

Pure: it takes the record (its results on ``memory.access``), the recomputed answer, and what
the derived log says of each memory around the point it was rebuilt at, and says, memory by
memory, whether the two agree, and if not, how (rank, score and which parts of the score's
breakdown) and why a memory is missing on one side (written after the point, forgotten before
it, not in the log at all).

Scores agree when they are equal to within :data:`SCORE_TOLERANCE` (relative, at least
absolute): the same memories and request give the same arithmetic, but a sum over a pool read
back in another order may differ in its last bits.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, assert_never

from pydantic import BaseModel, ConfigDict
from pydantic_core import to_jsonable_python

from projections.retrieval.models import RetrievedMemory
from schemas.learned_events import LearnedChange
from schemas.memory_events import (
    AgentForgotten,
    ConsolidationCompleted,
    DerivedEvent,
    MemoryForgotten,
    MemoryPromoted,
    MemoryRecorded,
    MemorySummarised,
    RetrievedItem,
)

SCORE_TOLERANCE = 1e-9
MAX_PARTS_NAMED = 4
"""Breakdown fields a note names when a score differs; the JSON answer has both in full."""

LATELY_MS = 1_000
"""A batch logged this close before the point may not have been applied by the stores when a
retrieval of that moment read them: they apply a batch after its marker is logged."""

Fate = Literal["held", "held_lately", "forgotten_before", "written_after", "not_in_log"]
"""Where a memory stood at the point: in the memory (written by a batch logged less than
:data:`LATELY_MS` before it, or earlier), forgotten before it, first written after it, or never
in the agent's derived log (another log, or an agent forgotten since)."""

FATE_TEXT: dict[Fate, str] = {
    "held": "in the memory at that point",
    "held_lately": "written by a batch logged less than 1 s before that point: the stores may "
    "not have applied it yet when the retrieval read them",
    "forgotten_before": "forgotten before that point",
    "written_after": "written only after that point",
    "not_in_log": "not in the agent's derived log",
}


@dataclass(frozen=True)
class Ranked:
    """One result of either side: the memory, where it ranked, its score and why."""

    memory_id: str
    rank: int
    score: float
    store: str
    breakdown: Mapping[str, Any] | None

    @classmethod
    def recorded(cls, item: RetrievedItem) -> Ranked:
        return cls(item.memory_id, item.rank, item.score, item.store, item.breakdown)

    @classmethod
    def recomputed(cls, memory: RetrievedMemory) -> Ranked:
        breakdown = to_jsonable_python(memory.breakdown)
        return cls(memory.memory_id, memory.rank, memory.score, memory.store, breakdown)


class RecallRow(BaseModel):
    """One memory of either answer, side by side."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    memory_id: str
    recorded_rank: int | None
    recorded_score: float | None
    recomputed_rank: int | None
    recomputed_score: float | None
    same: bool
    note: str = ""
    """Empty when the two agree; else how they differ, and why when the log says."""


class RecallComparison(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    identical: bool
    rows: tuple[RecallRow, ...]
    """The recorded results by rank, then the recomputed ones the record lacks."""


def memory_fates(
    before: Iterable[DerivedEvent],
    later: Iterable[DerivedEvent],
    *,
    written_ms: Mapping[str, int] | None = None,
    point_ms: int | None = None,
) -> dict[str, Fate]:
    """Per memory id named by the agent's derived log, where it stood at the cut between
    ``before`` (the events of the batches up to the point, in emission order) and ``later``
    (those after it). A memory absent from the result is not in the log. Given when each held
    memory's batch was logged (``written_ms``) and the point's time (``point_ms``, both ms since
    the epoch), one written less than :data:`LATELY_MS` before the point is ``held_lately``."""
    fates: dict[str, Fate] = {}
    for event in before:
        match event:
            case MemoryRecorded() | MemoryPromoted() | MemorySummarised():
                fates[event.memory_id] = "held"
            case MemoryForgotten():
                fates[event.memory_id] = "forgotten_before"
            case AgentForgotten():
                for key, fate in fates.items():
                    if fate == "held":
                        fates[key] = "forgotten_before"
            case ConsolidationCompleted() | LearnedChange():
                # An audit record (the copies it made are MemoryPromoted events of their own),
                # or what was learned, which is no memory.
                pass
            case _:
                assert_never(event)
    for event in later:
        match event:
            case MemoryRecorded() | MemoryPromoted() | MemorySummarised():
                if event.memory_id not in fates:
                    fates[event.memory_id] = "written_after"
            case MemoryForgotten() | AgentForgotten() | ConsolidationCompleted() | LearnedChange():
                pass  # after the point: a memory forgotten later was still held at it
            case _:
                assert_never(event)
    if written_ms is not None and point_ms is not None:
        for key, fate in fates.items():
            written = written_ms.get(key)
            if fate == "held" and written is not None and point_ms - written < LATELY_MS:
                fates[key] = "held_lately"
    return fates


def compare(
    recorded: Sequence[Ranked],
    recomputed: Sequence[Ranked],
    fates: Mapping[str, Fate],
) -> RecallComparison:
    """The two answers side by side; identical when every memory has the same rank on both
    sides and scores that agree."""
    mine = {r.memory_id: r for r in recomputed}
    theirs = {r.memory_id: r for r in recorded}
    rows = [_row(r, mine.get(r.memory_id), fates) for r in sorted(recorded, key=lambda r: r.rank)]
    rows += [
        _row(None, r, fates)
        for r in sorted(recomputed, key=lambda r: r.rank)
        if r.memory_id not in theirs
    ]
    return RecallComparison(identical=all(row.same for row in rows), rows=tuple(rows))


def _row(was: Ranked | None, now: Ranked | None, fates: Mapping[str, Fate]) -> RecallRow:
    either = was or now
    assert either is not None
    fate = FATE_TEXT[fates.get(either.memory_id, "not_in_log")]
    row = {
        "memory_id": either.memory_id,
        "recorded_rank": None if was is None else was.rank,
        "recorded_score": None if was is None else was.score,
        "recomputed_rank": None if now is None else now.rank,
        "recomputed_score": None if now is None else now.score,
    }
    if was is None:
        return RecallRow(**row, same=False, note=f"not in the recorded answer; {fate}")
    if now is None:
        return RecallRow(**row, same=False, note=f"not among the recomputed results; {fate}")
    notes = []
    if was.rank != now.rank:
        notes.append(f"rank {was.rank} -> {now.rank}")
    if not scores_agree(was.score, now.score):
        differs = f"score differs by {now.score - was.score:+.6g}"
        parts = breakdown_changes(was.breakdown, now.breakdown)
        notes.append(f"{differs} ({parts})" if parts else differs)
    return RecallRow(**row, same=not notes, note="; ".join(notes))


def scores_agree(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=SCORE_TOLERANCE, abs_tol=SCORE_TOLERANCE)


def breakdown_changes(was: Mapping[str, Any] | None, now: Mapping[str, Any] | None) -> str:
    """The breakdown fields that differ, ``name: recorded -> recomputed``, the first
    :data:`MAX_PARTS_NAMED`; empty when the record has no breakdown."""
    if was is None or now is None:
        return ""
    changed = []
    for name in sorted(set(was) | set(now)):
        a, b = was.get(name), now.get(name)
        if isinstance(a, int | float) and isinstance(b, int | float):
            differs = not scores_agree(float(a), float(b))
        else:
            differs = a != b
        if differs:
            changed.append(f"{name}: {_short(a)} -> {_short(b)}")
    more = len(changed) - MAX_PARTS_NAMED
    shown = ", ".join(changed[:MAX_PARTS_NAMED])
    return f"{shown}, {more} more" if more > 0 else shown


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
