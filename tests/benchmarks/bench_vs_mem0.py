"""Engram's end-to-end ingest against the open-source mem0 library adding the same events.

    python -m tests.benchmarks.bench_vs_mem0 [--events 60000] [--agents 1000]
        [--mem0-venv ~/.cache/engram-bench/mem0-venv] [--mem0 mem0ai==2.2.1]

Both sides get the same workload (``workload.make_events``: a warm-up of 800 events, then
``--events`` measured ones) and the same 384-dimension hashing embedder
(``processors/embedding.py``).

- Engram: ``bench_ingest``'s end-to-end run, one worker process: published from a separate
  process to the broker, derived (lifecycle rules on) and applied to Redis and Qdrant Edge; the
  clock runs from the start of publishing until the last event is applied in both projections.
- mem0: ``Memory.add(text, agent_id=..., metadata=..., infer=False)`` per event, one process,
  with mem0's default stores (qdrant-client's embedded local mode and the SQLite history) on the
  same disk; no LLM is called with ``infer=False``. mem0 is installed into a virtualenv of its
  own (created on the first run), never into Engram's, and runs there
  (``tests/benchmarks/mem0_child.py``) with its telemetry off and every network connection
  refused; the run fails if mem0 attempted one.

Prints both rates and ``ratio: X`` (Engram events/s over mem0 adds/s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schemas.agent_events import AgentEvent
from streams.runtime.devstack.stack import DevStack
from tests.benchmarks.bench_ingest import Rate, engram_rate
from tests.benchmarks.workload import make_events

ROOT = Path(__file__).parents[2]
DEFAULT_VENV = Path.home() / ".cache" / "engram-bench" / "mem0-venv"
DEFAULT_MEM0 = "mem0ai==2.2.1"
WARMUP_EVENTS = 800
"""As many as ``engram_rate`` publishes before its clock starts."""


class BenchmarkError(Exception):
    """A setup step failed; the message says which and why."""


@dataclass(frozen=True)
class Mem0Result:
    adds: int
    seconds: float
    stored: int
    version: str
    splits: list[tuple[int, float]]
    """(adds, seconds elapsed) along the measured adds."""

    @property
    def rate(self) -> float:
        return self.adds / self.seconds


def mem0_record(event: AgentEvent) -> dict[str, Any]:
    """What mem0 is given for one event: the text Engram remembers, scoped to the agent, with
    the fields Engram keeps beside it as metadata (JSON values only)."""
    metadata: dict[str, Any] = {
        "event_id": str(event.event_id),
        "event_type": event.event_type,
        "agent_type": event.agent_type,
        "year": event.year,
    }
    for field in ("kind", "skill"):
        value = getattr(event, field, None)
        if value is not None:
            metadata[field] = value
    return {"text": event.content, "agent_id": event.agent_id, "metadata": metadata}


def requirement_version(requirement: str) -> str | None:
    """The version a ``name==version`` requirement pins, None when it pins none."""
    _, _, pinned = requirement.partition("==")
    return pinned.strip() or None


def installed_mem0(python: Path) -> str | None:
    if not python.exists():
        return None
    probe = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('mem0ai'))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return probe.stdout.strip() if probe.returncode == 0 else None


def ensure_mem0_venv(venv: Path, requirement: str) -> Path:
    """The interpreter of a virtualenv holding ``requirement``, created or upgraded if needed."""
    python = venv / "bin" / "python"
    have = installed_mem0(python)
    want = requirement_version(requirement)
    if have is not None and (want is None or have == want):
        return python
    steps = [] if python.exists() else [[sys.executable, "-m", "venv", str(venv)]]
    steps.append([str(python), "-m", "pip", "install", "--quiet", requirement])
    for step in steps:
        print(f"mem0 virtualenv: {' '.join(step)}", file=sys.stderr)
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            raise BenchmarkError(f"{' '.join(step)} did not finish in 900 s") from None
        if done.returncode != 0:
            raise BenchmarkError(f"{' '.join(step)} failed:\n{done.stderr[-2000:]}")
    if installed_mem0(python) is None:
        raise BenchmarkError(f"mem0ai is not importable from {python} after installing it")
    return python


def parse_child_report(stdout: str) -> Mem0Result:
    """The child's last stdout line; a run that tried the network is no measurement."""
    lines = stdout.strip().splitlines()
    if not lines:
        raise BenchmarkError("the mem0 run printed no report")
    report = json.loads(lines[-1])
    if report["network"]:
        raise BenchmarkError(f"mem0 attempted network connections: {report['network']}")
    return Mem0Result(
        adds=report["adds"],
        seconds=report["seconds"],
        stored=report["stored"],
        version=report["version"],
        splits=[(int(adds), float(seconds)) for adds, seconds in report["splits"]],
    )


