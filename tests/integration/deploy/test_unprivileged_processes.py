"""``engram worker`` and ``engram serve`` as the image runs them: UID 65532, in a working
directory owned by root, with ``ENGRAM_DATA_DIR`` on a volume they may write. Both must become
ready (their ``/readyz`` answers 200); without a writable data directory they must stop at
once with one line naming the setting. The worker's readiness must mean what the manifests'
probes take it to mean: its partitions taken over and their backlog processed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from projections.working.redis_store import RedisWorkingMemory
from schemas.topics import Topics
from streams.eventlog.publisher import AsyncPublisher
from streams.eventlog.topic_admin import ensure_topics
from tests.benchmarks.workload import make_events
from tests.integration.streams.isolated import isolated_settings
from tests.integration.streams.worker_process import WorkerProcess, worker_environment

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

IMAGE_UID = 65532
AS_IMAGE_USER = [
    "setpriv",
    f"--reuid={IMAGE_UID}",
    f"--regid={IMAGE_UID}",
    "--clear-groups",
]
READY_WITHIN_S = 90.0
"""Generous: a worker joins its group (a session timeout or two on the dev broker) first."""
EXIT_WITHIN_S = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_ready(process: WorkerProcess, url: str) -> dict[str, object]:
    """The body of the first 200 from ``url``, polling while the process lives."""
    deadline = time.monotonic() + READY_WITHIN_S
    last = "no answer"
    while time.monotonic() < deadline:
        process.check_alive()
        try:
            answer = httpx.get(url, timeout=5.0)
            if answer.status_code == 200:
                body: dict[str, object] = answer.json()
                return body
            last = f"{answer.status_code} {answer.text}"
        except httpx.TransportError as exc:
            last = repr(exc)
        time.sleep(0.2)
    raise AssertionError(
        f"{url} not ready within {READY_WITHIN_S}s (last: {last}):\n{process.tail()}"
    )


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory owned by root that every user may enter but not write (pytest's own
    temporary directories are private to root)."""
    path = Path(tempfile.mkdtemp(prefix="engram-image-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def image_user(shared_dir: Path) -> list[str]:
    """The command prefix that runs a process as the image's user, or a skip saying why not."""
    if os.geteuid() != 0:
        pytest.skip("dropping to UID 65532 needs root (the tests run as another user)")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    probe = subprocess.run(
        [*AS_IMAGE_USER, sys.executable, "-c", "import streams.cli.main"],
        env=os.environ.copy(),
        cwd=shared_dir,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if probe.returncode != 0:
        pytest.skip(f"UID 65532 cannot import Engram from this environment: {probe.stderr[-300:]}")
    return AS_IMAGE_USER


def volume(parent: Path, name: str) -> Path:
    """A directory UID 65532 may write, as a mounted volume with fsGroup would be."""
    path = parent / name
    path.mkdir()
    os.chown(path, IMAGE_UID, IMAGE_UID)
    return path


def role_env(
    prefix: str, data_dir: Path, kafka_bootstrap: str, redis_url: str, **extra: str
) -> dict[str, str]:
    settings = isolated_settings(prefix, data_dir, schedule_interval=0)
    env = worker_environment(settings, kafka_bootstrap, redis_url)
    del env["ENGRAM_QDRANT_PATH"]  # the Edge shard under ENGRAM_DATA_DIR, as in the image
    return env | {"HOME": str(data_dir)} | extra


async def test_a_worker_is_ready_once_it_processed_its_backlog(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    prefix = f"ready{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(prefix, tmp_path / "data", schedule_interval=0)
    topics = Topics(prefix)
    await ensure_topics(kafka_bootstrap, topics, settings.partitions)
    async with AsyncPublisher(kafka_bootstrap, topics=topics, linger=0.05) as publisher:
        positions = await publisher.publish_many(make_events(300, agents=12))
    last: dict[tuple[str, int], int] = {}
    for p in positions:
        last[(p.topic, p.partition)] = max(last.get((p.topic, p.partition), -1), p.offset)
    port = free_port()
    env = worker_environment(settings, kafka_bootstrap, redis_server_url)
    worker = WorkerProcess(env | {"ENGRAM_HEALTH_PORT": str(port)}, tmp_path / "worker.log")
    working = RedisWorkingMemory.from_url(redis_server_url, settings.redis_namespace)
    worker.start()
    try:
        body = await asyncio.to_thread(wait_until_ready, worker, f"http://127.0.0.1:{port}/readyz")
        assert body["checks"] == {"processors": "ok", "partitions": "ok"}
        # Ready means caught up: the projections already hold the whole backlog.
        behind = {
            tp: applied
            for tp, end in last.items()
            if (applied := await working.applied_offset(*tp)) is None or applied < end
        }
        assert not behind, (behind, last)
        async with httpx.AsyncClient(timeout=5.0) as client:
            live = await client.get(f"http://127.0.0.1:{port}/healthz")
        assert live.status_code == 200, live.text
    finally:
        worker.stop()
        await working.clear()
        await working.close()
        print(worker.tail(80))


def test_worker_and_query_service_run_as_the_image_user_from_a_root_owned_directory(
    kafka_bootstrap: str, redis_server_url: str, shared_dir: Path, image_user: list[str]
) -> None:
    prefix = f"uid{uuid.uuid4().hex[:8]}."
    worker_port, service_port = free_port(), free_port()
    app = shared_dir / "app"  # the image's WORKDIR: root's, not writable by the process
    app.mkdir(mode=0o755)
    worker = WorkerProcess(
        role_env(
            prefix,
            volume(shared_dir, "worker-data"),
            kafka_bootstrap,
            redis_server_url,
            ENGRAM_HEALTH_PORT=str(worker_port),
            # One process of a deployment holds its Qdrant Edge shards (the query service
            # here; the image's roles share a Qdrant server): the worker leaves episodic
            # memory to it, as workers beside `engram up` do.
            ENGRAM_EPISODIC_WRITER="projector",
        ),
        shared_dir / "worker.log",
        as_user=image_user,
        cwd=app,
    )
    service = WorkerProcess(
        role_env(
            prefix,
            volume(shared_dir, "service-data"),
            kafka_bootstrap,
            redis_server_url,
            ENGRAM_HTTP_PORT=str(service_port),
        ),
        shared_dir / "serve.log",
        role="serve",
        as_user=image_user,
        cwd=app,
    )
    try:
        worker.start()
        service.start()
        worker_ready = wait_until_ready(worker, f"http://127.0.0.1:{worker_port}/readyz")
        service_ready = wait_until_ready(service, f"http://127.0.0.1:{service_port}/readyz")
        assert worker_ready["status"] == "ok"
        assert service_ready["status"] == "ready"
        assert not any(app.iterdir()), "a process wrote into the root-owned working directory"
    finally:
        worker.stop()
        service.stop()
        print(worker.tail(40))
        print(service.tail(40))


@pytest.mark.parametrize("role", ["worker", "serve"])
def test_an_unwritable_data_dir_stops_the_process_in_one_line_naming_the_setting(
    kafka_bootstrap: str,
    redis_server_url: str,
    shared_dir: Path,
    image_user: list[str],
    role: str,
) -> None:
    env = role_env(f"nodir{uuid.uuid4().hex[:8]}.", shared_dir, kafka_bootstrap, redis_server_url)
    del env["ENGRAM_DATA_DIR"]  # the default, .engram, in the root-owned working directory
    env["COLUMNS"] = "400"  # one line on the console, whatever its length
    process = subprocess.run(
        [*image_user, str(Path(sys.executable).with_name("engram")), role],
        env=env,
        cwd=shared_dir,
        capture_output=True,
        text=True,
        timeout=EXIT_WITHIN_S,
    )
    assert process.returncode == 2, (process.returncode, process.stdout, process.stderr)
    lines = process.stderr.strip().splitlines()
    assert len(lines) == 1, process.stderr
    assert "ENGRAM_DATA_DIR=.engram" in lines[0]
    assert "not writable" in lines[0]
    assert "Traceback" not in process.stdout + process.stderr
