"""The wire contract: lossless round trips, stored payloads, and classified decode errors."""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import JsonValue

from schemas.agent_events import AGENT_EVENT_TYPES, Decision, Feedback, Observation
from schemas.codec import (
    CURRENT_VERSIONS,
    DecodeError,
    RecordOrigin,
    decode_agent_event,
    decode_derived_event,
    encode_event,
)
from schemas.envelope import NOT_WHITESPACE
from schemas.json_schema import export_json_schemas, json_schemas
from schemas.memory_events import ImportanceInputs, MemoryRecorded, decode_vector, encode_vector

FIXTURES = Path(__file__).parents[2] / "fixtures" / "events"

texts = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=200).filter(
    lambda text: re.search(NOT_WHITESPACE, text) is not None  # whitespace alone is refused
)
agent_ids = st.from_regex(r"[A-Za-z0-9_.:@\-]{1,40}", fullmatch=True)
times = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
tags = st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True), max_size=5).map(tuple)


@given(
    agent=agent_ids,
    content=texts,
    at=times,
    year=st.none() | st.integers(-5, 3000),
    tags=tags,
    importance=st.none() | st.floats(0, 1),
)
def test_observation_round_trip_is_lossless(
    agent: str,
    content: str,
    at: datetime,
    year: int | None,
    tags: tuple[str, ...],
    importance: float | None,
) -> None:
    event = Observation(
        agent_id=agent,
        content=content,
        occurred_at=at,
        year=year,
        tags=tags,
        importance=importance,
        metadata={"k": [1, "two", None]},
    )
    assert decode_agent_event(encode_event(event)) == event


@given(
    skill=st.from_regex(r"[a-z_]{1,20}", fullmatch=True),
    content=texts,
    params=st.dictionaries(
        st.text(max_size=5), st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5), max_size=3
    ),
)
def test_decision_round_trip_is_lossless(
    skill: str, content: str, params: dict[str, object]
) -> None:
    event = Decision(agent_id="A", skill=skill, content=content, parameters=params)  # type: ignore[arg-type]
    assert decode_agent_event(encode_event(event)) == event


@given(
    skill=st.from_regex(r"[a-z_]{1,20}", fullmatch=True),
    content=texts,
    at=times,
    params=st.dictionaries(
        st.text(max_size=5),
        st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
        max_size=3,
    ),
)
def test_encoding_is_orjson_of_the_json_dump(
    skill: str, content: str, at: datetime, params: dict[str, object]
) -> None:
    event = Decision(agent_id="A", skill=skill, content=content, occurred_at=at, parameters=params)  # type: ignore[arg-type]
    assert encode_event(event) == orjson.dumps(event.model_dump(mode="json"))


@given(vector=st.lists(st.floats(-1, 1, width=16), min_size=1, max_size=64))
def test_vectors_travel_exactly_as_float16(vector: list[float]) -> None:
    encoded = encode_vector(vector)
    assert encoded.startswith("f16:")
    assert decode_vector(encoded).tolist() == vector


@given(vector=st.lists(st.floats(-1, 1, width=32), min_size=1, max_size=64))
def test_unit_range_vectors_lose_at_most_half_precision(vector: list[float]) -> None:
    decoded = decode_vector(encode_vector(vector))
    assert decoded.dtype == np.float32
    # float16: 11 significant bits; below its smallest normal (6.1e-5) the step is 6e-8.
    for got, sent in zip(decoded.tolist(), vector, strict=True):
        assert abs(got - sent) <= max(abs(sent) * 2.0**-11, 2.0**-24)


@given(vector=st.lists(st.floats(-1, 1, width=32), min_size=1, max_size=64))
def test_float32_embeddings_of_older_logs_still_decode_exactly(vector: list[float]) -> None:
    older = base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    assert decode_vector(older).tolist() == vector


def test_memory_recorded_round_trip() -> None:
    event = MemoryRecorded(
        agent_id="H1",
        memory_id="m",
        agent_type="household",
        source_event_id="s",
        source_event_type="observation",
        seq=3,
        content="flood",
        importance=0.9,
        destination="episodic",
        scoring=ImportanceInputs(method="explicit"),
        embedding=encode_vector([0.5, -0.25]),
        embedder="hashing-v1-2",
        config_version="abc",
    )
    decoded = decode_derived_event(encode_event(event))
    assert decoded == event
    assert isinstance(decoded, MemoryRecorded)
    assert decoded.vector().tolist() == [0.5, -0.25]


