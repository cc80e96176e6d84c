"""The record of a retrieval carries the agent's time it was made at, which the worker takes
as the retrieved summaries' latest access (seed 001's recency)."""

from __future__ import annotations

import pytest

from projections.retrieval.models import RetrievalRequest, RetrievalResponse
from projections.retrieval.scoring import Clock
from projections.service.access_records import retrieval_record, retrieval_time

AGENT = "H001"


def answered(clock: Clock) -> RetrievalResponse:
    return RetrievalResponse(
        agent_id=AGENT,
        mode="two_phase",
        clock=clock,
        working_count=0,
        episodic_count=0,
        results=(),
        took_ms=0.1,
    )


@pytest.mark.parametrize(
    ("request_time", "clock", "recorded"),
    [
        # The usual call gives no time: the clock the ranking used, one past the newest memory.
        ({}, Clock("step", 61), (61, None)),
        ({}, Clock("year", 11), (None, 11)),
        # The caller's time wins; a year given is no step, whatever the memories carry.
        ({"current_step": 60}, Clock("step", 60), (60, None)),
        ({"current_year": 3}, Clock("year", 3), (None, 3)),
        # Sequence numbers and wall-clock hours are neither a step nor a year.
        ({}, Clock("seq", 12), (None, None)),
        ({"current_time": "2030-01-01T05:00:00+00:00"}, Clock("hour", 5), (None, None)),
    ],
)
def test_a_record_carries_the_time_the_ranking_measured_ages_from(
    request_time: dict[str, object], clock: Clock, recorded: tuple[int | None, int | None]
) -> None:
    request = RetrievalRequest.model_validate(request_time)
    assert retrieval_time(request, answered(clock)) == recorded
    record = retrieval_record(AGENT, request, answered(clock))
    assert (record.step, record.year) == recorded
    # What the caller asked is kept as asked: the time inferred is not a parameter.
    assert RetrievalRequest.model_validate(record.parameters) == request
