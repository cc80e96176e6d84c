"""``GET /v1/agents/{agent_id}/surprise``: seed 003's ``get_cognitive_system()`` and
``get_surprise_trace()`` over HTTP, with the seed's safe defaults for an agent without a reading.
The app is the real one, its working store holding the readings the processor's own strategy
made (the seed's boiling-frog floods)."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from processors.config import Sensor, SymbolicSurprise
from processors.surprise import assess
from projections.service.client import AsyncEngramClient
from schemas.agent_events import Observation
from schemas.memory_events import SurpriseReading
from tests.unit.projections.test_service_validation import ListWorkingMemory, app_over, messages

BASE = "http://engram.test"
FLOOD = SymbolicSurprise(
    sensors=(Sensor(name="FLOOD", key="flood_depth", bands={"LOW": 0.0, "HIGH": 1.0}),)
)


def floods(years: int) -> SurpriseReading | None:
    """The reading after ``years`` floods in a row: 1.0, 0.5, 0.333, 0.25, ..."""
    last = None
    for year in range(1, years + 1):
        event = Observation(
            agent_id="H001",
            content=f"Year {year}: a flood",
            metadata={"flood_depth": 2.0},
            occurred_at=datetime(2026, 1, year, tzinfo=UTC),
        )
        last = assess(FLOOD, last, event) or last
    return last


class Readings(ListWorkingMemory):
    def __init__(self, readings: dict[str, SurpriseReading | None]) -> None:
        super().__init__()
        self.readings = readings

    async def arousal(self, agent_id: str) -> SurpriseReading | None:
        return self.readings.get(agent_id)


async def answer(readings: dict[str, SurpriseReading | None], path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app_over(Readings(readings)))
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
        return await client.get(path)


async def test_a_surprised_agent_is_in_system_2_with_its_trace() -> None:
    response = await answer({"H001": floods(1)}, "/v1/agents/H001/surprise")
    assert response.status_code == 200
    body = response.json()
    assert (body["agent_id"], body["system"], body["arousal"]) == ("H001", "SYSTEM_2", 1.0)
    assert body["trace"]["observed"] == "FLOOD:HIGH"
    assert body["trace"]["probability"] == 0.0


async def test_a_habituated_agent_is_back_in_system_1() -> None:
    response = await answer({"H001": floods(4)}, "/v1/agents/H001/surprise")
    body = response.json()
    assert body["system"] == "SYSTEM_1"
    assert body["arousal"] == pytest.approx(0.25)


async def test_without_a_reading_the_seeds_safe_defaults() -> None:
    response = await answer({}, "/v1/agents/H009/surprise")
    assert response.json() == {
        "agent_id": "H009",
        "system": "SYSTEM_1",
        "arousal": 0.0,
        "trace": None,
    }


async def test_a_bad_agent_id_is_refused_naming_the_rule() -> None:
    response = await answer({}, "/v1/agents/bad%20id/surprise")
    assert response.status_code == 422
    [said] = messages(response)
    assert said.startswith("agent_id: must be")


async def test_the_async_client_reads_it() -> None:
    transport = httpx.ASGITransport(app=app_over(Readings({"H001": floods(2)})))
    async with AsyncEngramClient(BASE, transport=transport) as client:
        read = await client.surprise("H001")
    assert (read.system, read.arousal) == ("SYSTEM_2", 0.5)
    assert read.trace is not None
    assert read.trace.probability == 0.5
