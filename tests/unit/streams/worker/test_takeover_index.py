"""What a takeover concludes about the agent index: a batch's index entries are written before
either projection applies it, so only a batch that no projection applied may have lost them.
A projection whose durable checkpoint lags (Qdrant Edge's group commit) must not make every
restart distrust the index and send history reads back to scanning partitions."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from processors.state_fold import FoldedState
from streams.worker.pipeline import IngestPipeline
from tests.agent_streams import CONFIG, EMBEDDER
from tests.unit.streams.rebuild.test_projector_commits import TOPICS, recordings
from tests.unit.streams.worker.test_ingest_protocol import Broker, Store

SOURCE = (TOPICS.observations, 0)


@dataclass
class Index:
    distrusted: list[set[int]] = field(default_factory=list)

    async def set_whole(self, partitions: Iterable[int], whole: bool) -> None:
        if not whole:
            self.distrusted.append(set(partitions))


async def take_over(working_mark: int, episodic_mark: int) -> Index:
    broker, index = Broker(), Index()
    working = Store(broker.journal, {SOURCE: working_mark})
    episodic = Store(broker.journal, {SOURCE: episodic_mark})
    pipeline = IngestPipeline(CONFIG, EMBEDDER, TOPICS, working, episodic, broker.send)
    pipeline.agent_index = index  # type: ignore[assignment]
    folded = FoldedState(schedule_topic=TOPICS.schedule)
    folded.derived_upto[SOURCE] = 5
    await pipeline.take_over(folded, recordings(6))
    return index


async def test_a_lagging_projection_does_not_distrust_the_index() -> None:
    index = await take_over(working_mark=5, episodic_mark=2)
    assert index.distrusted == []


async def test_a_batch_no_projection_applied_distrusts_its_partition() -> None:
    index = await take_over(working_mark=3, episodic_mark=2)
    assert index.distrusted == [{0}]
