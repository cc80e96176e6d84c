"""Seconds until a worker is ready: after a first start on a backlog, then after a restart.

    python -m tests.benchmarks.bench_readiness [--events 20000] [--agents 1000]

An ``engram worker`` process (``ENGRAM_HEALTH_PORT`` set, as the manifests set it) starts on a
backlog published beforehand and is timed until ``/readyz`` answers 200: it has taken its
partitions over and processed what they held when they were assigned. It is then stopped with
SIGTERM and started again, and timed again: a restart takes the partitions over anew (folding
the derived log back, or a snapshot and the log after it with ``--snapshots``) and has nothing
left to process. Readiness probes, rolling restarts and the autoscaler all wait on this time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from streams.runtime.devstack.stack import DevStack
from tests.benchmarks.bench_ingest import publish_backlog

READY_WITHIN_S = 600.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "streams.cli.main", "worker"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def seconds_to_ready(worker: subprocess.Popen[bytes], url: str, log: Path) -> float:
    start = time.monotonic()
    while time.monotonic() - start < READY_WITHIN_S:
        if worker.poll() is not None:
            raise SystemExit(f"the worker exited with {worker.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(url, timeout=5.0).status_code == 200:
                return time.monotonic() - start
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} not ready within {READY_WITHIN_S:.0f}s:\n{log.read_text()[-4000:]}")


def stop(worker: subprocess.Popen[bytes]) -> None:
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(60)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait(10)


def main(events: int, agents: int, snapshots: bool) -> None:
    data = Path(tempfile.mkdtemp(prefix="engram-bench-readiness-"))
    stack = DevStack(data)
    endpoints = stack.start()
    prefix = f"r{uuid.uuid4().hex[:6]}."
    port = free_port()
    env = {
        **os.environ,
        "ENGRAM_KAFKA_BOOTSTRAP": endpoints.kafka_bootstrap,
        "ENGRAM_REDIS_URL": endpoints.redis_url,
        "ENGRAM_TOPIC_PREFIX": prefix,
        "ENGRAM_REDIS_NAMESPACE": prefix.rstrip("."),
        "ENGRAM_DATA_DIR": str(data / "worker"),
        "ENGRAM_QDRANT_PATH": str(data / "worker" / "qdrant-edge"),
        "ENGRAM_PARTITIONS": "4",
        "ENGRAM_SCHEDULE_INTERVAL": "0",
        "ENGRAM_HEALTH_PORT": str(port),
        "ENGRAM_METRICS_PORT": "0",
        "ENGRAM_SNAPSHOTS": "true" if snapshots else "false",
        "ENGRAM_LOG_FORMAT": "json",
    }
    url = f"http://127.0.0.1:{port}/readyz"
    log = data / "worker.log"
    try:
        # The worker creates the topics; the backlog waits for it on the broker.
        first = start_worker(env, log)
        seconds_to_ready(first, url, log)
        stop(first)
        publish_backlog(endpoints.kafka_bootstrap, prefix, events, agents)
        worker = start_worker(env, log)
        backlog = seconds_to_ready(worker, url, log)
        stop(worker)
        worker = start_worker(env, log)
        restart = seconds_to_ready(worker, url, log)
        stop(worker)
    finally:
        stack.stop()
        shutil.rmtree(stack.data_dir, ignore_errors=True)
    print(f"events={events} agents={agents} snapshots={'on' if snapshots else 'off'}")
    print(f"ready after a start on a backlog of {events:,} events: {backlog:.1f} s")
    print(f"ready after a restart with nothing left to process: {restart:.1f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--agents", type=int, default=1_000)
    parser.add_argument("--snapshots", action="store_true", help="ENGRAM_SNAPSHOTS=true")
    args = parser.parse_args()
    main(args.events, args.agents, args.snapshots)
