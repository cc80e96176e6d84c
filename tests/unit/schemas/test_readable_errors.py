"""A refused field reads as its rule in words, wherever it was refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from schemas.agent_events import Observation
from schemas.envelope import AGENT_ID_RULE
from schemas.readable_errors import readable_reason


def reasons(**fields: object) -> dict[str, str]:
    with pytest.raises(ValidationError) as refused:
        Observation.model_validate({"agent_id": "H1", "content": "x", **fields})
    return {".".join(map(str, e["loc"])): readable_reason(e) for e in refused.value.errors()}


def test_a_blank_text_and_a_bad_agent_id_read_as_their_rules() -> None:
    assert reasons(content=" \t\n", agent_id="a b") == {
        "content": "must not be blank (whitespace alone)",
        "agent_id": f"must be {AGENT_ID_RULE}",
    }


def test_other_reasons_are_pydantic_s_without_its_prefix() -> None:
    assert reasons(importance=2) == {"importance": "Input should be less than or equal to 1"}
    assert reasons(metadata={"a": float("inf")}) == {
        "metadata": "a: not a finite number (JSON has no Infinity or NaN)"
    }
