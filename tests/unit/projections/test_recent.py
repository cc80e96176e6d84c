"""Mode ``recent``, seed 000's ``get_recent_episodes(days=7, limit=10)``: the window before the
retrieval's time and its bounds, the order, the request's defaults and refusals, the engine's
reads, and the moment the service pins and records so that a rerun ranks the same."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from processors.embedding import HashingEmbedder
from projections.episodic.candidates import CandidateSignals
from projections.memory import StoredMemory
from projections.retrieval.breakdowns import RecentBreakdown
from projections.retrieval.engine import RetrievalEngine
from projections.retrieval.filters import MemoryFilter
from projections.retrieval.models import MAX_RECENT_DAYS, RetrievalRequest
from projections.retrieval.pool_reads import signals_for
from projections.retrieval.ranking import rank
from projections.retrieval.recall_diff import Ranked, compare
from projections.retrieval.recent import CLOCK_SKEW, recent, window_filter, window_start
from projections.retrieval.scoring import Clock, hour_of
from projections.service.app import create_app
from projections.service.client import AsyncEngramClient, EngramClient, QueryError
from schemas.memory_events import Destination
from tests.unit.projections.test_retrieval_engine import ListedEpisodic, ListedWorking
from tests.unit.projections.test_service_validation import RecordingHook, client_for

AGENT = "H001"
URL = f"/v1/agents/{AGENT}/retrieve"
NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)


def lived(
    seq: int,
    ago: timedelta,
    *,
    now: datetime = NOW,
    destination: Destination = "episodic",
    year: int | None = None,
    name: str | None = None,
) -> StoredMemory:
    """A memory of an event ``ago`` before ``now``, recorded as the agent's ``seq``-th."""
    return StoredMemory(
        memory_id=name or f"m{seq}",
        agent_id=AGENT,
        content=f"event {seq}",
        importance=0.5,
        destination=destination,
        seq=seq,
        year=year,
        occurred_at=now - ago,
        source_event_id=f"event-{name or seq}",
        source_event_type="observation",
    )


def days(n: float) -> timedelta:
    return timedelta(days=n)


# Recorded out of their time's order: seq alone would put the 10-day-old memory first.
ONE, THREE, EIGHT, TEN = (
    lived(3, days(1)),
    lived(1, days(3)),
    lived(2, days(8)),
    lived(4, days(10)),
)


def ids(ranking: Any) -> list[str]:
    return [scored.memory.memory_id for scored in ranking.results]


def test_the_last_seven_days_come_newest_first() -> None:
    ranking = recent([TEN, THREE, EIGHT, ONE], top_k=10, now=NOW, days=7)

    assert ids(ranking) == ["m3", "m1"]
    first, second = (scored.breakdown for scored in ranking.results)
    assert isinstance(first, RecentBreakdown)
    assert isinstance(second, RecentBreakdown)
    assert (first.occurred_at, first.age_days, first.days) == (NOW - days(1), 1.0, 7)
    assert (second.occurred_at, second.age_days) == (NOW - days(3), 3.0)
    assert ranking.results[0].score == first.recency == pytest.approx(1 - 1 / 7)
    assert ranking.clock == Clock("hour", hour_of(NOW))


def test_top_k_keeps_the_newest() -> None:
    week = [lived(seq, days(seq)) for seq in range(1, 7)]

    assert ids(recent(week, top_k=2, now=NOW, days=7)) == ["m1", "m2"]
    assert ids(recent(week, top_k=10, now=NOW, days=3.5)) == ["m1", "m2", "m3"]


def test_exactly_days_old_is_left_out_as_the_seeds_strict_bound_and_skew_after_now_kept() -> None:
    """Seed 000: ``created_at > now - days``. An event dated by a producer's clock a little
    ahead of the service's is recent, at age 0, up to :data:`CLOCK_SKEW` after ``now``."""
    boundary = [
        lived(1, days(7), name="exactly 7 days"),
        lived(2, days(7) - MICROSECOND, name="just inside"),
        lived(3, timedelta(0), name="now"),
        lived(4, -timedelta(milliseconds=200), name="ahead of now"),
        lived(5, -CLOCK_SKEW, name="the skew's end"),
        lived(6, -CLOCK_SKEW - MICROSECOND, name="past it"),
    ]

    ranking = recent(boundary, top_k=10, now=NOW, days=7)

    assert ids(ranking) == ["the skew's end", "ahead of now", "now", "just inside"]
    assert [r.score for r in ranking.results[:3]] == [1.0, 1.0, 1.0]


def test_a_current_time_in_the_past_asks_for_the_days_before_it() -> None:
    """The week before a time in the past ranked what came months after it first, as the
    freshest, hiding the week it asked for."""
    later = lived(9, -days(90), name="three months later")

    assert ids(recent([later, THREE, ONE], top_k=1, now=NOW, days=7)) == ["m3"]


def test_equal_times_go_to_the_later_recorded_then_the_higher_id() -> None:
    same = [lived(5, days(1)), lived(9, days(1)), lived(7, days(1), name="b"), lived(7, days(1))]

    assert ids(recent(same, top_k=10, now=NOW, days=7)) == ["m9", "m7", "b", "m5"]


