"""The text source patterns are matched in (seed 003's source reliability: personal, neighbor,
community), and the patterns themselves: lowercased, every run of punctuation and whitespace
one space. Both sides alike, so a pattern written " my " finds the word after a line break, a
quote or a bracket, and one written "co-worker" finds "co-worker" (the text's hyphen is a space
too)."""

from __future__ import annotations

import re

__all__ = ["source_pattern", "source_text"]

_SEPARATORS = re.compile(r"[^\w'%]+|(?<!\w)'|'(?!\w)")
"""Anything but letters, digits, ``%`` (a community figure) and an apostrophe inside a word
(``i've``)."""


def source_text(content: str) -> str:
    """``content`` as patterns are matched in it, a space at either end."""
    return f" {_SEPARATORS.sub(' ', content.lower())} "


def source_pattern(pattern: str) -> str:
    """``pattern`` as it is matched: its spaces, which mark where a word ends, are kept."""
    return _SEPARATORS.sub(" ", pattern.lower())
