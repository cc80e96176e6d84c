"""Seed 002's tool selection as a pure rule: the most similar tool at or above the threshold,
ties to the higher success rate then the name, a miss naming the closest, exclusions."""

from __future__ import annotations

import numpy as np
import pytest

from processors.embedding import HashingEmbedder
from processors.plan_cache import cosine
from processors.tool_selection import (
    TOOL_SIMILARITY_THRESHOLD,
    ScoredTool,
    ToolCandidate,
    select_tool,
    similarity,
)

QUERY = np.array([1.0, 0.0, 0.0, 0.0])
AT_04 = np.array([2.0, 4.0, 2.0, 1.0])
"""Norm 5, dot 2 with QUERY: a cosine of exactly 2 / 5, the float 0.4 is."""
ALIGNED = np.array([3.0, 0.0, 0.0, 0.0])
ORTHOGONAL = np.array([0.0, 1.0, 0.0, 0.0])


def tool(name: str, *vectors: np.ndarray, rate: float = 0.5) -> ToolCandidate:
    return ToolCandidate(name, rate, vectors)


def test_the_seed_threshold_is_04() -> None:
    assert TOOL_SIMILARITY_THRESHOLD == 0.4


def test_a_similarity_of_exactly_the_threshold_is_selected() -> None:
    assert cosine(QUERY, AT_04) == 0.4
    chosen = select_tool(QUERY, [tool("SetPlayerAttribute", AT_04)])
    assert chosen.reason == "selected"
    assert chosen.selected == ScoredTool("SetPlayerAttribute", 0.4, 0.5)
    assert chosen.threshold == 0.4


def test_just_below_the_threshold_is_a_miss_naming_the_closest() -> None:
    above = float(np.nextafter(0.4, 1.0))
    chosen = select_tool(QUERY, [tool("SetPlayerAttribute", AT_04)], threshold=above)
    assert chosen.reason == "below_threshold"
    assert chosen.selected is None
    assert chosen.best == ScoredTool("SetPlayerAttribute", 0.4, 0.5)


def test_a_tool_scores_its_best_vector_and_the_best_tool_wins() -> None:
    """The description (orthogonal here) and an attached text (aligned): the max counts."""
    learned = tool("SetPlayerHealth", ORTHOGONAL, ALIGNED)
    described = tool("SetPlayerAttribute", AT_04, rate=0.9)
    assert similarity(QUERY, learned) == pytest.approx(1.0)
    chosen = select_tool(QUERY, [described, learned])
    assert chosen.selected is not None
    assert (chosen.selected.name, chosen.selected.similarity) == ("SetPlayerHealth", 1.0)


def test_no_success_rate_is_required() -> None:
    chosen = select_tool(QUERY, [tool("NewTool", ALIGNED, rate=0.0)])
    assert chosen.selected is not None
    assert chosen.selected.name == "NewTool"


def test_ties_go_to_the_higher_success_rate_then_the_first_name() -> None:
    tools = [tool("b", ALIGNED, rate=0.5), tool("c", ALIGNED, rate=0.7), tool("a", ALIGNED)]
    best = select_tool(QUERY, tools).selected
    assert best is not None
    assert best.name == "c"
    rest = select_tool(QUERY, tools, exclude={"c"}).selected
    assert rest is not None
    assert rest.name == "a"
    assert select_tool(QUERY, list(reversed(tools)), exclude={"c"}).selected == rest


def test_excluding_the_best_falls_to_the_next_or_to_a_miss() -> None:
    tools = [tool("Best", ALIGNED), tool("Next", AT_04), tool("Far", ORTHOGONAL)]
    assert select_tool(QUERY, tools).best == ScoredTool("Best", 1.0, 0.5)
    fallen = select_tool(QUERY, tools, exclude=frozenset({"Best"}))
    assert (fallen.reason, fallen.best) == ("selected", ScoredTool("Next", 0.4, 0.5))
    missed = select_tool(QUERY, tools, exclude=frozenset({"Best", "Next"}))
    assert (missed.reason, missed.best) == ("below_threshold", ScoredTool("Far", 0.0, 0.5))


def test_an_exclusion_naming_no_tool_is_ignored() -> None:
    chosen = select_tool(QUERY, [tool("Best", ALIGNED)], exclude={"Forgotten"})
    assert chosen.reason == "selected"


def test_no_tools_and_all_excluded_are_misses_without_a_closest() -> None:
    none = select_tool(QUERY, [])
    assert (none.reason, none.best, none.selected) == ("no_tools", None, None)
    excluded = select_tool(QUERY, iter([tool("Only", ALIGNED)]), exclude={"Only"})
    assert (excluded.reason, excluded.best) == ("all_excluded", None)


def test_a_tool_known_by_no_embedding_scores_as_unrelated() -> None:
    bare = tool("Bare")
    assert similarity(QUERY, bare) == 0.0
    assert select_tool(QUERY, [bare]).reason == "below_threshold"
    assert select_tool(QUERY, [bare], threshold=0.0).reason == "selected"


def test_the_seed_prompts_against_the_seed_description() -> None:
    """Seed 002's example with the default hashing embedder: "Set player speed to 20" fits
    SetPlayerAttribute (0.472), "Set player's health to 75" does not (0.280)."""
    embed = HashingEmbedder().embed
    attribute = tool(
        "SetPlayerAttribute",
        embed("Set an attribute of the player, such as speed or strength, to a value"),
    )
    speed = select_tool(embed("Set player speed to 20"), [attribute])
    health = select_tool(embed("Set player's health to 75"), [attribute])
    assert speed.reason == "selected"
    assert health.reason == "below_threshold"
    assert speed.best is not None
    assert health.best is not None
    assert speed.best.similarity == pytest.approx(0.4721, abs=1e-4)
    assert health.best.similarity == pytest.approx(0.2801, abs=1e-4)
