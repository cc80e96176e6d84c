"""What a person reads when a field is refused: pydantic's message where it is plain words, the
rule in words where pydantic would print the regular expression that checks it.

The HTTP service, the tools for LLM agents and the command line each name the field their own
way (a body's path, a tool's argument, an option) and share the reason, so one refusal reads
the same everywhere: a blank text was "must not be blank" over HTTP and the raw character class
``String should match pattern '[^\\t-\\r ...]'`` on the command line and in the tools.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schemas.envelope import AGENT_ID_PATTERN, AGENT_ID_RULE, NOT_WHITESPACE

__all__ = ["readable_reason"]

BLANK = "must not be blank (whitespace alone)"


def readable_reason(error: Mapping[str, Any]) -> str:
    """The reason of one pydantic error entry (``type``, ``msg``, ``ctx``)."""
    reason = str(error.get("msg", "invalid"))
    if error.get("type") == "string_pattern_mismatch":
        pattern = (error.get("ctx") or {}).get("pattern")
        if pattern == NOT_WHITESPACE:
            return BLANK
        if pattern == AGENT_ID_PATTERN:
            return f"must be {AGENT_ID_RULE}"
    return reason.removeprefix("Value error, ")
