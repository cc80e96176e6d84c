"""The record of a retrieval carries the agent's time it was made at, which the worker takes
as the retrieved summaries' latest access (seed 001's recency)."""

from __future__ import annotations

import pytest

from projections.retrieval.models import RetrievalRequest, RetrievalResponse, RetrievedMemory
from projections.retrieval.scoring import Clock, Weights
from projections.service.access_records import retrieval_record, retrieval_time
from schemas.envelope import TIME_BOUND

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


def answered_with(clock: Clock, *steps: int | None) -> RetrievalResponse:
    """An answer whose results carry these steps (built unvalidated: only their times count)."""
    results = tuple(
        RetrievedMemory.model_construct(memory_id=f"m{i}", step=step, year=2)
        for i, step in enumerate(steps)
    )
    return answered(clock).model_copy(update={"results": results})


def test_an_agent_of_years_and_steps_gets_a_step_too() -> None:
    """Its clock counts years, but it is pruned by steps: a year alone left a retrieved
    summary's step recency at its making."""
    asked = RetrievalRequest()
    assert retrieval_time(asked, answered_with(Clock("year", 3), 19, 20, None)) == (21, 3)
    by_year = RetrievalRequest(current_year=3)
    assert retrieval_time(by_year, answered_with(Clock("year", 3), 19, 20)) == (21, 3)
    assert retrieval_time(asked, answered_with(Clock("year", 3), None)) == (None, 3)


def test_one_past_the_newest_time_stays_within_the_bound_of_an_event_s_time() -> None:
    """A memory at year 2**53 made the record's year 2**53 + 1: the record failed to build and
    the retrieval went unrecorded."""
    record = retrieval_record(AGENT, RetrievalRequest(), answered(Clock("year", TIME_BOUND + 1)))
    assert record.year == TIME_BOUND


@pytest.mark.parametrize(
    ("weights", "relevance"),
    [(None, 0.5), ({"recency": 0.3}, 0.5), (Weights(recency=0.3), 0.5), ({"relevance": 0}, 0.0)],
)
def test_a_weighted_query_is_recorded_with_the_relevance_weight_it_was_ranked_by(
    weights: object, relevance: float
) -> None:
    """The ranking added relevance 0.5 to a query's weights, the record kept the request's 0:
    ``engram recall --again`` then ranked the same question another way. A relevance given,
    0 included, is the caller's. The client's round trip (every field sent) keeps it too."""
    body: dict[str, object] = {"mode": "weighted", "query": "flood insurance"}
    if weights is not None:
        body["weights"] = weights
    request = RetrievalRequest.model_validate(body)
    sent = RetrievalRequest.model_validate(request.model_dump(mode="json"))
    recorded = retrieval_record(AGENT, sent, answered(Clock("year", 3)))
    assert recorded.parameters["weights"]["relevance"] == relevance
    assert RetrievalRequest.model_validate(recorded.parameters).weights == request.weights
