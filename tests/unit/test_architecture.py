"""The shape of the tree, kept by tests: dependencies point inward and modules stay small.

The layers, innermost first: ``schemas`` (the event contracts), ``processors`` (pure rules),
``projections`` (read models and the query service), ``streams`` (the bus and the processes).
A module may import its own layer and the layers inside it, never one outside: the domain can
then be read and tested without Kafka, and a projection without the worker. Inside ``streams``,
process assembly (``streams.runtime``, the CLI, the demo) sits on top: the worker, the log
readers, the rebuild jobs and the privacy code never import it, so each runs in a test without
a node or a dev stack.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
LAYERS = ("schemas", "processors", "projections", "streams")
ASSEMBLY = ("streams.runtime", "streams.cli", "streams.demo")

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
MAX_MODULES_DIRECTLY_IN_STREAMS = 10


def modules() -> Iterator[tuple[str, Path]]:
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            yield name, path


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """Every module a file imports, wherever the import stands (in a function, under
    ``TYPE_CHECKING``): a deferred import is still a dependency."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_layers_import_only_inward() -> None:
    wrong = []
    for name, path in modules():
        layer = LAYERS.index(name.split(".")[0])
        for line, target in imported_modules(path):
            top = target.split(".")[0]
            if top in LAYERS and LAYERS.index(top) > layer:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not wrong, "imports pointing outward:\n" + "\n".join(wrong)


def test_process_assembly_is_imported_only_from_the_top() -> None:
    wrong = []
    for name, path in modules():
        if any(within(name, top) for top in ASSEMBLY):
            continue
        for line, target in imported_modules(path):
            if any(within(target, top) for top in ASSEMBLY):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not wrong, "process assembly imported from below:\n" + "\n".join(wrong)


def test_modules_stay_small() -> None:
    long = [
        f"{path.relative_to(ROOT)}: {count} lines"
        for _, path in modules()
        if (count := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(long)


def test_functions_stay_short() -> None:
    long = []
    for _, path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                count = node.end_lineno - node.lineno + 1
                if count > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {count}")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def test_streams_keeps_its_modules_in_rooms() -> None:
    direct = sorted(p.name for p in (ROOT / "streams").glob("*.py") if p.name != "__init__.py")
    assert len(direct) <= MAX_MODULES_DIRECTLY_IN_STREAMS, direct


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from streams.worker.pipeline import IngestPipeline\n", "streams.worker.pipeline"),
        ("def f():\n    import projections.versions\n", "projections.versions"),
    ],
)
def test_import_scan_sees_deferred_imports(tmp_path: Path, source: str, expected: str) -> None:
    module = tmp_path / "m.py"
    module.write_text(source)
    assert [target for _, target in imported_modules(module)] == [expected]
