"""The command lines of a ``bash`` block: continuations joined, comments dropped, split into
variable assignments, the command, and what an ``echo ... |`` pipes into it."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


@dataclass(frozen=True)
class CommandLine:
    text: str
    """The line as written (continuations joined)."""
    argv: list[str]
    assignments: dict[str, str] = field(default_factory=dict)
    """``K=V`` before the command: the command's own environment (``export``: the session's)."""
    piped: list[str] | None = None
    """The ``echo`` whose output is piped into the command, if any."""


def command_lines(code: str) -> list[CommandLine]:
    lines: list[CommandLine] = []
    pending = ""
    for raw in code.splitlines():
        stripped = raw.strip()
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        text = (pending + stripped).strip()
        pending = ""
        if text and not text.startswith("#"):
            lines.append(parse_line(text))
    if pending.strip():
        lines.append(parse_line(pending.strip()))
    return lines


def parse_line(text: str) -> CommandLine:
    tokens = shlex.split(text, comments=True)
    piped = None
    if "|" in tokens:
        cut = tokens.index("|")
        piped, tokens = tokens[:cut], tokens[cut + 1 :]
        if "|" in tokens or not piped or piped[0] != "echo":
            raise ValueError(f"only `echo ... | command` is understood: {text}")
    assignments: dict[str, str] = {}
    if tokens and tokens[0] == "export":
        for token in tokens[1:]:
            name, _, value = token.partition("=")
            assignments[name] = value
        return CommandLine(text, ["export"], assignments)
    while tokens and _ASSIGNMENT.match(tokens[0]):
        name, _, value = tokens.pop(0).partition("=")
        assignments[name] = value
    return CommandLine(text, tokens, assignments, piped)
