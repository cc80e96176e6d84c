"""The fenced code blocks of the repository's README files, and the markers that exempt one.

A block is either run by the README test or carries, on the line directly before its opening
fence, ``<!-- readme-test: skip because REASON -->``. Blocks tagged ``text`` are pictures or
sample output, not commands; a block with any other tag than ``bash``, ``python`` or ``text``
(or none) is an error, so a command cannot slip past the test by its tag.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

README_ORDER = (
    "README.md",
    "projections/README.md",
    "processors/README.md",
    "deploy/README.md",
    "streams/README.md",
    "tests/README.md",
    "tests/benchmarks/README.md",
    "tests/benchmarks/data/README.md",
)
"""Every README of the repository, in the order the test reads them: README.md first, since
its commands start the stack and publish the memories the other files' commands use."""

RUN = ("bash", "python")
NOT_COMMANDS = ("text",)

_FENCE = re.compile(r"^```(\S*)\s*$")
_MARKER = re.compile(r"^<!--\s*readme-test:(.*?)-->\s*$")
_SKIP = re.compile(r"^\s*skip because (\S.*?)\s*$")


class ReadmeError(ValueError):
    """A README breaks the rule: a block of an unknown kind, or a marker that is not one."""


@dataclass(frozen=True)
class Block:
    path: str
    """The README, relative to the repository."""
    line: int
    """Line of the opening fence (1-based)."""
    language: str
    code: str
    skip: str | None
    """Why the test does not run it (from its marker); None: it is run."""

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def readme_files() -> list[str]:
    """Every README.md in the repository's own folders (not the virtualenv or data dirs)."""
    found = []
    for folder, subfolders, files in os.walk(REPO):
        subfolders[:] = [s for s in subfolders if not s.startswith(".") and ".egg" not in s]
        if "README.md" in files:
            found.append((Path(folder) / "README.md").relative_to(REPO).as_posix())
    return sorted(found)


def parse_blocks(path: str, text: str) -> list[Block]:
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            _refuse_stray_marker(path, lines, i)
            i += 1
            continue
        language = opening.group(1)
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ReadmeError(f"{path}:{i + 1}: a code block that is never closed")
        skip = _skip_reason(path, lines[i - 1] if i > 0 else "", i)
        if language not in RUN + NOT_COMMANDS:
            raise ReadmeError(
                f"{path}:{i + 1}: a code block tagged {language or '(nothing)'!r}: tag it "
                f"{', '.join(RUN)} (run by the test) or text (not a command)"
            )
        if language in RUN:
            code = "\n".join(lines[i + 1 : end])
            blocks.append(Block(path, i + 1, language, code, skip))
        elif skip is not None:
            raise ReadmeError(f"{path}:{i + 1}: a text block is never run; drop its marker")
        i = end + 1
    return blocks


def _skip_reason(path: str, previous: str, index: int) -> str | None:
    marker = _MARKER.match(previous.strip())
    if marker is None:
        return None
    reason = _SKIP.match(marker.group(1))
    if reason is None:
        raise ReadmeError(
            f"{path}:{index}: a readme-test marker says 'skip because REASON', "
            f"not {marker.group(1).strip()!r}"
        )
    return reason.group(1)


def _refuse_stray_marker(path: str, lines: list[str], i: int) -> None:
    """A marker exempts the block right after it; anywhere else it exempts nothing."""
    if _MARKER.match(lines[i].strip()) and not (i + 1 < len(lines) and _FENCE.match(lines[i + 1])):
        raise ReadmeError(f"{path}:{i + 1}: a readme-test marker not directly before a block")


def readme_blocks(path: str) -> list[Block]:
    return parse_blocks(path, (REPO / path).read_text(encoding="utf-8"))
