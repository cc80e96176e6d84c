"""When a read of a partition to its end may stop (the Tansu ListOffsets quirk included)."""

from __future__ import annotations

from streams.eventlog.derived_log import at_end


def test_an_empty_poll_past_the_reported_end_ends_the_read() -> None:
    assert at_end(position=10, reported_end=10, got_records=False)
    assert not at_end(position=9, reported_end=10, got_records=False)


def test_reaching_the_reported_end_with_records_may_leave_the_last_batch_unread() -> None:
    """Tansu reports the last batch's base offset + 1: reading up to it proves nothing more."""
    assert not at_end(position=10, reported_end=10, got_records=True)


def test_reading_past_the_reported_end_ends_the_read_under_constant_writes() -> None:
    """A topic written all the time never polls empty; past the end as of the start is enough."""
    assert at_end(position=11, reported_end=10, got_records=True)


def test_a_position_at_the_fetched_highwater_ends_the_read_without_an_empty_poll() -> None:
    """A fetch response's highwater is exact: at it, the last batch is read, no poll needed."""
    assert at_end(position=10, reported_end=10, got_records=True, highwater=10)
    assert not at_end(position=10, reported_end=10, got_records=True, highwater=12)
    assert not at_end(position=9, reported_end=10, got_records=True, highwater=9), (
        "short of the end as of the start: a highwater read before it proves nothing"
    )
