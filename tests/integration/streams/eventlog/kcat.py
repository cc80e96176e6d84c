"""kcat (Debian package ``kcat``: the C client librdkafka behind a command line), run as a user
would run it from a shell, with bounded waits.

In CI the tool must be there (``.ci/run`` installs it): a missing kcat fails the test there,
and skips it, saying why, on a developer's machine without it.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

KCAT_TIMEOUT = 30.0
"""Seconds one kcat run may take: it ends once its records are delivered, or read to the end."""

MURMUR2 = ("-X", "topic.partitioner=murmur2_random")
"""Kafka's default partitioner, the one Engram's publishers and the query service use: keyed
by agent id, an agent's records then land on the partition number its other records are on
(``streams.eventlog.history.partition_for``). librdkafka's own default (CRC32) picks another
one for most keys."""


def kcat_binary() -> str:
    found = shutil.which("kcat")
    if found is not None:
        return found
    reason = "kcat is not installed (Debian package kcat; .ci/run installs it)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: in CI it must be there", pytrace=False)
    pytest.skip(reason)


def librdkafka_version(kcat: str) -> tuple[int, int, int]:
    """The librdkafka that ``kcat`` runs on, from its ``-V`` banner."""
    banner = subprocess.run(
        [kcat, "-V"], capture_output=True, text=True, timeout=10, check=False
    ).stdout
    found = re.search(r"librdkafka (\d+)\.(\d+)\.(\d+)", banner)
    if found is None:
        raise AssertionError(f"no librdkafka version in kcat -V:\n{banner}")
    major, minor, patch = (int(part) for part in found.groups())
    return major, minor, patch


@dataclass(frozen=True)
class ReadRecord:
    """One record as kcat's JSON envelope (``-J``) shows it."""

    partition: int
    offset: int
    timestamp_ms: int
    key: str
    value: str


async def _run(argv: Sequence[str], stdin: bytes | None = None) -> bytes:
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(stdin), KCAT_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"{' '.join(argv)} did not finish within {KCAT_TIMEOUT}s") from None
    if process.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {process.returncode}:\n{err.decode()}")
    return out


async def produce(kcat: str, bootstrap: str, topic: str, keyed: Sequence[tuple[str, Any]]) -> None:
    """Publish each ``(key, JSON object)`` as one line ``KEY<TAB>JSON`` of one kcat run."""
    lines = b"".join(key.encode() + b"\t" + orjson.dumps(value) + b"\n" for key, value in keyed)
    await _run([kcat, "-P", "-b", bootstrap, "-t", topic, "-K", "\t", *MURMUR2], lines)


async def read_topic(kcat: str, bootstrap: str, topic: str) -> list[ReadRecord]:
    """Every record of ``topic``, from the beginning of each partition to its end."""
    out = await _run([kcat, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-J"])
    envelopes = [orjson.loads(line) for line in out.splitlines() if line.strip()]
    return [
        ReadRecord(e["partition"], e["offset"], e["ts"], e["key"], e["payload"]) for e in envelopes
    ]
