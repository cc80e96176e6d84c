"""How an Edge shard's segments are built, when the store optimizes them, and how many decoded
memories it keeps (:mod:`projections.episodic.decoded_memories`).

Edge runs no optimizer of its own: until ``optimize`` is called, every point lands in one
appendable segment, whose payload indexes are the mutable kind, so every read of every agent
pays for the whole shard. Measured in a shard of 100,000 points (100 agents x 1,000 memories):
one agent's 100 nearest took 0.85 ms before an optimization and 0.33 ms after, the BM25 match
with its IDF 1.46 ms and 0.37 ms, the candidates' query of a retrieval 3.45 ms and 1.70 ms.

So the store optimizes after every :data:`OPTIMIZE_EVERY` points it writes (see
:class:`OptimizeCadence`), and a shard is built so that this stays cheap:

- **No HNSW graph** (``m=0``). Every read filters by one agent, and a filtered read whose
  candidates are fewer than the full-scan threshold scans them exactly, graph or not; an agent
  holds at most its capacities' worth of memories. The graph was the costly part of optimizing
  (131 s for those 100,000 points on two cores with the default graph, 188 s with a graph per
  agent, 6.3 s without one), and exact search is what the ranking's tests compare against.
- **Merges bounded by** :data:`SEGMENT_KB`, so an optimization rewrites the points written
  since the last one plus a merge of small segments, never the whole shard: in a shard of
  100,000 synthetic points (random vectors, 300-byte payloads) each further 10,000 points took
  1.5-2.3 s to optimize when merges were unbounded (the time grew with the shard) and 0.2-0.7 s
  with 50 MB segments. The bound sits below what one :data:`OPTIMIZE_EVERY` holds, so the
  segment an optimization builds is never merged into the next one's.

The numbers are policy only (no client library here, so configuration can name them);
:mod:`projections.episodic.edge` turns them into the shard's configuration.

Edge holds the GIL while it optimizes, so the process pauses for that long; it is the price of
reads that stay flat as the shard grows, paid once per :data:`OPTIMIZE_EVERY` points. Not
flat everywhere: in an optimized shard of a million points (1,000 agents x 1,000), reads that
order an agent's points by ``seq`` or importance took 9.4 ms at the median against 3.4 ms for
its 100 nearest (tests/benchmarks/README.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

OPTIMIZE_EVERY = 30_000
"""Points written (upserted, retired or deleted) between two optimizations (``0``: never;
``ENGRAM_EDGE_OPTIMIZE_EVERY``). Each optimization then indexes a segment past
:data:`SEGMENT_KB`, which no merge rewrites again: the ingest benchmark's worker (60,000
events, ~74,000 points) spent 646 us of CPU per event without optimizing, 665 at 30,000 and 794
at 10,000, where each new segment was merged into the last (float32 shards, then)."""

SEGMENT_KB = 16_384
"""Edge's ``max_segment_size`` (kilobytes): it merges segments only into one below this size;
the segment an optimization indexes is not cut to it. One :data:`OPTIMIZE_EVERY` of points in
a float16 shard holds ~22 MB of vectors at 384 dimensions (twice that as float32), past the
bound with room for a cadence partly spent on retirements, so each optimization leaves the
segments before it alone. (Smaller embeddings, or a shorter cadence, make segments that are
merged again, as before.) At 65,536, the bound of float32 days, every other optimization
merged the segment before it into its own: 30,000 points of the ingest benchmark's memories
took 1.5-1.9 s to optimize alone and 4.7-4.9 s with the 30,000 before them, and 171,000 points
took 18.6 s in all against 10.0 at 20,000 (1.5-1.7 s each at 16,384). The price is more
segments, each read visiting every one: at 171,000 points (7 segments against 4) an agent's
100 nearest took 0.53 ms at the median against 0.44, its 100 newest 0.73 against 0.59."""

INDEXING_KB = 10_000
"""An optimization indexes an appendable segment once it holds this many kilobytes (Edge's
default); below, the segment is left as it is."""

SEARCH_THREADS = 1
"""Threads of the shard's search pool, which reads a query's segments in parallel. A read
filters by one agent, so each segment's part is small and handing it to another thread cost
more than it saved: the candidates' query of a retrieval took 1.79 ms (p99 2.59) with Edge's
default (one thread per CPU, two here) and 1.38 ms (p99 1.57) with one, in a shard of 100,000
points."""

FULL_SCAN_KB = 10_000
"""Below this many kilobytes of candidate vectors a filtered read scans them (Edge's default)."""


@dataclass
class OptimizeCadence:
    """Counts the points written since the last optimization; due after ``every`` (never
    when ``every`` is 0). A store opened counts from zero: what an earlier process wrote waits
    for the next due time."""

    every: int = OPTIMIZE_EVERY
    written: int = 0

    def __post_init__(self) -> None:
        if self.every < 0:
            raise ValueError(f"optimize_every must be 0 (never) or more, got {self.every}")

    def wrote(self, points: int) -> bool:
        """Count ``points`` more; whether an optimization is now due."""
        self.written += points
        return self.every > 0 and self.written >= self.every

    def optimized(self) -> None:
        self.written = 0


VECTOR_DATATYPES = ("float16", "float32")
"""How a shard can store its dense vectors."""

VECTOR_DATATYPE: Final = "float16"
"""How a new shard stores its dense vectors (``ENGRAM_EDGE_VECTORS``); a shard keeps the kind it
was made with. An agent's nearest memories are an exact scan of its vectors, and at 10,000 per
agent that scan is bound by memory bandwidth: 1.42 ms at the median as float32, 0.85-0.92 as
float16, in a shard of 100,000 points (10 agents). Half the bytes also halves the vectors' RAM
and disk. The price is precision: a cosine read from a float16 shard differs from the float32
one by up to 4.6e-4 (93 queries over 30,000 points), enough to reorder near-ties (recall on the
long-conversation benchmark did not move beyond them); ``float32`` keeps the exact cosine of
the vectors written."""

DECODED_MEMORIES = 50_000
"""How many decoded memories a store keeps, least recently read dropped first: the candidate
sets of some 200 agents of 1,000 memories. Measured with tracemalloc, a memory of ten words
and two tags takes ~0.8 KB kept as its field values, so ~40 MB at this bound."""
