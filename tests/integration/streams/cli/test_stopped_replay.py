"""`engram replay` stopped by Ctrl-C half way: the active version still serves, the command
says which version it left and how to finish it, and that command finishes it."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

from projections.versions import ProjectionVersions
from schemas.agent_events import Observation
from schemas.topics import Topics
from streams.eventlog.publisher import AsyncPublisher
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import cli_env, invoke, isolated_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ENGRAM = [sys.executable, "-c", "from streams.cli.main import app; app()"]


async def test_a_replay_stopped_by_ctrl_c_says_what_it_left_and_resumes(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    prefix = f"stopreplay{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(prefix, tmp_path, schedule_interval=0)
    node = await Node(settings, Endpoints(kafka_bootstrap, redis_server_url)).start()
    try:
        assert node.pipeline is not None
        async with AsyncPublisher(kafka_bootstrap, topics=Topics(prefix)) as publisher:
            published = await publisher.publish_many(
                [
                    Observation(agent_id=f"S{i % 8}", year=1, importance=0.9, content=f"n {i}")
                    for i in range(1_500)
                ]
            )
        await node.pipeline.stats.wait_for(published)
    finally:
        await node.stop()

    env = cli_env(settings, kafka_bootstrap, redis_server_url)
    registry = ProjectionVersions.from_url(
        redis_server_url, settings.redis_namespace, settings.qdrant_collection
    )
    # One event per write to each store: slow enough to be stopped half way.
    replay = await asyncio.create_subprocess_exec(
        *ENGRAM,
        "replay",
        "--batch-size",
        "1",
        env={**env, "PATH": "/usr/bin:/bin", "COLUMNS": "200"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not [i for i in await registry.versions() if i.version.name == "v1"]:
            assert replay.returncode is None, await replay.communicate()
            assert time.monotonic() < deadline, "the replay registered no version"
            await asyncio.sleep(0.02)
        replay.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(replay.communicate(), 60)
        said = " ".join((out + err).decode().split())
        assert replay.returncode == 128 + signal.SIGINT, said
        assert "Ctrl-C: stopped" in said
        assert "version v1 is partly built and not served" in said
        assert "engram replay --version v1 --resume" in said
        assert "Traceback" not in said
        states = {i.version.name: (i.state, i.active) for i in await registry.versions()}
        assert states["v1"] == ("building", False), states
        assert (await registry.active()).name is None
        assert await registry.fence() is None, "the fence is lowered on the way out"

        resumed = await invoke(["replay", "--version", "v1", "--resume"], env)
        assert resumed.exit_code == 0, resumed.output
        assert "switched (unversioned) -> v1" in resumed.stdout
        assert (await registry.active()).name == "v1"
    finally:
        with contextlib.suppress(ProcessLookupError):
            replay.kill()
        await registry.close()
