"""What a point's payload holds: the fields reads filter and order on, each written once."""

from __future__ import annotations

import orjson

from projections.memory import point_payload
from tests.unit.projections.test_event_dispatch import recorded

TAGGED = recorded("episodic").model_copy(update={"tags": ("Flood", "levee", "FLOOD")})


def test_a_hybrid_store_filters_tags_casefolded_and_keeps_them_as_given_in_the_memory() -> None:
    payload = point_payload(TAGGED, lexical=True)
    assert payload["tags_lc"] == ["flood", "levee"]
    assert "tags" not in payload
    assert orjson.loads(payload["memory"])["tags"] == ["Flood", "levee", "FLOOD"]


def test_a_store_from_before_hybrid_search_also_gets_the_tags_as_given() -> None:
    payload = point_payload(TAGGED, lexical=False)
    assert payload["tags"] == ["Flood", "levee", "FLOOD"]
    assert payload["tags_lc"] == ["flood", "levee"]


def test_an_untagged_memory_has_no_tag_fields() -> None:
    payload = point_payload(recorded("episodic"), lexical=False)
    assert "tags" not in payload
    assert "tags_lc" not in payload
