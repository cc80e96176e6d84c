"""When a read of a partition to its end may stop (the Tansu ListOffsets quirk included)."""

from __future__ import annotations

from streams.eventlog.derived_log import at_end


def test_a_read_ends_at_the_first_fetched_highwater_past_the_reported_end() -> None:
    assert at_end(position=10, reported_end=10, highwater=10)
    assert at_end(position=12, reported_end=10, highwater=12)


def test_reaching_the_reported_end_may_leave_the_last_batch_unread() -> None:
    """Tansu reports the last batch's base offset + 1: the fetched highwater says more."""
    assert not at_end(position=10, reported_end=10, highwater=12)


def test_no_read_ends_before_a_fetch_response() -> None:
    """A poll without records for a partition says nothing when its fetch is in flight: a
    read of several partitions used to stop there, short of the end."""
    assert not at_end(position=10, reported_end=10, highwater=None)
    assert not at_end(position=11, reported_end=10, highwater=None)


def test_the_reported_end_still_bounds_a_highwater_below_it() -> None:
    assert not at_end(position=9, reported_end=10, highwater=9)


def test_a_topic_written_all_the_time_ends_at_the_first_highwater() -> None:
    """What is written after the start is consumed live: past the first highwater the read
    ends, however far the latest one has moved (the caller keeps the first)."""
    assert at_end(position=15, reported_end=10, highwater=14)
