"""The Kubernetes manifests as Kubernetes gets them: each kustomization rendered by
``kubectl kustomize`` (offline), once per test session."""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).parents[3]
KUBERNETES = ROOT / "deploy" / "kubernetes"
KUSTOMIZATIONS = sorted(
    path.parent.relative_to(KUBERNETES).as_posix()
    for path in KUBERNETES.rglob("kustomization.yaml")
    if "kind: Component" not in path.read_text()
)
"""Every directory ``kubectl apply -k`` takes (components are rendered inside them)."""
OVERLAYS = [k for k in KUSTOMIZATIONS if k.startswith("overlays/")]

Resource = dict[str, Any]


def tool(name: str) -> str | None:
    """A command on PATH or beside this interpreter (a venv's console scripts)."""
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.is_file() else shutil.which(name)


def kubectl() -> str:
    found = tool("kubectl")
    if found is None:
        pytest.skip("kubectl is not installed: the manifests are rendered by `kubectl kustomize`")
    return found


@functools.cache
def _render(kustomization: str, command: str) -> str:
    done = subprocess.run(
        [command, "kustomize", str(KUBERNETES / kustomization)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{kustomization} does not render:\n{done.stderr}"
    return done.stdout


def rendered_text(kustomization: str) -> str:
    return _render(kustomization, kubectl())


def rendered(kustomization: str) -> list[Resource]:
    return [d for d in yaml.safe_load_all(rendered_text(kustomization)) if d]


def of_kind(resources: list[Resource], kind: str) -> list[Resource]:
    return [r for r in resources if r["kind"] == kind]


def named(resources: list[Resource], kind: str, name: str) -> Resource:
    found = [r for r in of_kind(resources, kind) if r["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


def pod_spec(workload: Resource) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Job")
