"""The same raw log with the same configuration derives the same log.

20,000 agent events of simulated households (years, so sessions, years and chapters end) and
wall-clock agents, published by concurrent producers as independent agents would (each agent's
observations and decisions on their two topics), with ticks on ``memory.schedule`` and
retrievals through the query service on ``memory.access``, go through a live node with the
lifecycle rules on. The worker fetched the topics in an order of its own; then ``engram
reprocess`` with the live configuration, twice, must derive the live derived log again, event
by event: the same ids, memory ids, promotions, summaries, forgettings and consolidations, in
the same order in every partition of ``memory.items`` and ``memory.lifecycle``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import ConsumerRecord, TopicPartition

from processors.batch_markers import logged_batches
from processors.batch_order import batches_at_markers, topic_rank
from processors.config import LifecycleRules, PruningRules, SummaryRules
from schemas.agent_events import AgentEvent, Decision, Observation
from schemas.codec import decode_derived_record, encode_event
from schemas.memory_events import DerivedEvent, DerivedUpTo, ScheduleTick, derived_topic_of
from schemas.topics import Topics
from streams.eventlog.dead_letters import latest_dead_letters
from streams.eventlog.derived_log import read_markers, read_records, read_to_end
from streams.eventlog.kafka_clients import record_producer
from streams.eventlog.publisher import AsyncPublisher, Position
from streams.privacy.sealing import RecordSealer
from streams.rebuild.reprocess import read_raw_partition
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import cli_env, invoke, isolated_settings, log_sealer

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

HOUSEHOLDS = [f"S{i:03d}" for i in range(180)]
"""Simulation agents: ten years of nine observations and a decision, one event of year 11."""
WALL_CLOCK = [f"W{i:02d}" for i in range(20)]
"""Agents without simulation time: ticks close their sessions; 91 events each."""
YEARS = range(1, 11)
PUBLISHERS = 4
START = datetime(2030, 1, 1, tzinfo=UTC)
LIFECYCLE = LifecycleRules(
    summaries=SummaryRules(sessions_per_chapter=3),
    pruning=PruningRules(l1_min_age=3, l1_min_age_seconds=1200, l2_min_age_seconds=3600),
)
"""Pruning within ten years and within a few ticks, so MUS (which retrievals feed) decides."""
IMPORTANCES = (0.3, 0.5, 0.62, 0.65, 0.68, 0.75, 0.9, 0.4, 0.66)
"""Around the gate (0.6), the promotion threshold (0.7) and the episodic threshold (0.7)."""
SKILLS = ("buy_insurance", "elevate_house", "do_nothing", "relocate")


def household_year(agent: str, year: int) -> list[AgentEvent]:
    n = int(agent[1:])
    common: dict[str, Any] = {"agent_id": agent, "agent_type": "household", "year": year}
    events: list[AgentEvent] = [
        Observation(
            **common,
            event_id=f"{agent}-{year}-{i}",
            occurred_at=datetime(2000 + year, 1 + i, 1 + n % 28, tzinfo=UTC),
            importance=IMPORTANCES[(n + year + i) % len(IMPORTANCES)],
            tags=("flood",) if i % 3 == 0 else ("street",),
            content=f"Year {year}: news {i} from street {n % 7}, river level {(n * i) % 11}",
        )
        for i in range(9)
    ]
    skill = SKILLS[(n + year) % len(SKILLS)]
    events.append(
        Decision(
            **common,
            event_id=f"{agent}-{year}-decision",
            occurred_at=datetime(2000 + year, 11, 1 + n % 28, tzinfo=UTC),
            importance=(0.62, 0.66, 0.8)[(n + year) % 3],
            skill=skill,
            content=f"Year {year}: I decided to {skill.replace('_', ' ')}",
        )
    )
    return events


def wall_clock_round(agent: str, round_: int, size: int = 9) -> list[AgentEvent]:
    n = int(agent[1:])
    return [
        Observation(
            agent_id=agent,
            event_id=f"{agent}-{round_}-{i}",
            occurred_at=START + timedelta(minutes=10 * round_, seconds=i),
            importance=IMPORTANCES[(n + round_ + i) % len(IMPORTANCES)],
            content=f"round {round_}: chat line {i} of agent {n}",
        )
        for i in range(size)
    ]


def events_of(publisher: int) -> list[list[AgentEvent]]:
    """What one publisher sends, lot by lot (a simulated year of its agents each)."""
    households = HOUSEHOLDS[publisher::PUBLISHERS]
    wall_clock = WALL_CLOCK[publisher::PUBLISHERS]
    lots = [
        [
            *(e for a in households for e in household_year(a, year)),
            *(e for a in wall_clock for e in wall_clock_round(a, year)),
        ]
        for year in YEARS
    ]
    lots.append(
        [
            *(household_year(a, 11)[0] for a in households),
            *(e for a in wall_clock for e in wall_clock_round(a, 11, size=1)),
        ]
    )
    return lots


def test_the_workload_is_twenty_thousand_events() -> None:
    assert sum(len(lot) for p in range(PUBLISHERS) for lot in events_of(p)) == 20_000


async def publish(bootstrap: str, topics: Topics, publisher: int) -> list[Position]:
    positions: list[Position] = []
    async with AsyncPublisher(bootstrap, topics=topics) as out:
        for lot in events_of(publisher):
            positions.extend(await out.publish_many(lot))
            await asyncio.sleep(0.01 * publisher)
    return positions


async def tick_until(done: asyncio.Event, bootstrap: str, topics: Topics, partitions: int) -> int:
    """Ticks on every partition, as the scheduler writes them, ten simulated minutes apart."""
    producer = record_producer(bootstrap)
    await producer.start()
    try:
        for n in itertools.count():
            for partition in range(partitions):
                tick = ScheduleTick(
                    event_id=f"tick-{n}-{partition}",
                    occurred_at=START + timedelta(minutes=10 * n),
                    partition=partition,
                    interval_seconds=600,
                )
                await producer.send_and_wait(
                    topics.schedule, encode_event(tick), partition=partition
                )
            if done.is_set():
                return n + 1
            await asyncio.sleep(0.25)
    finally:
        await producer.stop()
    raise AssertionError("unreachable")


async def retrieve_until(done: asyncio.Event, http: httpx.AsyncClient) -> int:
    """Agents recall their summaries while the worker derives, so that retrievals count."""
    agents = itertools.cycle([*HOUSEHOLDS[::9], *WALL_CLOCK[::2]])
    made = 0
    while not done.is_set():
        for agent in itertools.islice(agents, 4):
            response = await http.post(
                f"/v1/agents/{agent}/retrieve", json={"levels": [1, 2], "top_k": 5}
            )
            assert response.status_code == 200, response.text
            made += 1
        await asyncio.sleep(0.1)
    return made


async def raw_ends(bootstrap: str, topics: Topics, partitions: int) -> list[Position]:
    """The last record of every raw partition (read, since the broker's reported end is a
    lower bound on Tansu)."""
    names = (*topics.agent_inputs, topics.schedule, topics.access)
    tps = [TopicPartition(name, p) for name in names for p in range(partitions)]

    def ignore(tp: TopicPartition, record: ConsumerRecord[Any, Any]) -> None:
        return None

    reached = await read_to_end(bootstrap, tps, ignore, timeout=60)
    return [Position(tp.topic, tp.partition, end - 1) for tp, end in reached.items() if end > 0]


async def fetched_out_of_time_order(bootstrap: str, topics: Topics, partitions: int) -> int:
    """How many live batches held a record stamped after one that a later batch held."""
    markers = await read_markers(bootstrap, topics.lifecycle, range(partitions))
    crossed = 0
    for partition in range(partitions):
        records = await read_raw_partition(bootstrap, topics, partition)
        cut = batches_at_markers(records, markers[partition], topic_rank(topics), 1)
        stamps = [[r.timestamp_ms or 0 for r in batch] for batch in cut.marked]
        later = [min(s) for s in stamps[1:]]
        crossed += sum(
            1 for i, s in enumerate(stamps[:-1]) if max(s) > min(later[i:], default=max(s))
        )
    return crossed


LogByPartition = dict[tuple[str, int], list[DerivedEvent]]
"""Per derived topic ("items", "lifecycle") and partition, the events that count, in log order."""


async def counted_log(
    bootstrap: str, topics: Topics, partitions: int, sealer: RecordSealer
) -> LogByPartition:
    records = await read_records(
        bootstrap,
        (topics.items, topics.lifecycle),
        range(partitions),
        decode_derived_record,
        sealer=sealer,
        timeout=60,
    )
    logged = logged_batches(records, topics.schedule)
    assert not logged.partial, "a batch of this log was never marked"
    counted = {id(event) for event in logged.events}
    out: LogByPartition = defaultdict(list)
    for where, record in records:
        if not isinstance(record, DerivedUpTo) and id(record) in counted:
            out[(derived_topic_of(record), where.partition)].append(record)
    return dict(out)


def kinds(log: LogByPartition) -> Counter[str]:
    return Counter(type(e).__name__ for events in log.values() for e in events)


def differences(want: LogByPartition, got: LogByPartition) -> str:
    """What differs, as counts: the test's message when two logs are not equal."""
    lines = [f"event kinds: {dict(sorted(kinds(want).items()))}"]
    lines.append(f"    against: {dict(sorted(kinds(got).items()))}")
    for key in sorted(want.keys() | got.keys()):
        a, b = want.get(key, []), got.get(key, [])
        if a == b:
            continue
        first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        ids_a, ids_b = Counter(e.event_id for e in a), Counter(e.event_id for e in b)
        lines.append(
            f"{key}: {len(a)} vs {len(b)} events, {sum((ids_a - ids_b).values())} only in the "
            f"first, {sum((ids_b - ids_a).values())} only in the second, "
            f"{sum(x != y for x, y in zip(a, b, strict=False))} positions differ, "
            f"first at {first if first is not None else min(len(a), len(b))}"
        )
    return "\n".join(lines)


