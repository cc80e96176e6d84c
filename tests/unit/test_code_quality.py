"""ruff and mypy (strict) stay clean: part of the test command, so CI keeps them so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
BIN = Path(sys.executable).parent


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_lint_and_format_are_clean() -> None:
    lint = run(str(BIN / "ruff"), "check", ".")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = run(str(BIN / "ruff"), "format", "--check", ".")
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


@pytest.mark.timeout(600)
def test_mypy_strict_is_clean() -> None:
    result = run(str(BIN / "mypy"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_domain_imports_no_client_library() -> None:
    """Only streams/ and projections/ talk to Kafka, Redis and Qdrant (ruff TID251)."""
    banned = ("faust", "aiokafka", "redis", "qdrant_client", "qdrant_edge")
    for folder in ("schemas", "processors"):
        for path in (ROOT / folder).rglob("*.py"):
            for line in path.read_text().splitlines():
                words = line.split()
                if len(words) >= 2 and words[0] in ("import", "from"):
                    assert words[1].split(".")[0] not in banned, f"{path}: {line}"
