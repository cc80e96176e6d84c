"""Every command of the README files runs, and answers what the README says it does.

The rule, the same for every README.md of the repository: each fenced block is tagged
``bash`` or ``python`` (a command: run here) or ``text`` (a picture or sample output: never
run), and a command block that cannot run inside the suite (installing into a fresh
virtualenv, the test command itself, a benchmark, a Kubernetes cluster) carries the marker
``<!-- readme-test: skip because REASON -->`` on the line directly before it. Any other block,
or a command of a form :mod:`tests.integration.docs.session` does not know, fails the test.
Inline code in prose (`engram versions drop v1`) is not a block and is not run.

The files are read in one session, like one shell: README.md first (its ``engram up`` starts
the embedded dev stack, the same broker, redis-server and Qdrant Edge the session fixtures
run, and its commands publish the memories the other files' commands retrieve), then the
folder READMEs in :data:`README_ORDER`; a command sees what earlier ones exported, published
and started, and services run until the last file is done. How each kind of command is run
and checked, and how the README's example addresses become live ones, is in
:mod:`tests.integration.docs.session`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.integration.docs.blocks import (
    README_ORDER,
    Block,
    ReadmeError,
    parse_blocks,
    readme_blocks,
    readme_files,
)
from tests.integration.docs.session import DocSession

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_every_readme_is_read() -> None:
    assert sorted(README_ORDER) == readme_files()


def test_every_readme_command_runs(tmp_path: Path, kafka_bootstrap: str) -> None:
    blocks: list[Block] = [b for path in README_ORDER for b in readme_blocks(path)]
    session = DocSession(tmp_path, other_broker=kafka_bootstrap)
    try:
        for block in blocks:
            if block.skip is None:
                session.run(block)
        session.stop()
    finally:
        session.kill()


@pytest.mark.parametrize(
    ("markdown", "refused"),
    [
        ("```\nengram up\n```\n", "tagged '(nothing)'"),
        ("```sh\nengram up\n```\n", "tagged 'sh'"),
        ("<!-- readme-test: skip -->\n```bash\nx\n```\n", "skip because REASON"),
        ("<!-- readme-test: skip because slow -->\n\n```bash\nx\n```\n", "not directly before"),
        ("<!-- readme-test: skip because a picture -->\n```text\nx\n```\n", "never run"),
        ("```bash\nengram up\n", "never closed"),
    ],
)
def test_a_block_must_be_run_or_marked(markdown: str, refused: str) -> None:
    with pytest.raises(ReadmeError, match=re.escape(refused)):
        parse_blocks("README.md", markdown)


def test_a_marked_block_says_why() -> None:
    (block,) = parse_blocks(
        "README.md", "<!-- readme-test: skip because it installs -->\n```bash\npip install .\n```\n"
    )
    assert block.skip == "it installs"
