"""Any recall reproduced, on the real broker, Redis and Qdrant Edge with a live node.

An agent's events are published in two phases. After the first, a retrieval is answered (and
recorded on ``memory.access``); the second phase then changes the memory that retrieval saw (a
new year consolidates and summarises the first, and capacity evicts its working memories).
Rebuilt from the log as of the point between the phases, the memory gives the first phase's
answer again, over HTTP (``as_of``) and on the command line (``engram recall --as-of``); the
recorded retrieval run again (``engram recall --again``) is identical to its record, a
tampered record is reported different, and an unknown id, a point the log does not hold or a
search of facts is refused with a clear message.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaProducer

from projections.retrieval.models import RetrievalResponse
from schemas.agent_events import Observation
from schemas.codec import encode_event
from schemas.memory_events import FACTS_READ_MODE, MemoryRetrieved
from schemas.topics import Topics
from streams.eventlog.history import read_agent_history
from streams.eventlog.publisher import AsyncPublisher, Position
from streams.rebuild.as_of import LAST, LogRecaller
from streams.runtime.node import Endpoints, Node
from streams.settings import EngramSettings
from tests.integration.streams.isolated import cli_env, invoke, isolated_settings, log_sealer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

AGENT = "R1"
REQUEST: dict[str, Any] = {
    "mode": "generative",
    "query": "the river flooded the basement",
    "current_year": 1,
    "top_k": 10,
}
"""Every score of this mode depends on every memory (min-max normalised) and on the query."""

FIRST = [
    ("Year 1: the river flooded the basement and ruined the boiler", 0.9),
    ("Year 1: we moved the car to the hill before the storm", 0.65),
    ("Year 1: the neighbours lent us sandbags", 0.5),
    ("Year 1: the insurance agent called about the policy", 0.55),
]
SECOND = [
    ("Year 2: a dry spring, the garden grew well", 0.5),
    ("Year 2: the town repaired the levee", 0.45),
    ("Year 2: we painted the kitchen", 0.4),
]


@dataclass
class Phases:
    settings: EngramSettings
    env: dict[str, str]
    first: RetrievalResponse
    """The live answer after the first phase, recorded on memory.access."""
    second: RetrievalResponse
    """The same request after the second phase: another memory."""
    recorded: MemoryRetrieved
    between: datetime
    last_of_first: Position


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> EngramSettings:
    prefix = f"recall{uuid.uuid4().hex[:8]}."
    data_dir: Path = tmp_path_factory.mktemp("engram")
    return isolated_settings(prefix, data_dir, working_capacity=3, schedule_interval=0)


@pytest.fixture(scope="module")
async def node(
    settings: EngramSettings, kafka_bootstrap: str, redis_server_url: str
) -> AsyncIterator[Node]:
    node = await Node(settings, Endpoints(kafka_bootstrap, redis_server_url)).start()
    try:
        yield node
    finally:
        await node.stop()


async def publish(
    node: Node, bootstrap: str, events: list[tuple[str, float]], year: int
) -> Position:
    assert node.pipeline is not None
    observations = [
        Observation(agent_id=AGENT, importance=importance, year=year, content=content)
        for content, importance in events
    ]
    async with AsyncPublisher(bootstrap, topics=Topics(node.settings.topic_prefix)) as publisher:
        positions = await publisher.publish_many(observations)
    await node.pipeline.stats.wait_for(positions)
    return max(positions, key=lambda p: p.offset)


async def retrieve(node: Node, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=node.http_url or "", timeout=60) as http:
        return await http.post(f"/v1/agents/{AGENT}/retrieve", json=body)


async def recorded_retrieval(node: Node, bootstrap: str, redis_url: str) -> MemoryRetrieved:
    """The record of the agent's one retrieval, found as a user finds it: its event id in the
    agent's history, then the record by that id."""
    topics = Topics(node.settings.topic_prefix)
    async with log_sealer(redis_url, node.settings.redis_namespace) as sealer:
        for _ in range(100):
            history = await read_agent_history(
                bootstrap, topics, AGENT, node.settings.partitions, sealer=sealer
            )
            found = [e for e in history.entries if e.kind == "retrieved"]
            if found:
                break
            await asyncio.sleep(0.05)
        assert len(found) == 1, history
        recaller = LogRecaller(
            bootstrap,
            lambda: topics,
            node.settings.partitions,
            redis_url,
            node.settings.redis_namespace,
            node.embedder,
            sealer=sealer,
        )
        record, where = await recaller.find(AGENT, found[0].event_id)
    assert (where.topic, where.offset) == (topics.access, found[0].position.offset)
    return record


@pytest.fixture(scope="module")
async def phases(
    node: Node, settings: EngramSettings, kafka_bootstrap: str, redis_server_url: str
) -> Phases:
    last_of_first = await publish(node, kafka_bootstrap, FIRST, year=1)
    first = await retrieve(node, REQUEST)
    assert first.status_code == 200, first.text
    recorded = await recorded_retrieval(node, kafka_bootstrap, redis_server_url)
    between = datetime.now(UTC)
    await asyncio.sleep(0.05)  # the second phase's markers are logged in a later millisecond
    await publish(node, kafka_bootstrap, SECOND, year=2)
    second = await retrieve(node, REQUEST)
    assert second.status_code == 200, second.text
    return Phases(
        settings,
        cli_env(settings, kafka_bootstrap, redis_server_url),
        RetrievalResponse.model_validate(first.json()),
        RetrievalResponse.model_validate(second.json()),
        recorded,
        between,
        last_of_first,
    )


