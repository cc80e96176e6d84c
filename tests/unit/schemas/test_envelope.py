"""The envelope's bounds: what a publisher accepts, a worker decodes."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from schemas.agent_events import Observation
from schemas.codec import RecordOrigin, decode_agent_event, encode_event
from schemas.envelope import TIME_BOUND

ORIGIN = RecordOrigin(topic="agent.observations", partition=0, offset=7)


@pytest.mark.parametrize("field", ["year", "step"])
def test_a_time_at_the_bound_travels_to_the_worker(field: str) -> None:
    event = Observation(agent_id="H001", content="the river rose", **{field: TIME_BOUND})
    decoded = decode_agent_event(encode_event(event), origin=ORIGIN)
    assert getattr(decoded, field) == TIME_BOUND


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("year", TIME_BOUND + 1),
        ("year", -TIME_BOUND - 1),
        ("year", 10**20),
        ("step", TIME_BOUND + 1),
        ("step", 10**20),
        ("step", -1),
    ],
)
def test_a_time_past_the_bound_is_refused_where_it_is_published(field: str, value: int) -> None:
    """Not accepted by the publisher only for the worker to dead-letter it: a year of 10^20
    used to be published and then failed the worker's JSON decoder (past 64 bits)."""
    with pytest.raises(ValidationError, match=field):
        Observation(agent_id="H001", content="the river rose", **{field: value})


def test_a_year_before_zero_stands() -> None:
    assert Observation(agent_id="H001", content="x", year=-TIME_BOUND).year == -TIME_BOUND
