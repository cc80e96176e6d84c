"""The Kubernetes manifests: every ``ENGRAM_*`` variable they set is a setting, every overlay
renders, and what they promise holds in what they render (one partition count, every topic
replicated and kept, probes, budgets, autoscaling up to the partition count, a locked-down
securityContext on every container, Jobs that may be retried)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from schemas.topics import Topics
from streams.settings import EngramSettings
from tests.unit.deploy.rendered import (
    KUBERNETES,
    KUSTOMIZATIONS,
    OVERLAYS,
    WORKLOAD_KINDS,
    Resource,
    kubectl,
    named,
    of_kind,
    pod_spec,
    rendered,
)

SNAPSHOT_TOPICS = {"memory.snapshots"}
"""Topics that hold the latest record per key only (compacted)."""


def documents() -> list[dict[str, object]]:
    docs = []
    for path in sorted(KUBERNETES.rglob("*.yaml")):
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


def test_kustomizations_list_files_that_exist() -> None:
    for kustomization in KUBERNETES.rglob("kustomization.yaml"):
        text = yaml.safe_load(kustomization.read_text())
        for entry in [*text.get("resources", []), *text.get("components", [])]:
            assert (kustomization.parent / entry).exists(), (kustomization, entry)


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_kustomization_renders(kustomization: str) -> None:
    assert rendered(kustomization)


def config(resources: list[Resource]) -> dict[str, str]:
    (configmap,) = of_kind(resources, "ConfigMap")
    assert configmap["metadata"]["name"].startswith("engram-config-"), "a hashed name"
    data: dict[str, str] = configmap["data"]
    return data


@pytest.mark.parametrize("kustomization", ["base", *OVERLAYS])
def test_the_partition_count_is_one_setting(kustomization: str) -> None:
    resources = rendered(kustomization)
    partitions = int(config(resources)["ENGRAM_PARTITIONS"])
    topics = of_kind(resources, "KafkaTopic")
    counts = {r["metadata"]["name"]: r["spec"]["partitions"] for r in topics}
    assert set(counts.values()) == {partitions}, counts
    scaler = named(resources, "ScaledObject", "engram-worker")
    assert scaler["spec"]["maxReplicaCount"] == partitions
    # The autoscaler reads the lag on the cluster the workers use.
    (trigger,) = scaler["spec"]["triggers"]
    bootstrap = config(resources)["ENGRAM_KAFKA_BOOTSTRAP"]
    assert trigger["metadata"]["bootstrapServers"] == bootstrap


def test_an_overlay_changes_the_kafka_bootstrap_everywhere(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    # kustomize takes a relative path to another kustomization, never an absolute one.
    example = os.path.relpath(KUBERNETES / "overlays" / "example", overlay)
    settings = os.path.relpath(KUBERNETES / "components" / "cluster-settings", overlay)
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [example],
                "configMapGenerator": [
                    {
                        "name": "engram-config",
                        "behavior": "merge",
                        "literals": ["ENGRAM_KAFKA_BOOTSTRAP=other-kafka.kafka.svc:9093"],
                    }
                ],
                "components": [settings],
            }
        )
    )
    done = subprocess.run(
        [kubectl(), "kustomize", str(overlay)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    resources = [d for d in yaml.safe_load_all(done.stdout) if d]
    (trigger,) = named(resources, "ScaledObject", "engram-worker")["spec"]["triggers"]
    assert trigger["metadata"]["bootstrapServers"] == "other-kafka.kafka.svc:9093"


def test_the_example_overlay_changes_the_partition_count_everywhere() -> None:
    assert (
        config(rendered("base"))["ENGRAM_PARTITIONS"]
        != config(rendered("overlays/example"))["ENGRAM_PARTITIONS"]
    )


def test_every_topic_is_replicated_kept_forever_and_compacted_where_a_snapshot() -> None:
    resources = rendered("overlays/example")
    topics = {r["spec"]["topicName"]: r for r in of_kind(resources, "KafkaTopic")}
    assert set(topics) == set(Topics().all()) | SNAPSHOT_TOPICS
    for name, topic in topics.items():
        spec = topic["spec"]
        assert spec["replicas"] == 3, name
        assert spec["config"]["min.insync.replicas"] == 2, name
        assert spec["config"]["retention.ms"] == -1, name
        policy = "compact" if name in SNAPSHOT_TOPICS else "delete"
        assert spec["config"]["cleanup.policy"] == policy, name
        assert "strimzi.io/cluster" in topic["metadata"]["labels"], name


def test_topics_engram_creates_itself_are_replicated_like_the_kafka_topics() -> None:
    """A reprocessed version's topics and Faust's own are created by Engram, from the
    ConfigMap: they must get the copies the KafkaTopics promise."""
    resources = rendered("overlays/example")
    values = config(resources)
    for topic in of_kind(resources, "KafkaTopic"):
        spec = topic["spec"]
        assert int(values["ENGRAM_TOPIC_REPLICATION_FACTOR"]) == spec["replicas"]
        assert (
            int(values["ENGRAM_TOPIC_MIN_INSYNC_REPLICAS"])
            == (spec["config"]["min.insync.replicas"])
        )


def workloads(resources: list[Resource]) -> list[Resource]:
    return [r for r in resources if r["kind"] in WORKLOAD_KINDS]


@pytest.mark.parametrize("kustomization", OVERLAYS)
def test_every_container_is_locked_down_and_bounded(kustomization: str) -> None:
    found = workloads(rendered(kustomization))
    assert found
    for workload in found:
        spec = pod_spec(workload)
        name = workload["metadata"]["name"]
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert spec["automountServiceAccountToken"] is False, name
        mounts = set()
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["runAsNonRoot"] is True, name
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["capabilities"] == {"drop": ["ALL"]}, name
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}, name
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(container["resources"][bound]), (name, bound)
            mounts |= {m["mountPath"] for m in container["volumeMounts"]}
        # Writable paths on a read-only root: ENGRAM_DATA_DIR (the image's) and /tmp.
        assert {"/var/lib/engram", "/tmp"} <= mounts, name
        # A disk-backed emptyDir counts toward the pod's ephemeral storage: the volumes' bounds
        # must fit in it, or the kubelet evicts the pod before a volume is full.
        volumes = sum(
            mebibytes(v["emptyDir"]["sizeLimit"]) for v in spec["volumes"] if "emptyDir" in v
        )
        storage = sum(
            mebibytes(c["resources"]["limits"]["ephemeral-storage"]) for c in spec["containers"]
        )
        assert volumes < storage, (name, volumes, storage)


def mebibytes(quantity: str) -> int:
    units = {"Mi": 1, "Gi": 1024}
    return int(quantity[:-2]) * units[quantity[-2:]]


def probe_path(container: Resource, probe: str) -> str:
    path: str = container[probe]["httpGet"]["path"]
    return path


def test_the_worker_is_a_static_member_with_three_probes_and_a_budget() -> None:
    resources = rendered("overlays/example")
    worker = named(resources, "StatefulSet", "engram-worker")
    (container,) = pod_spec(worker)["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["ENGRAM_INSTANCE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    port = int(env["ENGRAM_HEALTH_PORT"]["value"])
    assert env["ENGRAM_HTTP_HOST"]["value"] == "0.0.0.0"
    assert {p["containerPort"] for p in container["ports"]} == {port}
    assert probe_path(container, "startupProbe") == "/healthz"
    assert probe_path(container, "readinessProbe") == "/readyz"
    assert probe_path(container, "livenessProbe") == "/healthz"
    budget = named(resources, "PodDisruptionBudget", "engram-worker")
    assert budget["spec"]["selector"] == worker["spec"]["selector"]
    scaler = named(resources, "ScaledObject", "engram-worker")
    assert scaler["spec"]["scaleTargetRef"]["kind"] == "StatefulSet"
    (trigger,) = scaler["spec"]["triggers"]
    assert trigger["type"] == "kafka"
    assert trigger["metadata"]["consumerGroup"] == EngramSettings().app_id
    # KEDA owns the count: a fixed one would be set back by every apply (a rebalance).
    assert "replicas" not in worker["spec"]


def test_the_query_service_probes_its_stores_scales_and_has_a_budget() -> None:
    resources = rendered("overlays/example")
    query = named(resources, "Deployment", "engram-query")
    (container,) = pod_spec(query)["containers"]
    assert probe_path(container, "readinessProbe") == "/readyz"
    assert probe_path(container, "livenessProbe") == "/healthz"
    hpa = named(resources, "HorizontalPodAutoscaler", "engram-query")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "engram-query"
    assert "replicas" not in query["spec"]
    budget = named(resources, "PodDisruptionBudget", "engram-query")
    assert budget["spec"]["selector"] == query["spec"]["selector"]


def test_secrets_are_references_never_values() -> None:
    for kustomization in KUSTOMIZATIONS:
        assert not of_kind(rendered(kustomization), "Secret"), kustomization
    query = named(rendered("overlays/example"), "Deployment", "engram-query")
    (container,) = pod_spec(query)["containers"]
    from_secrets = {e["name"] for e in container["env"] if "secretKeyRef" in e.get("valueFrom", {})}
    assert from_secrets == {
        "ENGRAM_KAFKA_SASL_USERNAME",
        "ENGRAM_KAFKA_SASL_PASSWORD",
        "ENGRAM_REDIS_URL",
        "ENGRAM_KEYRING",
        "ENGRAM_QDRANT_API_KEY",
    }


def test_network_policies_deny_by_default_and_open_the_query_service() -> None:
    resources = rendered("overlays/example")
    deny = named(resources, "NetworkPolicy", "engram-default-deny")
    assert set(deny["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert "ingress" not in deny["spec"]
    assert "egress" not in deny["spec"]
    egress = named(resources, "NetworkPolicy", "engram-egress")
    ports = {p["port"] for rule in egress["spec"]["egress"] for p in rule["ports"]}
    assert {53, 9093, 6379, 6333} <= ports
    named(resources, "NetworkPolicy", "engram-query-ingress")
    monitors = of_kind(resources, "ServiceMonitor")
    assert {e["path"] for m in monitors for e in m["spec"]["endpoints"]} == {"/metrics"}


@pytest.mark.parametrize(
    ("job", "command"),
    [("replay", "replay"), ("reprocess", "reprocess"), ("forget-agent", "forget-agent")],
)
def test_each_job_may_be_retried(job: str, command: str) -> None:
    resources = rendered(f"overlays/example-jobs/{job}")
    (workload,) = of_kind(resources, "Job")
    assert workload["metadata"]["namespace"] == "engram"
    spec = workload["spec"]
    (container,) = pod_spec(workload)["containers"]
    assert container["args"][0] == command
    assert pod_spec(workload)["restartPolicy"] == "Never"
    # A refusal (exit 2) fails the Job at once instead of being tried again.
    (rule,) = spec["podFailurePolicy"]["rules"]
    assert rule == {
        "action": "FailJob",
        "onExitCodes": {"containerName": container["name"], "operator": "In", "values": [2]},
    }
    if command == "replay":
        assert {"--version", "--resume"} <= set(container["args"])
    # The Job runs the image the overlay's workers run (the image a reprocess's configuration
    # version comes from), not the base's unqualified one.
    images = {c["image"] for r in workloads(resources) for c in pod_spec(r)["containers"]}
    assert images == {container["image"]}
    assert container["image"].startswith("registry.example.com/")
    # The Job renders beside the overlay it belongs to, unchanged.
    others = [r for r in resources if r["kind"] != "Job"]
    assert others == rendered("overlays/example")


def test_the_deploy_readme_names_every_kustomization() -> None:
    readme = (Path(KUBERNETES).parent / "README.md").read_text()
    for kustomization in KUSTOMIZATIONS:
        assert kustomization in readme, kustomization


def test_the_documented_patch_points_the_autoscaler_at_a_versions_group(tmp_path: Path) -> None:
    """deploy/README.md's patch for ``engram versions activate``, applied to the example
    overlay, changes the group KEDA watches and nothing else of the ScaledObject."""
    readme = (KUBERNETES.parents[0] / "README.md").read_text()
    section = readme[readme.index("**The autoscaler after `engram versions activate`.**") :]
    patch = section.split("```text\n", 1)[1].split("```", 1)[0]
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    # kustomize takes a relative path to another kustomization, never an absolute one.
    example = os.path.relpath(KUBERNETES / "overlays" / "example", overlay)
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {example}\n{patch}"
    )
    done = subprocess.run(
        [kubectl(), "kustomize", str(overlay)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    patched = named(
        [d for d in yaml.safe_load_all(done.stdout) if d], "ScaledObject", "engram-worker"
    )
    original = named(rendered("overlays/example"), "ScaledObject", "engram-worker")
    assert original["spec"]["triggers"][0]["metadata"]["consumerGroup"] == "engram"
    assert patched["spec"]["triggers"][0]["metadata"]["consumerGroup"] == "engram.v3"
    patched["spec"]["triggers"][0]["metadata"]["consumerGroup"] = "engram"
    assert patched == original