def ranked(response: RetrievalResponse) -> list[tuple[str, int, float]]:
    return [(m.memory_id, m.rank, m.score) for m in response.results]


def test_the_second_phase_changed_the_memory(phases: Phases) -> None:
    """Otherwise the rest proves nothing: the first answer is not the memory of now."""
    assert ranked(phases.first) != ranked(phases.second)
    first_ids = {m.memory_id for m in phases.first.results}
    assert first_ids - {m.memory_id for m in phases.second.results}, "nothing evicted"
    assert [(i.memory_id, i.rank, i.score) for i in phases.recorded.results] == ranked(phases.first)


async def test_as_of_the_time_between_the_phases_answers_as_the_first_phase(
    node: Node, phases: Phases
) -> None:
    answer = await retrieve(node, {**REQUEST, "as_of": phases.between.isoformat()})
    assert answer.status_code == 200, answer.text
    recalled = RetrievalResponse.model_validate(answer.json())
    assert ranked(recalled) == ranked(phases.first)
    assert [m.breakdown for m in recalled.results] == [m.breakdown for m in phases.first.results]
    assert (recalled.working_count, recalled.episodic_count) == (
        phases.first.working_count,
        phases.first.episodic_count,
    )


async def test_as_of_the_last_published_position_of_the_first_phase(
    node: Node, phases: Phases
) -> None:
    at = phases.last_of_first
    position = {"topic": at.topic, "partition": at.partition, "offset": at.offset}
    answer = await retrieve(node, {**REQUEST, "as_of": position})
    assert answer.status_code == 200, answer.text
    assert ranked(RetrievalResponse.model_validate(answer.json())) == ranked(phases.first)

    result = await invoke(
        [
            "recall",
            AGENT,
            "--as-of",
            f"{at.topic}:{at.partition}:{at.offset}",
            "--mode",
            "generative",
            "--query",
            REQUEST["query"],
            "--year",
            "1",
            "--top-k",
            "10",
        ],
        phases.env,
    )
    assert result.exit_code == 0, result.output
    assert ranked(RetrievalResponse.model_validate_json(result.stdout)) == ranked(phases.first)
    assert f"{AGENT} as of {at.topic}:{at.partition}:{at.offset}" in result.stderr


async def test_as_of_now_answers_as_the_live_memory(node: Node, phases: Phases) -> None:
    answer = await retrieve(node, {**REQUEST, "as_of": datetime.now(UTC).isoformat()})
    assert answer.status_code == 200, answer.text
    assert ranked(RetrievalResponse.model_validate(answer.json())) == ranked(phases.second)


async def test_the_recorded_retrieval_run_again_is_identical(phases: Phases) -> None:
    result = await invoke(["recall", AGENT, "--again", phases.recorded.event_id], phases.env)
    assert result.exit_code == 0, result.output
    assert "identical" in result.stdout

    result = await invoke(
        ["recall", AGENT, "--again", phases.recorded.event_id, "--json"], phases.env
    )
    assert result.exit_code == 0, result.output
    compared = json.loads(result.stdout)
    assert compared["identical"] is True
    assert [(r["memory_id"], r["recomputed_rank"]) for r in compared["rows"]] == [
        (m.memory_id, m.rank) for m in phases.first.results
    ]
    assert compared["request"]["query"] == REQUEST["query"]

    # The agent's latest retrieval: the second phase's, on the memory of now.
    result = await invoke(["recall", AGENT, "--again", "last", "--json"], phases.env)
    assert result.exit_code == 0, result.output
    latest = json.loads(result.stdout)
    assert latest["identical"] is True
    assert latest["event_id"] != phases.recorded.event_id
    assert [row["memory_id"] for row in latest["rows"]] == [
        m.memory_id for m in phases.second.results
    ]


async def test_a_tampered_record_is_reported_different(
    phases: Phases, kafka_bootstrap: str
) -> None:
    """A record whose scores and order were changed after the fact: exit code 1, and the
    difference named memory by memory."""
    original = phases.recorded
    first, second, *rest = original.results
    tampered = original.model_copy(
        update={
            "event_id": f"tampered-{uuid.uuid4().hex[:8]}",
            "results": (
                second.model_copy(update={"rank": 1}),
                first.model_copy(update={"rank": 2, "score": first.score + 0.25}),
                *rest,
            ),
        }
    )
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(
            Topics(phases.settings.topic_prefix).access,
            encode_event(tampered),
            key=AGENT.encode(),
        )
    finally:
        await producer.stop()
    result = await invoke(["recall", AGENT, "--again", tampered.event_id, "--json"], phases.env)
    assert result.exit_code == 1, result.output
    rows = {row["memory_id"]: row for row in json.loads(result.stdout)["rows"]}
    assert rows[first.memory_id]["note"].startswith("rank 2 -> 1; score differs by -0.25")
    assert rows[second.memory_id]["note"] == "rank 1 -> 2"
    assert all(rows[item.memory_id]["same"] for item in rest)


