"""Seed 002's tool selection, with procedures as the tools: the one tool to use for a prompt,
or a miss that tells the agent to define a new one.

A tool's similarity to a prompt is the highest cosine between the prompt's embedding and the
tool's: its description's, and those of the texts upvotes attached to it (seed 002's
"additional prompt embeddings"), so a tool found right for a prompt is found again for it. The
most similar tool is selected when its similarity is at least the threshold (seed 002's
``TOOL_SIMILARITY_THRESHOLD``, 0.4, inclusive); below it, the agent is better served by a new
tool than by a poor fit. A downvoted tool is excluded on the retry (``exclude``), so the same
prompt falls to the next tool, or to a miss.

Unlike recalling procedures, no success rate is required: a tool just created stands at 0.5,
and seed 002 selects it by meaning alone. The success rate only breaks ties, then the name,
so the same tools and prompt always select the same tool.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from processors.plan_cache import cosine

TOOL_SIMILARITY_THRESHOLD = 0.4
"""Seed 002's threshold: at or above it a known tool fits the prompt."""

SelectionReason = Literal["selected", "below_threshold", "no_tools", "all_excluded"]
"""Why a selection came out as it did: a tool fits; the closest does not; the agent has no
tool; every tool it has was excluded."""


@dataclass(frozen=True)
class ToolCandidate:
    """A tool as selection sees it: its name, its success rate (for ties), and the
    embeddings it is known by (its description's and its attached texts')."""

    name: str
    success_rate: float
    vectors: tuple[np.ndarray, ...]


@dataclass(frozen=True)
class ScoredTool:
    name: str
    similarity: float
    success_rate: float


@dataclass(frozen=True)
class ToolSelection:
    """``best`` is the selected tool when ``reason`` is ``selected``, the closest one when it is
    ``below_threshold``, and None when no tool was left to compare."""

    reason: SelectionReason
    best: ScoredTool | None
    threshold: float

    @property
    def selected(self) -> ScoredTool | None:
        return self.best if self.reason == "selected" else None


def similarity(query: np.ndarray, tool: ToolCandidate) -> float:
    """The tool's best match to ``query``; 0.0, as for an unrelated text, for a tool known by
    no embedding, which nothing can be found similar to."""
    return max((cosine(query, v) for v in tool.vectors), default=0.0)


def select_tool(
    query: np.ndarray,
    tools: Iterable[ToolCandidate],
    *,
    threshold: float = TOOL_SIMILARITY_THRESHOLD,
    exclude: Collection[str] = frozenset(),
) -> ToolSelection:
    """The tool for the prompt embedded as ``query`` among ``tools`` not named in ``exclude``:
    the most similar (then the higher success rate, then the first name), selected if its
    similarity is at least ``threshold``. Names in ``exclude`` that name no tool are ignored:
    a retry may exclude a tool that was since forgotten."""
    known = list(tools)
    if not known:
        return ToolSelection("no_tools", None, threshold)
    scored = [
        ScoredTool(tool.name, similarity(query, tool), tool.success_rate)
        for tool in known
        if tool.name not in exclude
    ]
    if not scored:
        return ToolSelection("all_excluded", None, threshold)
    best = min(scored, key=lambda t: (-t.similarity, -t.success_rate, t.name))
    reason: SelectionReason = "selected" if best.similarity >= threshold else "below_threshold"
    return ToolSelection(reason, best, threshold)
