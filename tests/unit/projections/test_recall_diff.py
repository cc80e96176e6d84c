"""A recorded retrieval beside its recomputation: identical, or each difference explained."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from projections.retrieval.recall_diff import (
    Fate,
    Ranked,
    breakdown_changes,
    compare,
    memory_fates,
)
from schemas.memory_events import (
    AgentForgotten,
    ImportanceInputs,
    MemoryForgotten,
    MemoryRecorded,
    RetrievedItem,
    encode_vector,
)


def ranked(memory_id: str, rank: int, score: float, **breakdown: Any) -> Ranked:
    return Ranked(memory_id, rank, score, "working", {"mode": "saliency", **breakdown})


def recorded(memory_id: str, agent: str = "A1") -> MemoryRecorded:
    return MemoryRecorded(
        agent_id=agent,
        memory_id=memory_id,
        agent_type="default",
        source_event_id=f"src-{memory_id}",
        source_event_type="observation",
        seq=0,
        content=memory_id,
        importance=0.5,
        destination="working",
        embedding=encode_vector([1.0, 0.0]),
        embedder="hashing-2",
        config_version="cfg",
        scoring=ImportanceInputs(method="explicit"),
    )


def forgotten(memory_id: str) -> MemoryForgotten:
    return MemoryForgotten(
        agent_id="A1",
        memory_id=memory_id,
        destination="working",
        reason="capacity",
        caused_by="x",
        config_version="cfg",
    )


def test_the_same_answer_is_identical() -> None:
    answer = [ranked("a", 1, 0.9, age=1), ranked("b", 2, 0.5, age=3)]
    comparison = compare(answer, list(answer), {"a": "held", "b": "held"})
    assert comparison.identical
    assert [(r.memory_id, r.same, r.note) for r in comparison.rows] == [
        ("a", True, ""),
        ("b", True, ""),
    ]


def test_scores_agree_to_within_the_last_bits_of_a_sum() -> None:
    was = [ranked("a", 1, 0.1 + 0.2)]
    now = [ranked("a", 1, 0.3)]
    assert compare(was, now, {"a": "held"}).identical


def test_a_rank_and_a_score_that_moved_are_named_with_the_parts_that_moved() -> None:
    was = [ranked("a", 1, 0.9, age=1, importance=0.9), ranked("b", 2, 0.5, age=3)]
    now = [ranked("b", 1, 0.95, age=0), ranked("a", 2, 0.9, age=1, importance=0.9)]
    comparison = compare(was, now, {"a": "held", "b": "held"})
    assert not comparison.identical
    notes = {row.memory_id: row.note for row in comparison.rows}
    assert notes == {"a": "rank 1 -> 2", "b": "rank 2 -> 1; score differs by +0.45 (age: 3 -> 0)"}


def test_a_memory_on_one_side_only_says_where_it_stood_at_the_point() -> None:
    was = [ranked("gone", 1, 0.9), ranked("late", 2, 0.8), ranked("kept", 3, 0.7)]
    now = [ranked("kept", 1, 0.7), ranked("new", 2, 0.6)]
    fates: dict[str, Fate] = {"late": "written_after", "kept": "held", "new": "held"}
    rows = compare(was, now, fates).rows
    assert [(r.memory_id, r.recorded_rank, r.recomputed_rank) for r in rows] == [
        ("gone", 1, None),
        ("late", 2, None),
        ("kept", 3, 1),
        ("new", None, 2),
    ]
    assert rows[0].note == "not among the recomputed results; not in the agent's derived log"
    assert rows[1].note == "not among the recomputed results; written only after that point"
    assert rows[3].note == "not in the recorded answer; in the memory at that point"


def test_the_fates_follow_the_log_up_to_the_point_and_after_it() -> None:
    before = [recorded("a"), recorded("b"), forgotten("a"), recorded("c")]
    later = [recorded("d"), forgotten("c"), recorded("b")]
    assert memory_fates(before, later) == {
        "a": "forgotten_before",
        "b": "held",
        "c": "held",
        "d": "written_after",
    }
    erased = AgentForgotten(agent_id="A1", requested_at=datetime.now(UTC), caused_by="forget")
    assert memory_fates([recorded("a"), erased], []) == {"a": "forgotten_before"}


def test_a_record_without_breakdowns_compares_by_score_alone() -> None:
    assert breakdown_changes(None, {"age": 1}) == ""
    many = {f"part{i}": float(i) for i in range(6)}
    shifted = {name: value + 1 for name, value in many.items()}
    assert breakdown_changes(many, shifted).endswith(", 2 more")


def test_both_sides_come_from_what_the_record_and_the_answer_hold() -> None:
    item = RetrievedItem(memory_id="a", rank=1, score=0.5, store="episodic", breakdown=None)
    assert Ranked.recorded(item) == Ranked("a", 1, 0.5, "episodic", None)


def test_a_memory_written_just_before_the_point_may_not_have_been_applied_then() -> None:
    """The stores apply a batch after its marker is logged: a retrieval in between did not
    see it, and its record is not wrong for it."""
    fates = memory_fates(
        [recorded("old"), recorded("new")],
        [],
        written_ms={"old": 8_000, "new": 9_500},
        point_ms=10_000,
    )
    assert fates == {"old": "held", "new": "held_lately"}
    rows = compare([], [Ranked("new", 1, 0.5, "working", None)], fates).rows
    assert rows[0].note.startswith("not in the recorded answer; written by a batch logged less")