def test_the_wall_clock_decides_whatever_year_or_step_a_memory_carries() -> None:
    """A simulation memory is recent by when its event occurred (or was logged), not by its
    simulated year."""
    late_in_the_simulation = lived(1, days(10), year=100)
    early_in_the_simulation = lived(2, days(1), year=1)

    ranking = recent([late_in_the_simulation, early_in_the_simulation], top_k=5, now=NOW, days=7)

    assert ids(ranking) == ["m2"]


def test_a_working_memory_and_its_promoted_copy_are_ranked_once() -> None:
    original = lived(1, days(2), destination="working")
    copy = original.model_copy(update={"memory_id": "copy", "destination": "episodic"})

    ranking = recent([original, copy], top_k=5, now=NOW, days=7)

    assert [(s.memory.memory_id, s.store) for s in ranking.results] == [("m1", "working")]


def test_a_window_reaching_before_the_calendar_starts_takes_everything() -> None:
    early = datetime(1, 1, 3, tzinfo=UTC)
    first = lived(1, days(1), now=early)

    assert window_start(early, 7) is None
    assert ids(recent([first], top_k=5, now=early, days=MAX_RECENT_DAYS)) == ["m1"]
    assert window_filter(None, early, 7).occurred_after is None


def test_the_window_narrows_the_requests_own_filter() -> None:
    start = NOW - days(7)

    plain = window_filter(None, NOW, 7)
    wider = window_filter(MemoryFilter(occurred_after=NOW - days(30), tags=("flood",)), NOW, 7)
    narrower = window_filter(
        MemoryFilter(occurred_after=NOW - days(2), occurred_before=NOW - days(1)), NOW, 7
    )

    assert (plain.occurred_after, plain.occurred_before) == (start + MICROSECOND, NOW + CLOCK_SKEW)
    assert (wider.occurred_after, wider.occurred_before, wider.tags) == (
        start + MICROSECOND,
        NOW + CLOCK_SKEW,
        ("flood",),
    )
    assert (narrower.occurred_after, narrower.occurred_before) == (NOW - days(2), NOW - days(1))
    assert not plain.admits(lived(1, days(7)))
    assert plain.admits(lived(2, days(7) - MICROSECOND))


def test_days_must_be_positive_for_the_pure_ranking_too() -> None:
    with pytest.raises(ValueError, match="days must be positive"):
        recent([ONE], top_k=5, now=NOW, days=0)


def request(**fields: Any) -> RetrievalRequest:
    return RetrievalRequest.model_validate(fields)


def test_the_seeds_defaults_are_written_into_the_request() -> None:
    """7 days and 10 episodes, as ``get_recent_episodes(days=7, limit=10)``: filled in, so a
    recorded request names them."""
    asked = request(mode="recent")

    assert (asked.days, asked.top_k, asked.current_time) == (7.0, 10, None)
    assert (request(mode="recent", top_k=3, days=2).top_k, request(mode="recent", days=2).days) == (
        3,
        2.0,
    )
    assert (request(mode="saliency").top_k, request(mode="saliency").days) == (5, None)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"mode": "recent", "days": 0}, "greater than 0"),
        ({"mode": "recent", "days": -1}, "greater than 0"),
        ({"mode": "recent", "days": MAX_RECENT_DAYS * 2}, "less than or equal"),
        ({"mode": "saliency", "days": 7}, "days applies only to mode 'recent'"),
        ({"days": 7}, "days applies only to mode 'recent'"),
        ({"query": "flood", "days": 7}, "days applies only to mode 'recent'"),
        ({"mode": "recent", "current_year": 3}, "give current_time"),
        ({"mode": "recent", "current_step": 3}, "give current_time"),
    ],
)
def test_a_request_the_mode_cannot_answer_is_refused_with_the_reason(
    fields: dict[str, Any], reason: str
) -> None:
    with pytest.raises(ValidationError, match=reason):
        request(**fields)


def test_pinning_fixes_now_for_mode_recent_only() -> None:
    later = NOW + days(1)

    assert request(mode="recent").pinned(NOW).current_time == NOW
    assert request(mode="recent", current_time=later).pinned(NOW).current_time == later
    assert request(mode="saliency").pinned(NOW).current_time is None


def test_rank_refuses_an_unpinned_recent_request() -> None:
    with pytest.raises(ValueError, match="pin the request"):
        rank(request(mode="recent"), [], [ONE])


def test_the_candidates_are_the_newest_by_the_events_time() -> None:
    signals = signals_for(request(mode="recent", current_time=NOW), None, 30)
    with_query = signals_for(request(mode="recent", query="flood"), EMBEDDER.embed("flood"), 30)

    assert (signals.occurred, signals.recency, signals.importance) == (True, False, False)
    assert signals.whole_within_limit, "a pool within the bound must come back whole"
    assert with_query.occurred
    assert with_query.vector is not None
    assert CandidateSignals(5, occurred=True).whole_within_limit


