"""The Kubernetes manifests parse, and every ENGRAM_* variable they set is a real setting."""

from __future__ import annotations

from pathlib import Path

import yaml

from streams.settings import EngramSettings

DEPLOY = Path(__file__).parents[3] / "deploy" / "kubernetes"


def documents() -> list[dict[str, object]]:
    docs = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def env_names(node: object) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str) and key.startswith("ENGRAM_"):
                found.add(key)
            if key == "name" and isinstance(value, str) and value.startswith("ENGRAM_"):
                found.add(value)
            found |= env_names(value)
    elif isinstance(node, list):
        for item in node:
            if isinstance(item, str) and item.startswith("ENGRAM_"):
                found.add(item.split("=", 1)[0])
            found |= env_names(item)
    return found


def test_every_variable_in_the_manifests_is_a_setting() -> None:
    names = env_names(documents())
    assert "ENGRAM_KAFKA_BOOTSTRAP" in names
    known = {f"ENGRAM_{field.upper()}" for field in EngramSettings.model_fields}
    assert names <= known, names - known


def test_the_query_service_probes_the_health_endpoints() -> None:
    query = next(
        d
        for d in documents()
        if d.get("kind") == "Deployment" and d["metadata"]["name"] == "engram-query"
    )  # type: ignore[index]
    container = query["spec"]["template"]["spec"]["containers"][0]  # type: ignore[index]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_kustomizations_list_files_that_exist() -> None:
    for kustomization in DEPLOY.rglob("kustomization.yaml"):
        for resource in yaml.safe_load(kustomization.read_text()).get("resources", []):
            assert (kustomization.parent / resource).exists(), (kustomization, resource)
