"""What deriving costs a worker, without the broker, the stores or sealing: the workload's
events turned into derived events batch after batch, the state carried between batches, as
the worker does it (:func:`processors.worker_step.derive_batch`).

Two embedders: the hashing one, and the same posing as a model (``batches_misses``: its calls
are dear, so the texts the rules make are embedded together after the batch is derived, see
``processors/batch_embedding.py``). The difference between the two is what deriving costs
around a model's calls, apart from the model itself.

    python -m tests.benchmarks.bench_deriving [--events 30000] [--agents 1000] [--batch 2000]
"""

from __future__ import annotations

import argparse
import time
import zlib
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np

from processors.batch import RawRecord
from processors.batch_order import topic_rank
from processors.config import load_processing_config
from processors.embedding import HashingEmbedder
from processors.lifecycle import Deriving
from processors.state_fold import FoldedState
from processors.summarising import ExtractiveSummariser
from processors.worker_step import carry, derive_batch
from schemas.codec import encode_event
from schemas.topics import Topics
from tests.benchmarks.workload import make_events

TOPICS = Topics("bench.")


class HashingAsAModel:
    """The hashing embedder with a model's promise: its calls are dear."""

    batches_misses = True

    def __init__(self, inner: HashingEmbedder) -> None:
        self.inner = inner

    @property
    def id(self) -> str:
        return self.inner.id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, text: str) -> np.ndarray:
        return self.inner.embed(text)

    def embed_many(self, texts: list[str]) -> np.ndarray:
        return self.inner.embed_many(texts)


def records_of(events: int, agents: int) -> list[RawRecord]:
    """The workload as the worker reads it: four partitions by agent, offsets per partition."""
    offsets: dict[tuple[str, int], int] = {}
    records = []
    now_ms = int(time.time() * 1000)
    for event in make_events(events, agents):
        topic = TOPICS.for_event_type(event.event_type)
        partition = zlib.crc32(event.agent_id.encode()) % 4
        offset = offsets.get((topic, partition), 0)
        offsets[(topic, partition)] = offset + 1
        records.append(
            RawRecord(
                topic,
                partition,
                offset,
                event.agent_id.encode(),
                encode_event(event),
                expected_type=event.event_type,
                timestamp_ms=now_ms,
            )
        )
    return records


def derive_all(records: list[RawRecord], ctx: Deriving, batch: int) -> tuple[float, int]:
    """Seconds to derive ``records`` in batches of ``batch``, and the events derived."""
    folded, partition_of = FoldedState(schedule_topic=TOPICS.schedule), dict[str, int]()
    rank = topic_rank(TOPICS)
    derived = 0
    started = time.perf_counter()
    for i in range(0, len(records), batch):
        step = derive_batch(
            records[i : i + batch],
            folded,
            partition_of,
            ctx=ctx,
            rank=rank,
            failed_at=datetime.now(UTC),
        )
        derived += len(step.result.derived)
        carry(folded, partition_of, step)
    return time.perf_counter() - started, derived


def main(events: int, agents: int, batch: int) -> None:
    records = records_of(events, agents)
    config = load_processing_config()
    hashing = HashingEmbedder(384)
    summariser = ExtractiveSummariser()
    ctx = Deriving(config, hashing, summariser, config.version(hashing.id, summariser.id))
    print(f"events={events} agents={agents} batch={batch}")
    for name, embedder in (("hashing", hashing), ("hashing posing as a model", None)):
        run_ctx = ctx if embedder is not None else replace(ctx, embedder=HashingAsAModel(hashing))
        seconds, derived = derive_all(records, run_ctx, batch)
        print(
            f"{name}: {seconds / events * 1e6:,.1f} us an event "
            f"({derived:,} derived events, {seconds:.2f} s)",
            flush=True,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--agents", type=int, default=1_000)
    parser.add_argument("--batch", type=int, default=2_000)
    args = parser.parse_args()
    main(args.events, args.agents, args.batch)
