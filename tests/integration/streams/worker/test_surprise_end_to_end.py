"""Arousal through the real worker: decisions published to the broker switch the agent to
System 2 in Redis when it breaks its habit (seed 003, section 2b), and a
worker that takes the partition over continues the agent's action history from the log."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from schemas.agent_events import Decision
from schemas.topics import Topics
from streams.eventlog.publisher import AsyncPublisher
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import isolated_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def decision(n: int, skill: str) -> Decision:
    return Decision(agent_id="D1", step=n, skill=skill, content=f"Step {n}: I chose to {skill}")


async def test_a_new_action_switches_to_system_2_and_a_new_worker_goes_on_counting(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    prefix = f"arousal{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(prefix, tmp_path)
    endpoints = Endpoints(kafka_bootstrap, redis_server_url)
    habit = [decision(n, "wait") for n in range(4)]
    async with AsyncPublisher(kafka_bootstrap, topics=Topics(prefix)) as publisher:
        first = await Node(settings, endpoints, run_service=False).start()
        try:
            assert first.pipeline is not None
            await first.pipeline.stats.wait_for(await publisher.publish_many(habit))
            settled = await first.working.arousal("D1")
            await first.pipeline.stats.wait_for([await publisher.publish(decision(4, "elevate"))])
            woken = await first.working.arousal("D1")
        finally:
            await first.stop()
        # Unigram DCS: the fourth "wait" has P = (3 + 1) / (3 + 2) = 0.8; "elevate" after four
        # waits P = (0 + 1) / (4 + 2).
        assert settled is not None
        assert (settled.observed, settled.system) == ("wait", "SYSTEM_1")
        assert settled.surprise == pytest.approx(0.2)
        assert woken is not None
        assert (woken.observed, woken.system) == ("elevate", "SYSTEM_2")
        assert woken.surprise == pytest.approx(5 / 6)

        second = await Node(settings, endpoints, run_service=False).start()
        try:
            assert second.pipeline is not None
            await second.pipeline.stats.wait_for([await publisher.publish(decision(5, "elevate"))])
            again = await second.working.arousal("D1")
        finally:
            await second.stop()
        # The folded history (wait x4, elevate x1): P = (1 + 1) / (5 + 3) = 0.25. A worker that
        # started the agent afresh would see a first decision: P = 1, surprise 0.
        assert again is not None
        assert again.surprise == pytest.approx(0.75)
        assert again.system == "SYSTEM_2"