def mem0_rate(python: Path, events: int, agents: int) -> Mem0Result:
    """mem0's adds/s over the same events, in its own interpreter and a fresh directory."""
    workdir = Path(tempfile.mkdtemp(prefix="engram-bench-mem0-"))
    records = workdir / "records.json"
    records.write_text(
        json.dumps(
            {
                "warmup": [mem0_record(e) for e in make_events(WARMUP_EVENTS, agents)],
                "measured": [mem0_record(e) for e in make_events(events, agents)],
            }
        )
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "MEM0_TELEMETRY": "False",
        "MEM0_DIR": str(workdir / "mem0-home"),
    }
    command = [str(python), "-m", "tests.benchmarks.mem0_child", str(records), str(workdir)]
    timeout = 300 + events / 20  # far beyond mem0's pace here (~200 adds/s)
    try:
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise BenchmarkError(f"the mem0 run did not finish in {timeout:.0f} s") from None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if done.returncode != 0:
        raise BenchmarkError(f"the mem0 run failed:\n{done.stderr[-3000:]}")
    result = parse_child_report(done.stdout)
    if result.stored != WARMUP_EVENTS + events:
        raise BenchmarkError(f"mem0 holds {result.stored} memories, not {WARMUP_EVENTS + events}")
    return result


async def engram_side(events: int, agents: int) -> Rate:
    stack = DevStack(Path(tempfile.mkdtemp(prefix="engram-bench-")))
    endpoints = stack.start()
    try:
        return await engram_rate(stack, endpoints, events, agents, workers=1)
    finally:
        stack.stop()
        shutil.rmtree(stack.data_dir, ignore_errors=True)


def main(events: int, agents: int, venv: Path, requirement: str) -> None:
    python = ensure_mem0_venv(venv, requirement)
    # Engram first, its servers stopped before mem0 runs: neither shares the cores with the
    # other's idle processes.
    load_before_engram = os.getloadavg()[0]
    engram = asyncio.run(engram_side(events, agents))
    load_before_mem0 = os.getloadavg()[0]
    mem0 = mem0_rate(python, events, agents)
    print(f"events={events} agents={agents} (after a warm-up of {WARMUP_EVENTS} each)")
    print(
        f"load average (1 min) before engram {load_before_engram:.1f}, "
        f"before mem0 {load_before_mem0:.1f}, after {os.getloadavg()[0]:.1f}"
    )
    print(
        f"engram (1 worker process, publish to applied in Redis + Qdrant Edge): "
        f"{engram.per_second:,.0f} events/s, {engram.cpu_us_per_event:,.0f} us CPU per event"
    )
    print(
        f"mem0 {mem0.version} (Memory.add infer=False, local Qdrant + SQLite history): "
        f"{mem0.rate:,.0f} adds/s ({mem0.seconds:.1f} s)"
    )
    print("mem0 elapsed: " + ", ".join(f"{a:,} adds {s:.1f} s" for a, s in mem0.splits))
    print(f"ratio: {engram.per_second / mem0.rate:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--agents", type=int, default=1_000)
    parser.add_argument("--mem0-venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--mem0", default=DEFAULT_MEM0, help="the pip requirement for mem0")
    args = parser.parse_args()
    if args.events < 1 or args.agents < 1:
        parser.error("--events and --agents must be at least 1")
    try:
        main(args.events, args.agents, args.mem0_venv, args.mem0)
    except BenchmarkError as exc:
        sys.exit(f"bench_vs_mem0: {exc}")
