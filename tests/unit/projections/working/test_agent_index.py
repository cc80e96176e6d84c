"""The agent index's members and what one logged batch adds to it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from processors.batch import RawRecord
from projections.working.agent_index import batch_entries, format_member, parse_member, runs_of
from tests.unit.projections.test_history import at, recorded


@dataclass
class Metadata:
    topic: str
    partition: int
    offset: int


def test_offsets_are_kept_as_runs_and_a_member_round_trips() -> None:
    assert runs_of([7, 3, 4, 5, 9, 4]) == [(3, 5), (7, 7), (9, 9)]
    member = format_member("p.memory.items", 3, [1200, 1201, 1202, 1210])
    assert member == "p.memory.items:3:1200-1202,1210"
    assert parse_member(member) == ("p.memory.items", 3, [(1200, 1202), (1210, 1210)])


def test_a_member_names_at_least_one_offset() -> None:
    with pytest.raises(ValueError, match="at least one"):
        format_member("t", 0, [])


def test_a_batch_indexes_each_agents_records_and_the_markers_move_the_ends() -> None:
    mine, theirs = recorded("m1", "a", at(0)), recorded("m2", "b", at(1), agent_id="H002")
    delivered = [Metadata("items", 1, 40), Metadata("items", 1, 41)]
    markers = [Metadata("lifecycle", 1, 90)]
    retrieval = RawRecord("access", 1, 7, b"H002", b"{}", kind="retrieval")
    tick = RawRecord("schedule", 1, 3, None, b"{}", kind="tick")
    entries = batch_entries([retrieval, tick], [mine, theirs], delivered, markers)
    assert entries.records == {
        mine.agent_id: {("items", 1): [40]},
        "H002": {("items", 1): [41], ("access", 1): [7]},
    }
    assert entries.ends == {("items", 1): 41, ("lifecycle", 1): 90, ("access", 1): 7}
    # Scored by the marker: an agent's members of one batch sort together, whatever the topic.
    assert entries.markers == {1: 90}


def test_an_event_without_a_place_is_not_indexed() -> None:
    event = recorded("m1", "a", at(0))
    entries = batch_entries([], [event], [None], [])
    assert (entries.records, entries.ends) == ({}, {})
