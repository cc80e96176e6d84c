"""The worker's consumer never commits past what the worker derived: Faust counts a jump in the
offsets it reads as acknowledged (its gap tracking), so after the worker held records back and
rewound (processors/source_order.py) it would commit over records not derived yet."""

from __future__ import annotations

from faust.types import TP

from schemas.topics import Topics
from streams.worker.app import commit_ceiling
from streams.worker.faust_tuning import capped_commits
from streams.worker.pipeline import IngestPipeline
from tests.agent_streams import CONFIG, EMBEDDER
from tests.unit.streams.worker.test_ingest_protocol import Broker, Store

TOPICS = Topics()
OBS = TOPICS.observations


def test_commits_are_capped_and_a_partition_without_room_is_left_out() -> None:
    ceilings = {OBS: 10, TOPICS.schedule: -1}

    def ceiling(topic: str, partition: int) -> int | None:
        return ceilings.get(topic)

    offsets = {TP(OBS, 0): 40, TP(TOPICS.schedule, 3): 7, TP("faust-leader", 0): 5}
    assert capped_commits(offsets, ceiling) == {TP(OBS, 0): 10, TP("faust-leader", 0): 5}
    assert capped_commits({TP(OBS, 0): 4}, ceiling) == {TP(OBS, 0): 4}


def test_the_ceiling_is_the_offset_after_the_last_derived() -> None:
    broker = Broker()
    pipeline = IngestPipeline(CONFIG, EMBEDDER, TOPICS, Store(broker.journal), None, broker.send)
    inputs = frozenset({OBS, TOPICS.schedule})
    pipeline.folded.derived_upto[(OBS, 2)] = 52
    assert commit_ceiling(pipeline, inputs, OBS, 2) == 53
    assert commit_ceiling(pipeline, inputs, OBS, 1) == -1, "no mark: not taken over, or released"
    assert commit_ceiling(pipeline, inputs, "faust-leader", 0) is None, "not an input: no cap"
