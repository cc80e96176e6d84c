"""Each source partition is taken in offset order from its mark: a record ahead of records
not derived yet is never taken before them (:mod:`processors.source_order`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from processors.batch import RawRecord
from processors.source_order import Gap, in_source_order

OBS = "agent.observations"
DEC = "agent.decisions"


def rec(offset: int, topic: str = OBS, partition: int = 0) -> RawRecord:
    return RawRecord(topic, partition, offset, b"A", b"{}", "observation")


def offsets(records: list[RawRecord]) -> list[tuple[str, int, int]]:
    return [(r.topic, r.partition, r.offset) for r in records]


def test_records_that_continue_their_partitions_are_all_taken_as_given() -> None:
    batch = [rec(5), rec(0, DEC), rec(6), rec(3, partition=1), rec(1, DEC)]
    order = in_source_order(batch, {(OBS, 0): 4, (OBS, 1): 2})
    assert order.records == batch
    assert (order.gaps, order.held) == ([], {})


def test_redelivered_records_below_the_mark_are_kept_for_the_skip() -> None:
    batch = [rec(2), rec(3), rec(4), rec(5)]
    order = in_source_order(batch, {(OBS, 0): 3})
    assert order.records == batch
    assert order.gaps == []


def test_a_record_ahead_of_the_redelivery_is_a_gap_and_is_left_out() -> None:
    # A rebalance: offset 9 was fetched before it, the redelivery restarts at 5.
    batch = [rec(9), rec(0, DEC), rec(5), rec(6)]
    order = in_source_order(batch, {(OBS, 0): 4})
    assert offsets(order.records) == [(DEC, 0, 0), (OBS, 0, 5), (OBS, 0, 6)]
    assert order.gaps == [Gap((OBS, 0), 7, 9)]
    assert order.held == {}


def test_a_gap_the_broker_confirmed_is_taken() -> None:
    batch = [rec(5), rec(7), rec(8)]
    gap = Gap((OBS, 0), 6, 7)
    order = in_source_order(batch, {(OBS, 0): 4}, accepted={gap})
    assert order.records == batch
    assert (order.gaps, order.held) == ([], {})


def test_a_held_partition_is_cut_at_its_gap_and_rewinds_to_its_next_record() -> None:
    batch = [rec(12), rec(13), rec(3, DEC), rec(14)]
    held = {(OBS, 0): Gap((OBS, 0), 10, 12)}
    order = in_source_order(batch, {(OBS, 0): 9, (DEC, 0): 2}, held=held)
    assert offsets(order.records) == [(DEC, 0, 3)]
    assert order.gaps == []
    assert order.held == {(OBS, 0): 10}


def test_a_partition_never_derived_starts_at_offset_zero() -> None:
    assert in_source_order([rec(0), rec(1)], {}).gaps == []
    assert in_source_order([rec(3)], {}).gaps == [Gap((OBS, 0), 0, 3)]


def test_a_record_delivered_twice_is_taken_once() -> None:
    # The stale copy and the redelivered one in the same batch.
    batch = [rec(5), rec(6), rec(5), rec(6), rec(7)]
    order = in_source_order(batch, {(OBS, 0): 4})
    assert offsets(order.records) == [(OBS, 0, 5), (OBS, 0, 6), (OBS, 0, 7)]


@given(
    mark=st.integers(-1, 20),
    delivered=st.lists(st.integers(0, 40), max_size=40),
)
def test_what_is_taken_never_leaves_a_hole_above_the_mark(mark: int, delivered: list[int]) -> None:
    """The property the markers rely on: taken records above the mark are exactly the run
    mark+1, mark+2, ... (no gap is ever taken unasked), each once."""
    order = in_source_order([rec(o) for o in delivered], {(OBS, 0): mark})
    above = sorted(r.offset for r in order.records if r.offset > mark)
    assert above == list(range(mark + 1, mark + 1 + len(above)))
    assert len(order.records) == len({r.offset for r in order.records})
    # Whatever continues the mark is taken.
    run = mark + 1
    while run in delivered:
        run += 1
    assert len(above) == run - mark - 1