async def test_an_unknown_retrieval_is_refused_clearly(phases: Phases) -> None:
    unknown = phases.recorded.event_id[:-4] + "beef"
    result = await invoke(["recall", AGENT, "--again", unknown], phases.env)
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())  # the console wraps long lines
    assert f"no retrieval '{unknown}' of {AGENT}" in said
    assert f"`engram history {AGENT}` lists its retrievals" in said


async def test_a_point_the_log_does_not_hold_is_refused(node: Node, phases: Phases) -> None:
    future = datetime.now(UTC) + timedelta(days=1)
    answer = await retrieve(node, {**REQUEST, "as_of": future.isoformat()})
    assert answer.status_code == 409, answer.text
    assert "is in the future" in answer.json()["detail"]

    at = phases.last_of_first
    past_the_end = {"topic": at.topic, "partition": at.partition, "offset": 10**9}
    answer = await retrieve(node, {**REQUEST, "as_of": past_the_end})
    assert answer.status_code == 409, answer.text
    assert "is not in the log" in answer.json()["detail"]
    assert answer.json()["log_end"] is not None

    answer = await retrieve(node, {**REQUEST, "as_of": "yesterday"})
    assert answer.status_code == 422, answer.text
    assert "as_of" in answer.text

    # A topic the log does not have is a malformed point (as in `after`), not one not held yet.
    elsewhere = {"topic": "zzz", "partition": 0, "offset": 5}
    answer = await retrieve(node, {**REQUEST, "as_of": elsewhere})
    assert answer.status_code == 422, answer.text
    (problem,) = answer.json()["detail"]
    assert problem["loc"] == ["body", "as_of", "topic"]
    assert "'zzz' is not a topic of this log" in problem["msg"]

    result = await invoke(["recall", AGENT, "--as-of", "yesterday"], phases.env)
    assert result.exit_code == 2, result.output
    assert "neither topic:partition:offset" in " ".join(result.output.split())


async def test_a_search_of_facts_is_no_retrieval_to_run_again(
    node: Node, phases: Phases, kafka_bootstrap: str, redis_server_url: str
) -> None:
    """A facts read with a query is recorded on memory.access too (mode facts): the agent's
    latest retrieval to run again passes it over, and its own id is refused, there being no
    memory to rebuild for it."""
    topics = Topics(node.settings.topic_prefix)
    async with log_sealer(redis_server_url, node.settings.redis_namespace) as sealer:
        recaller = LogRecaller(
            kafka_bootstrap,
            lambda: topics,
            node.settings.partitions,
            redis_server_url,
            node.settings.redis_namespace,
            node.embedder,
            sealer=sealer,
        )
        before, _ = await recaller.find(AGENT, LAST)
        async with httpx.AsyncClient(base_url=node.http_url or "", timeout=60) as http:
            searched = await http.get(f"/v1/agents/{AGENT}/facts", params={"query": "boiler"})
        assert searched.status_code == 200, searched.text
        for _ in range(100):
            history = await read_agent_history(
                kafka_bootstrap, topics, AGENT, node.settings.partitions, sealer=sealer
            )
            found = [e for e in history.entries if e.text.startswith('facts search for "boiler"')]
            if found:
                break
            await asyncio.sleep(0.05)
        (search,) = found
        latest, _ = await recaller.find(AGENT, LAST)
        record, _ = await recaller.find(AGENT, search.event_id)
    assert latest == before
    assert record.mode == FACTS_READ_MODE
    result = await invoke(["recall", AGENT, "--again", search.event_id], phases.env)
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert f"{search.event_id} is a search of {AGENT}'s facts, not a retrieval" in said


def test_scratch_stores_leave_nothing_behind(phases: Phases, redis_server_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_server_url)
    try:
        left = list(client.scan_iter(match=f"{phases.settings.redis_namespace}.recall-*"))
    finally:
        client.close()
    assert left == []


async def test_the_latest_retrieval_of_an_agent_that_only_searched_facts_is_refused_clearly(
    node: Node, phases: Phases
) -> None:
    """`recall --again last` runs the agent's latest retrieval of memories again; an
    agent whose records are searches of facts only has none, and is told what was read."""
    searcher = "F-ONLY-1"
    async with httpx.AsyncClient(base_url=node.http_url or "", timeout=60) as http:
        for _ in range(2):
            searched = await http.get(f"/v1/agents/{searcher}/facts", params={"query": "boiler"})
            assert searched.status_code == 200, searched.text
    said = ""
    for _ in range(100):  # until both records are on the log
        result = await invoke(["recall", searcher, "--again", "last"], phases.env)
        assert result.exit_code == 2, result.output
        said = " ".join(result.output.split())
        if "2 searches of facts" in said:
            break
        await asyncio.sleep(0.05)
    assert f"no retrieval 'last' of {searcher}" in said
    assert "0 retrievals of memories and 2 searches of facts (not recalled) of the agent" in said
