"""The mem0 side of ``bench_vs_mem0``, run by the interpreter of mem0's own virtualenv.

    <mem0 venv>/bin/python -m tests.benchmarks.mem0_child RECORDS.json WORKDIR

mem0 is no dependency of Engram, so this module imports only the standard library, mem0 and
Engram's hashing embedder (numpy alone). It builds mem0's ``Memory`` with its default stores
(qdrant-client's embedded local mode and the SQLite history, both under WORKDIR), swaps its
embedder for Engram's 384-dimension hashing embedder, adds the warm-up records, then times
``Memory.add(..., infer=False)`` over the measured ones. It prints one JSON line: the adds, the
seconds, mem0's version and every network connection attempted (an audit hook refuses them all:
with ``infer=False`` mem0 needs no model, and a refused connection must show, not hide).
"""

from __future__ import annotations

import json
import socket
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from processors.embedding import HashingEmbedder

DIM = 384
NETWORK_ATTEMPTS: list[str] = []


def refuse_network(event: str, args: tuple[Any, ...]) -> None:
    """Record and refuse every connection or name lookup that is not a local socket file."""
    if event == "socket.connect":
        sock, address = args
        if sock.family == socket.AF_UNIX:
            return
        NETWORK_ATTEMPTS.append(f"connect {address!r}")
        raise ConnectionRefusedError(f"the mem0 benchmark allows no network: {address!r}")
    if event == "socket.getaddrinfo":
        NETWORK_ATTEMPTS.append(f"getaddrinfo {args[0]!r}")
        raise ConnectionRefusedError(f"the mem0 benchmark allows no network: {args[0]!r}")


def build_memory(workdir: Path) -> Any:
    """mem0's Memory with its default providers, local paths and Engram's embedder.

    The default config names OpenAI for the LLM and the embedder; their clients are built (with
    a placeholder key, never used) but not called: ``infer=False`` skips the LLM, and the
    embedder is replaced before the first add.
    """
    from mem0 import Memory
    from mem0.configs.base import MemoryConfig
    from mem0.embeddings.base import EmbeddingBase

    class EngramHashingEmbedding(EmbeddingBase):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self._embedder = HashingEmbedder(DIM)

        def embed(self, text: str, memory_action: str | None = None) -> list[float]:
            vector: list[float] = self._embedder.embed(text).tolist()
            return vector

    unused_key = {"api_key": "not-used-infer-false"}
    config = MemoryConfig(
        vector_store={
            "provider": "qdrant",
            "config": {
                "path": str(workdir / "qdrant"),
                "embedding_model_dims": DIM,
                "collection_name": "engram_bench",
            },
        },
        llm={"provider": "openai", "config": unused_key},
        embedder={"provider": "openai", "config": {**unused_key, "embedding_dims": DIM}},
        history_db_path=str(workdir / "history.db"),
    )
    memory = Memory(config)
    memory.embedding_model = EngramHashingEmbedding()
    return memory


def add_all(memory: Any, records: list[dict[str, Any]], splits: int = 1) -> list[tuple[int, float]]:
    """Add every record; (adds, seconds elapsed) after each of ``splits`` parts and at the end,
    which shows whether mem0 slows down as it fills."""
    every = max(len(records) // splits, 1)
    elapsed: list[tuple[int, float]] = []
    start = time.perf_counter()
    for i, record in enumerate(records, 1):
        result = memory.add(
            record["text"], agent_id=record["agent_id"], metadata=record["metadata"], infer=False
        )
        if len(result["results"]) != 1:
            raise RuntimeError(f"mem0 stored {result!r} for one record")
        if i % every == 0 or i == len(records):
            elapsed.append((i, time.perf_counter() - start))
    return elapsed


def main(records_path: Path, workdir: Path) -> None:
    sys.addaudithook(refuse_network)
    records = json.loads(records_path.read_text())
    memory = build_memory(workdir)
    add_all(memory, records["warmup"])
    splits = add_all(memory, records["measured"], splits=10)
    stored = memory.vector_store.client.count(collection_name="engram_bench").count
    print(
        json.dumps(
            {
                "adds": len(records["measured"]),
                "seconds": splits[-1][1],
                "splits": splits,
                "stored": stored,
                "version": version("mem0ai"),
                "network": NETWORK_ATTEMPTS,
            }
        )
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
