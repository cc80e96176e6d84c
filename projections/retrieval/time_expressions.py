"""Explicit time expressions of a query ("in 2023", "last August", "the summer of 2023"), read
as a window of years and months, and the memories that fall in it.

Why: a question about a period asks about what happened then; its words alone cannot tell a
memory of that summer from one of another summer. Each memory has a date (``occurred_at``), so
the engine can prefer the memories of the period. A memory whose own text names the period
("a cruise in August") counts too: plans are told before they happen.

What is read, and only this (anything else is words, left to the lexical signal):

- a year, four digits from 1900 to 2099;
- a month name or its usual abbreviation ("Aug", not "may", which is mostly a verb: "May"
  counts only capitalised, as a name);
- a season: spring March-May, summer June-August, autumn/fall September-November, winter
  December-February (northern hemisphere meteorological seasons: the engine knows no place);
- "this year", "last year", "this month", "last month", "last <month or season>" relative to
  the request's ``current_time``, when the request gives one (without it they are not read:
  the engine has no "now" of its own to anchor them to). "Last summer" is this year's once
  its last month is over, else last year's; a winter is read as its months of one calendar
  year.

A window with years and months holds a date when both match: "summer of 2023" is June-August
2023; a month without a year matches that month of any year. Prepositions are not read:
"after the spring" is read as the spring, "since 2021" as 2021.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

__all__ = ["MONTHS", "SEASONS", "TimeWindow", "mentions", "window_of"]

MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
SEASONS = {
    "spring": (3, 4, 5),
    "summer": (6, 7, 8),
    "autumn": (9, 10, 11),
    "fall": (9, 10, 11),
    "winter": (12, 1, 2),
}
_AMBIGUOUS = frozenset({"may", "mar", "jan", "dec", "sep", "oct", "nov", "jun", "jul", "aug"})
"""Month names that are also common words or abbreviations: read only when capitalised."""

WORD = re.compile(r"[A-Za-z]+|\d+")
YEAR = re.compile(r"(?:19|20)\d\d")


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """Years and months a date must fall in; None: any."""

    years: frozenset[int] | None
    months: frozenset[int] | None

    def holds(self, when: datetime) -> bool:
        return (self.years is None or when.year in self.years) and (
            self.months is None or when.month in self.months
        )


def _month_of(word: str) -> int | None:
    folded = word.casefold()
    if folded not in MONTHS or (folded in _AMBIGUOUS and not word[:1].isupper()):
        return None
    return MONTHS[folded]


def _months_of(word: str) -> tuple[int, ...]:
    month = _month_of(word)
    if month is not None:
        return (month,)
    return SEASONS.get(word.casefold(), ())


def window_of(text: str, now: datetime | None = None) -> TimeWindow | None:
    """The window the text's time expressions name (see the module docstring), or None when it
    names none. Several expressions unite: "in 2022 or 2023" holds both years."""
    words = WORD.findall(text)
    years: set[int] = set()
    months: set[int] = set()
    for index, word in enumerate(words):
        before = words[index - 1].casefold() if index > 0 else ""
        if YEAR.fullmatch(word):
            years.add(int(word))
            continue
        folded = word.casefold()
        if folded in ("year", "month") and before in ("this", "last") and now is not None:
            back = 1 if before == "last" else 0
            if folded == "year":
                years.add(now.year - back)
            else:
                month = (now.year * 12 + now.month - 1) - back
                years.add(month // 12)
                months.add(month % 12 + 1)
            continue
        named = _months_of(word)
        if not named:
            continue
        months.update(named)
        if before == "last" and now is not None:
            # This year's, once it is over; else last year's.
            years.add(now.year if now.month > max(named) else now.year - 1)
    if not years and not months:
        return None
    return TimeWindow(frozenset(years) or None, frozenset(months) or None)


def mentions(text: str, window: TimeWindow) -> bool:
    """Whether the text names a month of the window (or, for a window of years alone, one of
    its years): "a cruise to Alaska in August" mentions summer."""
    words = WORD.findall(text)
    if window.months is None:
        return any(YEAR.fullmatch(w) and int(w) in (window.years or ()) for w in words)
    return any(month in window.months for word in words for month in _months_of(word))
