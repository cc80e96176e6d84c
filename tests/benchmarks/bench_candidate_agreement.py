"""How far each mode's ranking of the store's candidates is from its ranking of the whole pool,
past the candidate bound.

    python -m tests.benchmarks.bench_candidate_agreement [--agents 10] [--memories 10000]
        [--bounds 100 50] [--requests 40] [--top-k 10]

The pools of ``bench_retrieval`` (made by the real processors, applied to a real redis-server
and Qdrant Edge) are read by the retrieval engine in this process, once reading each agent's
whole pool and once per bound reading the candidates with that bound for every mode (both
``candidate_limit`` and ``relevance_candidate_limit``). For each mode it prints the share of
the whole pool's top k that the candidates' top k held, and how many answers were the same
list. A whole-pool ranking is the reference here, not a measure of quality: ``relevance`` also
reads the turns beside its best, which a whole-pool read does not (recall is measured by
``bench_long_conversation``).
"""

from __future__ import annotations

import argparse
import asyncio
import random
from pathlib import Path

from processors.embedding import HashingEmbedder
from projections.episodic.factory import open_episodic_store
from projections.retrieval.engine import RetrievalEngine
from projections.retrieval.models import RetrievalRequest
from projections.working.redis_store import RedisWorkingMemory
from tests.benchmarks.bench_retrieval import MODES, WORDS, load
from tests.benchmarks.servers import fresh_servers, scratch_dir

COMPARED = ("two_phase", "weighted", "weighted + query", "generative", "relevance")


async def agreement(
    redis_url: str, data: Path, agents: int, memories: int, args: argparse.Namespace
) -> None:
    embedder = HashingEmbedder()
    working = RedisWorkingMemory.from_url(redis_url, namespace="bench")
    episodic = await open_episodic_store(
        qdrant_url=None, qdrant_path=data, collection="engram_episodic", dim=embedder.dim
    )

    def engine(bound: int | None) -> RetrievalEngine:
        return RetrievalEngine(
            working,
            episodic,
            embedder,
            episodic_limit=memories,
            candidate_limit=bound,
            relevance_candidate_limit=bound or 1,
        )

    whole, bounded = engine(None), {bound: engine(bound) for bound in args.bounds}
    rng = random.Random(5)
    print("| mode | bound | share of the whole pool's top k held | same answer |")
    print("|---|---|---|---|")
    try:
        for mode in COMPARED:
            held = dict.fromkeys(args.bounds, 0)
            same = dict.fromkeys(args.bounds, 0)
            shown = 0
            for _ in range(args.requests):
                body = {**MODES[mode], "top_k": args.top_k}
                if "query" in body:
                    body["query"] = " ".join(rng.sample(WORDS, 3))
                request = RetrievalRequest.model_validate(body)
                agent = f"A{rng.randrange(agents):05d}"
                reference = [m.memory_id for m in (await whole.retrieve(agent, request)).results]
                shown += len(reference)
                for bound, candidates in bounded.items():
                    answer = await candidates.retrieve(agent, request)
                    got = [m.memory_id for m in answer.results]
                    held[bound] += len(set(got) & set(reference))
                    same[bound] += got == reference
            for bound in args.bounds:
                share = held[bound] / max(shown, 1)
                print(f"| {mode} | {bound} | {share:.3f} | {same[bound]} of {args.requests} |")
    finally:
        await working.close()
        await episodic.close()


def main(args: argparse.Namespace) -> None:
    with scratch_dir("engram-agreement-") as data, fresh_servers() as (_, redis_url):
        asyncio.run(load(redis_url, data, args.agents, args.memories))
        print(f"{args.agents} agents x {args.memories} memories, top {args.top_k}")
        asyncio.run(agreement(redis_url, data, args.agents, args.memories, args))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--memories", type=int, default=10_000, help="per agent")
    parser.add_argument("--bounds", type=int, nargs="+", default=[100, 50])
    parser.add_argument("--requests", type=int, default=40, help="per mode")
    parser.add_argument("--top-k", type=int, default=10)
    args = parser.parse_args()
    if min(args.bounds) < 1 or args.memories <= 10 or args.requests < 1:
        parser.error("bounds and requests must be at least 1, memories above 10")
    main(args)
