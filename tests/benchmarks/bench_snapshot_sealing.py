"""What sealing costs a snapshot: one partition's agents' states encoded into chunk records and
read back, plain and sealed with each agent's key, as a worker writes them and a takeover reads
them (:mod:`processors.state_snapshot`); no broker and no keyring round trips.

    python -m tests.benchmarks.bench_snapshot_sealing [--agents 1000] [--memories 10] [--runs 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import UTC, datetime

from processors.recording import AgentMemoryState, WorkingEntry
from processors.state_snapshot import (
    PartitionSnapshot,
    SnapshotManifest,
    assemble,
    chunk_records,
    decode_snapshot_record,
    decode_state,
    manifest_record,
)
from schemas.sealed import AgentKey, new_agent_key, seal, unseal

AT = datetime(2026, 1, 1, tzinfo=UTC)


def partition(agents: int, memories: int) -> PartitionSnapshot:
    """``agents`` households, each ``memories`` working memories of 200 characters."""

    def entry(i: int) -> WorkingEntry:
        return WorkingEntry(
            memory_id=f"m{i}",
            seq=i,
            importance=0.5,
            content="x" * 200,
            tags=("flood",),
            kind=None,
            step=None,
            year=3,
            occurred_at=AT,
            source_event_id=f"e{i}",
            source_event_type="agent.observation",
            agent_type="household",
        )

    working = tuple(entry(i) for i in range(memories))
    states = {
        f"A{n:05d}": AgentMemoryState(next_seq=memories, working=working) for n in range(agents)
    }
    return PartitionSnapshot(0, states, {}, {}, {}, marker="m")


def once(
    snapshot: PartitionSnapshot, keys: dict[str, AgentKey] | None
) -> tuple[int, int, float, float]:
    """Chunks, bytes, seconds to write, seconds to read back (opened, if sealed)."""
    sealer: Callable[[str, bytes], bytes] | None = None
    if keys is not None:
        sealer = lambda agent, state: seal(keys[agent], state)  # noqa: E731
    started = time.perf_counter()
    records = chunk_records(snapshot, "s", seal=sealer)
    written = time.perf_counter() - started
    manifest = decode_snapshot_record(manifest_record(snapshot, "s", len(records), 0, AT))
    assert isinstance(manifest, SnapshotManifest)
    started = time.perf_counter()
    read = assemble(manifest, [decode_snapshot_record(r) for r in records])
    assert read is not None
    if keys is not None:
        opened = {a: decode_state(unseal(raw, keys[a])) for a, raw in read.sealed.items()}
        assert len(opened) == len(snapshot.states)
    read_back = time.perf_counter() - started
    return len(records), sum(map(len, records)), written, read_back


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--memories", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    snapshot = partition(args.agents, args.memories)
    keys = {agent: new_agent_key(agent) for agent in snapshot.states}
    print(f"agents={args.agents} memories={args.memories} runs={args.runs} (best of)")
    for label, sealed in (("plain", None), ("sealed", keys)):
        runs = [once(snapshot, sealed) for _ in range(args.runs)]
        chunks, size = runs[0][0], runs[0][1]
        write = min(r[2] for r in runs)
        read = min(r[3] for r in runs)
        print(
            f"{label:6}: {chunks} chunks, {size / 1e6:.1f} MB, "
            f"write {write * 1000:.0f} ms, read back {read * 1000:.0f} ms"
        )


if __name__ == "__main__":
    main()