@pytest.mark.parametrize(
    "path",
    sorted(p for p in FIXTURES.glob("*/v*.json") if p.parent.name in AGENT_EVENT_TYPES),
    ids=lambda p: f"{p.parent.name}-{p.stem}",
)
def test_every_stored_payload_decodes_to_a_current_event(path: Path) -> None:
    event = decode_agent_event(path.read_bytes())
    assert event.event_type == path.parent.name
    assert event.schema_version == CURRENT_VERSIONS[event.event_type]


def test_feedback_without_words_gets_a_description() -> None:
    event = Feedback(agent_id="A", target_event_id="dec-1", signal=-0.5)
    assert event.content == "Feedback -0.50 on event dec-1"


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        (b"{not json", "not_json"),
        (b"[1, 2]", "invalid"),
        (b'{"event_type": "telepathy"}', "unknown_event_type"),
        (
            b'{"event_type": "observation", "schema_version": 7, "agent_id": "A", "content": "x"}',
            "future_version",
        ),
        (
            b'{"event_type": "observation", "schema_version": "1", '
            b'"agent_id": "A", "content": "x"}',
            "invalid",
        ),
        (b'{"event_type": "observation", "agent_id": "A"}', "invalid"),
        (b'{"event_type": "observation", "agent_id": "has space", "content": "x"}', "invalid"),
        (b'{"event_type": "observation", "agent_id": "A", "content": "x", "colour": 1}', "invalid"),
        (
            b'{"event_type": "observation", "agent_id": "A", "content": "x", "importance": 2}',
            "invalid",
        ),
        (b'{"event_type": "memory.recorded", "agent_id": "A"}', "unknown_event_type"),
    ],
)
def test_bad_records_are_classified(raw: bytes, kind: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode_agent_event(raw)
    assert caught.value.kind == kind
    assert caught.value.reason


def test_integers_the_wire_cannot_carry_are_refused_at_validation() -> None:
    with pytest.raises(ValueError, match="not encodable"):
        Decision(agent_id="A", skill="s", content="x", parameters={"n": 2**70})


@pytest.mark.parametrize(
    ("metadata", "where"),
    [
        ({"a": float("inf")}, "a"),
        ({"depth": [1.0, {"max": float("nan")}]}, "depth[1].max"),
        ({"low": -float("inf")}, "low"),
    ],
)
def test_numbers_json_cannot_carry_are_refused_not_written_as_null(
    metadata: dict[str, JsonValue], where: str
) -> None:
    """orjson writes Infinity and NaN as null: 1e400 over MCP was recorded as null."""
    with pytest.raises(ValueError, match=re.escape(f"{where}: not a finite number")):
        Observation(agent_id="A", content="x", metadata=metadata)
    assert orjson.loads(encode_event(Observation(agent_id="A", content="x", metadata={"a": 1.5})))[
        "metadata"
    ] == {"a": 1.5}


def test_huge_content_is_refused() -> None:
    raw = orjson.dumps({"event_type": "observation", "agent_id": "A", "content": "x" * 20_000})
    with pytest.raises(DecodeError, match="content"):
        decode_agent_event(raw)


def test_an_event_on_the_wrong_topic_is_refused() -> None:
    raw = encode_event(Observation(agent_id="A", content="x"))
    with pytest.raises(DecodeError) as caught:
        decode_agent_event(raw, expected_type="decision")
    assert caught.value.kind == "wrong_topic"


def test_naive_timestamps_are_refused() -> None:
    raw = orjson.dumps(
        {
            "event_type": "observation",
            "agent_id": "A",
            "content": "x",
            "occurred_at": "2026-01-01T00:00:00",
        }
    )
    with pytest.raises(DecodeError, match="occurred_at"):
        decode_agent_event(raw)


def test_events_are_immutable() -> None:
    event = Observation(agent_id="A", content="x", occurred_at=datetime.now(UTC) - timedelta(1))
    with pytest.raises(ValueError, match="frozen"):
        event.content = "changed"  # type: ignore[misc]


def test_json_schemas_are_exported_for_every_event(tmp_path: Path) -> None:
    written = export_json_schemas(tmp_path)
    assert {p.name for p in written} == {
        f"{n}.v{CURRENT_VERSIONS.get(n, 1)}.schema.json" for n in json_schemas()
    }
    observation = orjson.loads((tmp_path / "observation.v2.schema.json").read_bytes())
    assert "agent_id" in observation["required"]
    assert observation["additionalProperties"] is False


ORIGIN = RecordOrigin("agent.observations", 3, 1041, timestamp_ms=1_764_000_000_123)
BARE = orjson.dumps({"agent_id": "K1", "content": "a record from a plain Kafka client"})


def test_a_record_without_a_type_takes_its_topics_type() -> None:
    event = decode_agent_event(BARE, expected_type="observation", origin=ORIGIN)
    assert isinstance(event, Observation)
    with pytest.raises(DecodeError) as refused:
        decode_agent_event(BARE, expected_type=None, origin=ORIGIN)
    assert refused.value.kind == "unknown_event_type"


def test_a_type_that_contradicts_the_topic_is_refused_by_name() -> None:
    decision = orjson.dumps({"event_type": "decision", "agent_id": "K1", "content": "c"})
    with pytest.raises(DecodeError) as refused:
        decode_agent_event(decision, expected_type="observation", origin=ORIGIN)
    assert refused.value.kind == "wrong_topic"


def test_missing_identity_and_time_come_from_the_record_not_the_parse() -> None:
    first = decode_agent_event(BARE, expected_type="observation", origin=ORIGIN)
    again = decode_agent_event(BARE, expected_type="observation", origin=ORIGIN)
    assert first == again
    assert first.occurred_at == datetime(2025, 11, 24, 16, 0, 0, 123_000, tzinfo=UTC)
    elsewhere = RecordOrigin(ORIGIN.topic, ORIGIN.partition, ORIGIN.offset + 1, None)
    other = decode_agent_event(BARE, expected_type="observation", origin=elsewhere)
    assert other.event_id != first.event_id


def test_identity_and_time_the_record_gives_are_kept() -> None:
    given_ = orjson.dumps(
        {
            "agent_id": "K1",
            "content": "c",
            "event_id": "turn-1",
            "occurred_at": "2024-01-01T00:00:00+00:00",
        }
    )
    event = decode_agent_event(given_, expected_type="observation", origin=ORIGIN)
    assert (event.event_id, event.occurred_at) == ("turn-1", datetime(2024, 1, 1, tzinfo=UTC))


def test_every_field_the_exported_schema_leaves_optional_is_filled_deterministically() -> None:
    """A record holding only what the exported schema requires is accepted, and decoding it
    twice gives the same event: no optional field is filled from the clock or a random id."""
    for name, model in AGENT_EVENT_TYPES.items():
        schema = json_schemas()[name]
        required = set(schema.get("required", []))
        assert "event_type" not in required
        minimal = {
            "agent_id": "K1",
            "content": "c",
            "skill": "s",
            "target_event_id": "e",
            "signal": 1,
        }
        minimal = {k: v for k, v in minimal.items() if k in schema["properties"]}
        assert required <= set(minimal), (name, required)
        raw = orjson.dumps(minimal)
        first = decode_agent_event(raw, expected_type=name, origin=ORIGIN)
        assert isinstance(first, model)
        assert first == decode_agent_event(raw, expected_type=name, origin=ORIGIN)


@pytest.mark.parametrize("content", ["   ", "\n\t", "\u3000"])
def test_whitespace_alone_is_no_content(content: str) -> None:
    """It was recorded as a memory of nothing."""
    raw = orjson.dumps({"agent_id": "P01", "content": content})
    with pytest.raises(DecodeError) as refused:
        decode_agent_event(raw, expected_type="observation")
    assert "content" in refused.value.reason
    assert Observation(agent_id="P01", content=" kept as given ").content == " kept as given "
