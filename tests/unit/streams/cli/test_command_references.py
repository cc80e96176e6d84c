"""Every ``engram ...`` command a message or docstring tells people to run exists.

A message naming a command that is not there sends a person nowhere at the moment they need
help (a failed switch once told people to run a command the CLI never had). The command is
read word by word from the text: each lowercase word after ``engram`` must be a command of the
group before it, until a leaf command (whose arguments follow) or the end of the reference (a
backtick, a bracket, an option, an uppercase placeholder). Prose after a group must therefore
close the reference first: "(`engram versions` lists them)".
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from streams.cli.main import app

ROOT = Path(__file__).parents[4]
PACKAGES = ("schemas", "processors", "projections", "streams")
REFERENCE = re.compile(r"(?<![\w.-])engram((?: [a-z][a-z0-9_-]*)+)")


def command_tree(command: Any) -> CommandTree:
    """The app's commands by name, each with its own (a leaf has none), recursively."""
    return {name: command_tree(sub) for name, sub in getattr(command, "commands", {}).items()}


CommandTree = dict[str, "CommandTree"]
COMMANDS = command_tree(typer.main.get_command(app))


def unknown_command(tree: CommandTree, words: list[str]) -> str | None:
    """The first word that names no command where it stands, or None if the words resolve."""
    for word in words:
        if not tree:
            return None  # a leaf command: the rest are its arguments, or prose
        if word not in tree:
            return word
        tree = tree[word]
    return None


def string_literals(path: Path) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def references() -> Iterator[tuple[str, str]]:
    """``(where, words after engram)`` for every command named in the packages' strings."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for line, text in string_literals(path):
                for match in REFERENCE.finditer(text):
                    yield f"{path.relative_to(ROOT)}:{line}", match.group(1)


def test_every_command_named_in_a_message_exists() -> None:
    found = list(references())
    assert len(found) > 20, "the scan found too few references to be reading the sources"
    wrong = [
        f"{where}: engram{words} ({word!r} is not a command there)"
        for where, words in found
        if (word := unknown_command(COMMANDS, words.split())) is not None
    ]
    assert not wrong, "\n".join(wrong)


def test_the_scan_catches_a_command_that_does_not_exist() -> None:
    assert {"up", "publish", "forget-agent", "versions", "schemas"} <= COMMANDS.keys()
    assert {"activate", "drop"} == COMMANDS["versions"].keys()
    assert unknown_command(COMMANDS, ["versions", "switch"]) == "switch"
    assert unknown_command(COMMANDS, ["versions", "activate"]) is None
    assert unknown_command(COMMANDS, ["up", "prints", "it"]) is None
    assert unknown_command(COMMANDS, ["upgrade"]) == "upgrade"
    [match] = REFERENCE.finditer("later (engram versions switch)")
    assert match.group(1).split() == ["versions", "switch"]
    assert not list(REFERENCE.finditer("logging.getLogger('engram.cli'), ENGRAM_URL"))
