"""Summaries of memories: L1 session summaries and L2 chapter summaries (seed 001).

The summariser is an interface so that a deployment can plug a language model in; the default
is extractive and deterministic (no model, no network), so a reprocess of the log yields the
same summaries. Whatever a summariser returns is written into the log
(``MemorySummarised.content``), so a replay of the projections never calls it again.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal, Protocol

from processors.embedding import keywords


@dataclass(frozen=True)
class SummaryItem:
    """One memory to summarise, oldest first in a request."""

    content: str
    importance: float
    step: int | None
    year: int | None
    occurred_at: datetime


@dataclass(frozen=True)
class SummaryRequest:
    agent_id: str
    agent_type: str
    level: Literal[1, 2]
    items: Sequence[SummaryItem]


class Summariser(Protocol):
    @property
    def id(self) -> str:
        """Names the summariser and its version; recorded on every summary."""

    @property
    def blocking(self) -> bool:
        """True when ``summarise`` waits on a network: the caller then runs it off the loop."""

    def summarise(self, request: SummaryRequest) -> str:
        """The summary text: non-empty, at most ``MAX_SUMMARY_CHARS`` characters."""

    def summarise_with_origin(self, request: SummaryRequest) -> tuple[str, str]:
        """The summary and the id of the summariser that actually wrote it.

        A summariser that falls back to another one (a model that did not answer) must say so,
        so that the summary records its true origin rather than the one configured.
        """


MAX_SUMMARY_CHARS = 2000
ELLIPSIS = "\u2026"
_TERMINAL = frozenset(".!?" + ELLIPSIS)

# The prefix ExtractiveSummariser writes ("Year 4, steps 30-39 (6 memories): "); an L2 strips
# it from the L1s it quotes, as its own prefix already covers the whole range.
_RANGE = r"-?\d+(?:--?\d+)?"  # years may be negative: "Years -2-1"
_PERIOD = (
    rf"(?:Years? (?P<years>{_RANGE})(?:, steps? (?P<steps>{_RANGE}))?"
    rf"|Steps? (?P<only_steps>{_RANGE}))"
)
_COUNT = r"\(\d+ (?:memory|memories|summary|summaries)\)"
_PREFIX = re.compile(rf"^(?:{_PERIOD}(?: {_COUNT})?|{_COUNT}):\s*")
_SENTENCE_END = re.compile(r"(?<=[.!?\u2026])\s+")


def shorten(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters at a word boundary, marked with an ellipsis.

    A cut mid-word reads as a typo; the ellipsis tells a reader (or a model) that more was said.
    """
    if limit < 1:
        raise ValueError("limit must be at least 1")
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    if space > limit // 2:  # a boundary that keeps at least half; otherwise a hard cut
        head = head[:space]
    return head.rstrip(" ,;:-") + ELLIPSIS


def _span(values: Sequence[int], singular: str, plural: str) -> str:
    low, high = min(values), max(values)
    return f"{singular} {low}" if low == high else f"{plural} {low}-{high}"


def period_of(items: Sequence[SummaryItem]) -> str | None:
    """The years and steps the items cover ("Year 4, steps 30-39"), or None if none is known.

    A summary retrieved later must say when it happened: its memories are gone from the
    working set, and steps and years are what the simulation's agents reason in.
    """
    years = [item.year for item in items if item.year is not None]
    steps = [item.step for item in items if item.step is not None]
    return _period(years, steps)


def _bounds(text: str | None) -> list[int]:
    match = re.fullmatch(r"(-?\d+)(?:-(-?\d+))?", text or "")
    return [int(value) for value in match.groups() if value is not None] if match else []


def _chapter_period(items: Sequence[SummaryItem]) -> str | None:
    """The period of an L2: an L1 is stamped with one step, but its prefix names its whole range."""
    years = [item.year for item in items if item.year is not None]
    steps = [item.step for item in items if item.step is not None]
    for item in items:
        match = _PREFIX.match(item.content.strip())
        if match:
            years += _bounds(match["years"])
            steps += _bounds(match["steps"]) + _bounds(match["only_steps"])
    return _period(years, steps)


def _period(years: Sequence[int], steps: Sequence[int]) -> str | None:
    parts = []
    if years:
        parts.append(_span(years, "Year", "Years"))
    if steps:
        parts.append(_span(steps, "Step", "Steps"))
    if not parts:
        return None
    return ", ".join([parts[0], *(part.lower() for part in parts[1:])])


def strip_prefix(summary: str) -> str:
    """An L1 summary without the period-and-count prefix ``ExtractiveSummariser`` wrote."""
    return _PREFIX.sub("", summary, count=1)


