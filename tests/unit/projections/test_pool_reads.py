"""Which candidates a retrieval asks the episodic store for."""

from __future__ import annotations

from projections.retrieval.models import MAX_CONTEXT_TAGS, RetrievalRequest
from projections.retrieval.pool_reads import signals_for


def test_the_weighted_context_asks_for_memories_tagged_with_the_querys_keywords() -> None:
    """Seed 003's C matches memory tags against the prompt too, so a memory tagged "flood" must
    be among the candidates of a query that names a flood."""
    request = RetrievalRequest(mode="weighted", tags=("Danger",), query="A FLOOD is coming")
    assert signals_for(request, None, 100).tags == ("danger", "flood", "coming")


def test_a_long_query_asks_for_a_bounded_number_of_tags() -> None:
    query = " ".join(f"word{i}" for i in range(3 * MAX_CONTEXT_TAGS))
    tags = signals_for(RetrievalRequest(mode="weighted", query=query), None, 100).tags
    assert tags[:2] == ("word0", "word1")
    assert len(tags) == MAX_CONTEXT_TAGS


def test_other_modes_ask_for_no_tags() -> None:
    request = RetrievalRequest(mode="generative", tags=("flood",), query="flood")
    assert signals_for(request, None, 100).tags == ()