async def test_reprocess_with_the_live_configuration_derives_the_live_log_every_time(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    prefix = f"determ{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(
        prefix, tmp_path / "live", lifecycle=LIFECYCLE, schedule_interval=0
    )
    topics = Topics(prefix)
    partitions = settings.partitions

    node = await Node(settings, Endpoints(kafka_bootstrap, redis_server_url)).start()
    try:
        assert node.pipeline is not None
        assert node.http_url is not None
        assert node.recorder is not None
        done = asyncio.Event()
        async with httpx.AsyncClient(base_url=node.http_url, timeout=10) as http:
            ticking = asyncio.create_task(tick_until(done, kafka_bootstrap, topics, partitions))
            retrieving = asyncio.create_task(retrieve_until(done, http))
            published = await asyncio.gather(
                *(publish(kafka_bootstrap, topics, p) for p in range(PUBLISHERS))
            )
            await node.pipeline.stats.wait_for(
                [p for positions in published for p in positions], timeout=120
            )
            done.set()
            ticks, retrievals = await ticking, await retrieving
        recorder = node.recorder
        deadline = time.monotonic() + 90  # bounded; a loaded machine delivers slowly
        while recorder.delivered + recorder.failed < retrievals:
            assert time.monotonic() < deadline, "the retrievals were not recorded"
            await asyncio.sleep(0.05)
        assert recorder.failed == 0
        await node.pipeline.stats.wait_for(
            await raw_ends(kafka_bootstrap, topics, partitions), timeout=60
        )
        live_config = node.pipeline.config_version
        # Records the live worker took for derived already (a redelivery): none here unless a
        # rebalance redelivered some, which is when a run has gone wrong.
        skipped = node.pipeline.stats.skipped
    finally:
        await node.stop()
    lived = time.monotonic() - started

    env = cli_env(
        settings,
        kafka_bootstrap,
        redis_server_url,
        ENGRAM_LIFECYCLE=LIFECYCLE.model_dump_json(),
    )
    runs = []
    for version in ("v1", "v2"):
        result = await invoke(["reprocess", "--version", version], env)
        assert result.exit_code == 0, result.output
        assert f"configuration version {live_config}" in result.stdout, result.stdout
        runs.append(time.monotonic())

    async with log_sealer(redis_server_url, settings.redis_namespace) as sealer:
        live, first, second = [
            await counted_log(kafka_bootstrap, Topics(p), partitions, sealer)
            for p in (prefix, f"{prefix}v1.", f"{prefix}v2.")
        ]
    timing = (
        f"live {lived:.1f}s, reprocesses {runs[0] - started - lived:.1f}s and "
        f"{runs[1] - runs[0]:.1f}s, {ticks} ticks per partition, {retrievals} retrievals"
    )
    print(timing)

    # The rules fired, and the worker's batches did not follow the records' time: some batch
    # held a record stamped after one that a later batch held (else this proves little).
    seen = kinds(live)
    print(dict(sorted(seen.items())))
    for kind in ("MemoryPromoted", "MemorySummarised", "MemoryForgotten", "ConsolidationCompleted"):
        assert seen[kind] > 0, seen
    assert await fetched_out_of_time_order(kafka_bootstrap, topics, partitions)
    # (a) The same raw log, reprocessed twice with the same configuration: the same log.
    assert second == first, differences(first, second)
    # (b) And it is the live derived log. Where it is not, what the live worker refused says
    # most about why (a record it derived nothing from has a dead letter).
    if first != live:
        letters = await latest_dead_letters(kafka_bootstrap, [topics.deadletter], limit=3)
        refused = [f"{d.error_kind}: {d.reason[:300]}" for d in letters.latest]
        pytest.fail(
            f"{differences(live, first)}\nlive dead letters: {letters.total} {refused}; "
            f"records the live worker skipped as derived already: {skipped}"
        )