def _as_sentence(text: str) -> str:
    return text if text[-1] in _TERMINAL else text + "."


@dataclass(frozen=True)
class _Unit:
    """A piece of text that is kept or dropped whole: a memory (L1) or a sentence of an L1 (L2)."""

    text: str
    importance: float
    position: int  # chronological: higher is more recent
    source: int  # the item it came from
    words: frozenset[str]


class ExtractiveSummariser:
    """The most salient memories, verbatim, in the order they happened.

    Salience is importance first (the processors already judged it), then how many of the
    request's recurring content words a memory mentions (what the period was about), then
    recency. No model and no network, so the same request always gives the same bytes and a
    reprocess of the log reproduces every summary.
    """

    DEFAULT_BUDGET = 600
    MIN_BUDGET = 80
    TOP_WORDS = 10

    def __init__(self, budget: int = DEFAULT_BUDGET) -> None:
        if not self.MIN_BUDGET <= budget <= MAX_SUMMARY_CHARS:
            raise ValueError(f"budget must be within {self.MIN_BUDGET}..{MAX_SUMMARY_CHARS}")
        self._budget = budget

    @property
    def id(self) -> str:
        # The budget changes the output, so a non-default one is part of the id.
        if self._budget == self.DEFAULT_BUDGET:
            return "extractive-v1"
        return f"extractive-v1-{self._budget}"

    @property
    def blocking(self) -> bool:
        return False

    @property
    def budget(self) -> int:
        return self._budget

    def summarise(self, request: SummaryRequest) -> str:
        if not request.items:
            raise ValueError("nothing to summarise: the request has no items")
        units = self._units(request)
        if not units:
            raise ValueError("nothing to summarise: every item is blank")
        prefix = self._prefix(request)
        room = self._budget - len(prefix)
        if room < self.MIN_BUDGET // 2:  # absurdly wide ranges: the memories matter more
            prefix, room = "", self._budget
        chosen = self._select(units, room)
        return prefix + " ".join(unit.text for unit in sorted(chosen, key=lambda u: u.position))

    def summarise_with_origin(self, request: SummaryRequest) -> tuple[str, str]:
        return self.summarise(request), self.id

    @staticmethod
    def _prefix(request: SummaryRequest) -> str:
        count = len(request.items)
        if request.level == 1:
            noun = "memory" if count == 1 else "memories"
        else:
            noun = "summary" if count == 1 else "summaries"
        period = period_of(request.items) if request.level == 1 else _chapter_period(request.items)
        return f"{period} ({count} {noun}): " if period else f"({count} {noun}): "

    @staticmethod
    def _units(request: SummaryRequest) -> list[_Unit]:
        # An L1 summary is several memories run together: an L2 picks among its sentences,
        # or a single long L1 would crowd out every other session of the chapter.
        texts: list[tuple[str, int]] = []
        for source, item in enumerate(request.items):
            content = " ".join(item.content.split())
            if request.level == 2:
                pieces = _SENTENCE_END.split(strip_prefix(content) or content)
            else:
                pieces = [content]
            texts.extend((piece, source) for piece in pieces if piece)
        return [
            _Unit(
                text=_as_sentence(text),
                importance=request.items[source].importance,
                position=position,
                source=source,
                words=frozenset(
                    word for word in keywords(text) if len(word) > 2 and not word.isdigit()
                ),
            )
            for position, (text, source) in enumerate(texts)
        ]

    def _select(self, units: list[_Unit], room: int) -> list[_Unit]:
        frequency = Counter(word for unit in units for word in unit.words)
        recurring = sorted(
            (word for word, n in frequency.items() if n > 1), key=lambda w: (-frequency[w], w)
        )
        top = frozenset(recurring[: self.TOP_WORDS])
        # Every item gets its best piece in before any gets a second one: a chapter covers all
        # its sessions. (An L1 item is one piece, so there this is plain salience order.)
        by_salience = sorted(units, key=lambda u: (-u.importance, -len(u.words & top), -u.position))
        turns: Counter[int] = Counter()
        rounds: dict[int, int] = {}
        for unit in by_salience:
            rounds[unit.position] = turns[unit.source]
            turns[unit.source] += 1
        ranked = sorted(by_salience, key=lambda u: rounds[u.position])  # stable
        # One long memory may take at most half the room, so the summary still covers the period.
        cap = room if len(units) == 1 else room // 2
        chosen: list[_Unit] = []
        used = -1  # the first text needs no separating space
        for unit in ranked:
            text = shorten(unit.text, cap)
            if used + 1 + len(text) <= room:
                # shorten hands back the text itself when it fits: no copy then.
                chosen.append(unit if text is unit.text else replace(unit, text=text))
                used += 1 + len(text)
        return chosen