EMBEDDER = HashingEmbedder(64)


def engine_over(
    working: list[StoredMemory], episodic: list[StoredMemory]
) -> tuple[RetrievalEngine, ListedWorking, ListedEpisodic]:
    stores = ListedWorking(working), ListedEpisodic(episodic)
    return RetrievalEngine(*stores, EMBEDDER), *stores


async def test_the_engine_ranks_both_stores_within_the_window_read_natively() -> None:
    two = lived(5, days(2), destination="working")
    old_working = lived(6, days(9), destination="working")
    engine, _, episodic = engine_over([two, old_working], [TEN, THREE, EIGHT, ONE])

    answer = await engine.retrieve(AGENT, request(mode="recent", current_time=NOW))

    assert [(r.memory_id, r.store) for r in answer.results] == [
        ("m3", "episodic"),
        ("m5", "working"),
        ("m1", "episodic"),
    ]
    assert (answer.mode, answer.working_count, answer.episodic_count) == ("recent", 1, 2)
    [read] = episodic.filters
    assert read is not None
    assert (read.occurred_after, read.occurred_before) == (
        NOW - days(7) + MICROSECOND,
        NOW + CLOCK_SKEW,
    )


async def test_the_engine_counts_back_from_now_without_a_current_time() -> None:
    now = datetime.now(UTC)
    yesterday, last_month = lived(1, days(1), now=now), lived(2, days(30), now=now)
    engine, _, _ = engine_over([], [yesterday, last_month])

    answer = await engine.retrieve(AGENT, request(mode="recent"))

    assert [r.memory_id for r in answer.results] == ["m1"]
    breakdown = answer.results[0].breakdown
    assert isinstance(breakdown, RecentBreakdown)
    assert 1.0 <= breakdown.age_days < 1.01


async def test_the_service_records_the_moment_so_the_retrieval_runs_again_the_same() -> None:
    """``engram recall --again`` ranks the record's ``parameters`` again: they must hold the
    ``current_time`` the answer counted back from, not leave it to the rerun's clock."""
    now = datetime.now(UTC)
    memories = [lived(seq, days(seq * 2 - 0.5), now=now) for seq in range(1, 6)]
    engine, _, _ = engine_over([], memories)
    hook = RecordingHook()
    before = datetime.now(UTC)
    async for client in client_for(create_app(engine, on_retrieval=hook)):
        response = await client.post(URL, json={"mode": "recent"})
    after = datetime.now(UTC)
    assert response.status_code == 200, response.text

    [event] = hook.events
    assert (event.parameters["mode"], event.parameters["days"]) == ("recent", 7.0)
    assert event.parameters["top_k"] == 10
    recorded_time = datetime.fromisoformat(event.parameters["current_time"])
    assert before <= recorded_time <= after
    replayed = RetrievalRequest.model_validate(event.parameters)
    assert replayed.pinned(after + days(3)) == replayed, "a rerun days later counts from then"
    rerun = await engine.retrieve(AGENT, replayed)
    recorded = [Ranked.recorded(item) for item in event.results]
    assert [r.memory_id for r in recorded] == ["m1", "m2", "m3"]
    assert compare(recorded, [Ranked.recomputed(m) for m in rerun.results], {}).identical


async def test_the_http_answer_explains_each_result() -> None:
    engine, _, _ = engine_over([], [ONE, THREE, EIGHT])
    async for client in client_for(create_app(engine)):
        response = await client.post(
            URL, json={"mode": "recent", "days": 5, "current_time": NOW.isoformat()}
        )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["clock"] == {"axis": "hour", "now": hour_of(NOW)}
    assert [r["breakdown"] for r in body["results"]] == [
        {
            "occurred_at": "2026-03-09T12:00:00Z",
            "age_days": 1.0,
            "days": 5.0,
            "recency": pytest.approx(0.8),
            "mode": "recent",
        },
        {
            "occurred_at": "2026-03-07T12:00:00Z",
            "age_days": 3.0,
            "days": 5.0,
            "recency": pytest.approx(0.4),
            "mode": "recent",
        },
    ]


async def test_both_clients_send_days_and_leave_now_to_the_service() -> None:
    bodies: list[bytes] = []

    def answer(sent: httpx.Request) -> httpx.Response:
        bodies.append(sent.content)
        return httpx.Response(503, json={"detail": "recorded only"})

    transport = httpx.MockTransport(answer)
    with (
        EngramClient("http://engram.test", transport=transport) as client,
        pytest.raises(QueryError, match="recorded only"),
    ):
        client.retrieve(AGENT, mode="recent", days=3)
    async with AsyncEngramClient("http://engram.test", transport=transport) as async_client:
        with pytest.raises(QueryError, match="recorded only"):
            await async_client.retrieve(AGENT, mode="recent", days=3)

    sent = [json.loads(body) for body in bodies]
    assert sent[0] == sent[1]
    assert (sent[0]["mode"], sent[0]["days"], sent[0]["top_k"]) == ("recent", 3.0, 10)
    assert "current_time" not in sent[0], "the service's clock, not the client's, pins now"
