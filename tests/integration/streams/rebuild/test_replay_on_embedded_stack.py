"""`engram replay --drop-old` from another shell while `engram up` runs: the new version serves
exactly the memory the running stack served, episodic memories included.

The running stack holds the Qdrant Edge shards of its projection versions; the replay is
another process. Both must agree on where the new version's shard lives, and the stack must
open it only once the replay has let go of it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from streams.runtime.devstack.ports import free_port
from streams.runtime.devstack.stack import DevStack
from tests.integration.streams.embedded_stack import ENGRAM, engram_up

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

AGENT = "H042"
OBSERVATIONS = [
    ("Year 1: the creek rose over the garden path", 0.3),
    ("Year 1: a neighbour lent us sandbags", 0.5),
    ("Year 1: the ground floor flooded, $40,000 in damages", 0.9),
]
"""Two working memories and one episodic (importance at or above the episodic threshold)."""


def engram(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*ENGRAM, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done


def retrieve(port: int, env: dict[str, str]) -> list[dict[str, Any]]:
    answer = engram(
        ["retrieve", AGENT, "--year", "1", "--top-k", "10", "--url", f"http://127.0.0.1:{port}"],
        env,
    )
    results: list[dict[str, Any]] = json.loads(answer.stdout)["results"]
    return results


def retrieve_until(port: int, env: dict[str, str], count: int, timeout: float) -> list[Any]:
    deadline = time.monotonic() + timeout
    while True:
        results = retrieve(port, env)
        if len(results) >= count or time.monotonic() > deadline:
            return results
        time.sleep(0.2)


def memory(result: dict[str, Any]) -> tuple[str, str, str, float]:
    return result["memory_id"], result["store"], result["content"], result["importance"]


def test_replay_from_another_process_serves_the_same_memories(tmp_path: Path) -> None:
    port = free_port()
    with engram_up(tmp_path, port, workers=1) as (up, banner):
        bootstrap = re.search(r"kafka bootstrap\s+(\S+)", banner)
        redis_url = re.search(r"redis\s+(redis://\S+)", banner)
        assert bootstrap, banner
        assert redis_url, banner
        # What the banner says to set, in a shell of its own.
        env = {
            **os.environ,
            "ENGRAM_DATA_DIR": str(tmp_path),
            "ENGRAM_KAFKA_BOOTSTRAP": bootstrap.group(1),
            "ENGRAM_REDIS_URL": redis_url.group(1),
        }
        for content, importance in OBSERVATIONS:
            engram(["publish", AGENT, content, "--importance", str(importance), "--year", "1"], env)
        live = retrieve_until(port, env, len(OBSERVATIONS), timeout=30)
        assert sorted(r["store"] for r in live) == ["episodic", "working", "working"], live

        replayed = engram(["replay", "--drop-old"], env)
        assert "switched (unversioned) -> v1" in replayed.stdout, replayed.stdout
        assert "dropped version (unversioned)" in replayed.stdout, replayed.stdout

        # The replay returns once no process uses the old version: the stack serves v1 now.
        after = retrieve(port, env)
        assert sorted(map(memory, after)) == sorted(map(memory, live))
        versions = engram(["versions"], env)
        assert re.search(r"v1 \*", versions.stdout), versions.stdout
        # Built, and the old one dropped, where the stack holds its shards.
        shards = DevStack(tmp_path).edge_path
        assert sorted(p.name for p in shards.iterdir()) == ["engram_episodic_v1"]
        assert not (tmp_path / "qdrant-edge").exists()

        up.send_signal(signal.SIGTERM)
        assert up.wait(60) == 0
        assert up.stdout is not None
        output = up.stdout.read()
        # The replay let go of the new version's shard before the switch: the stack opened it
        # at once.
        assert "switched projection version (unversioned) -> v1" in output, output
        assert "cannot follow" not in output, output
