"""The Kubernetes manifests: every ``ENGRAM_*`` variable they set is a setting, every overlay
renders, and what they promise holds in what they render (one partition count, every topic
replicated and kept, in the Kafka cluster's namespace, every CA file mounted, probes, budgets,
autoscaling up to the partition count on a backlog, a locked-down securityContext on every
container, Jobs that may be retried and run again, a reprocess's own configuration); and
deploy/README.md's commands and figures agree with them."""

from __future__ import annotations

import math
import os
import re
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
    docs: list[dict[str, object]] = []
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


def config_map(resources: list[Resource]) -> Resource:
    """The ConfigMap every process reads (a hashed name: a change rolls the pods)."""
    (found,) = (
        r
        for r in of_kind(resources, "ConfigMap")
        if r["metadata"]["name"].startswith("engram-config-")
    )
    return found


def config(resources: list[Resource]) -> dict[str, str]:
    data: dict[str, str] = config_map(resources)["data"]
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


@pytest.mark.parametrize("kustomization", OVERLAYS)
def test_the_kafka_topics_are_in_the_kafka_clusters_namespace(kustomization: str) -> None:
    """Strimzi's Topic Operator watches the namespace of its Kafka cluster by default: that of
    the bootstrap Service (<cluster>-kafka-bootstrap.<namespace>.svc), not Engram's."""
    resources = rendered(kustomization)
    engram = config_map(resources)["metadata"]["namespace"]
    host = config(resources)["ENGRAM_KAFKA_BOOTSTRAP"].split(":")[0]
    kafka = host.split(".")[1]
    assert kafka == "kafka" != engram
    topics = of_kind(resources, "KafkaTopic")
    assert topics
    assert {t["metadata"].get("namespace") for t in topics} == {kafka}
    # Everything else, Jobs included, is Engram's.
    others = {r["metadata"].get("namespace") for r in resources if r["kind"] != "KafkaTopic"}
    assert others == {engram}


def container_env(resources: list[Resource], container: Resource) -> dict[str, str]:
    """A container's variables with a plain value: its ConfigMaps', then its own."""
    maps = {r["metadata"]["name"]: r.get("data", {}) for r in of_kind(resources, "ConfigMap")}
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(maps.get(source["configMapRef"]["name"], {}))
    env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
    return env


@pytest.mark.parametrize("kustomization", OVERLAYS)
def test_every_ca_file_is_mounted_from_its_secret(kustomization: str) -> None:
    """A CA file a setting names is a file in the pod (the settings refuse a path that is not
    one): the Kafka cluster's CA, and the Redis servers' (rediss://, a private CA)."""
    resources = rendered(kustomization)
    expected = {
        "ENGRAM_KAFKA_SSL_CAFILE": "engram-kafka-ca",
        "ENGRAM_REDIS_SSL_CAFILE": "engram-redis-ca",
    }
    for workload in workloads(resources):
        spec = pod_spec(workload)
        secrets = {v["name"]: v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
        for container in spec["containers"]:
            env = container_env(resources, container)
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            cafiles = {k: v for k, v in env.items() if k.endswith("_CAFILE")}
            assert set(cafiles) == set(expected), workload["metadata"]["name"]
            for variable, path in cafiles.items():
                folder, _, key = path.rpartition("/")
                assert secrets[mounts[folder]] == expected[variable], (variable, path)
                assert key == "ca.crt", (variable, path)


def test_the_documented_redis_urls_pass_the_egress_policy_and_the_charts_certificates() -> None:
    """The README's Redis URLs: on the port Engram's egress policy opens to Redis, and with the
    host names the bitnami chart's generated certificates carry (*.svc.cluster.local)."""
    egress = named(rendered("overlays/example"), "NetworkPolicy", "engram-egress")
    (redis,) = (
        rule
        for rule in egress["spec"]["egress"]
        if rule["to"][0].get("namespaceSelector", {}).get("matchLabels")
        == {"kubernetes.io/metadata.name": "redis"}
    )
    ports = {p["port"] for p in redis["ports"]}
    urls = re.findall(r"rediss://[^\s`\"]+", readme())
    with_ports = [u for u in urls if re.search(r"@[^/]+:\d+", u)]
    assert len(with_ports) >= 3, urls
    for url in with_ports:
        port = re.search(r"@[^/:]+:(\d+)", url)
        assert port is not None, url
        assert int(port[1]) in ports, url
    secrets = readme_section("### Secrets")
    hosts = re.findall(r"rediss://:[^@]+@([^:/]+)", secrets)
    assert len(hosts) == 2, hosts
    for host in hosts:
        assert re.fullmatch(r"[a-z0-9-]+-master\.[a-z0-9-]+\.svc\.cluster\.local", host), host


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


def test_the_worker_autoscaler_counts_a_backlog_not_the_commit_cadence(tmp_path: Path) -> None:
    """KEDA asks for ceil(summed lag / lagThreshold) replicas, from committed offsets, which a
    worker commits every broker_commit_interval: with no backlog a pod still shows that many
    seconds of its input. The threshold must be above it for a pod at full speed (one CPU, at
    the capacity plan's 0.47 ms an event), or throughput alone adds replicas."""
    from streams.worker.app import _faust_app

    settings = EngramSettings(data_dir=tmp_path)
    commit_every = _faust_app(settings, "localhost:9092", "engram").conf.broker_commit_interval
    scaler = named(rendered("overlays/example"), "ScaledObject", "engram-worker")
    threshold = int(scaler["spec"]["triggers"][0]["metadata"]["lagThreshold"])
    full_speed = 1 / 0.47e-3  # events/s of a worker on one CPU
    assert threshold > full_speed * commit_every
    # At the capacity plan's 100,000 events/s and no backlog, fewer replicas than its ~47
    # cores of work: the scaler adds replicas for a backlog.
    assert math.ceil(100_000 * commit_every / threshold) < 47
    # The README says what the manifest sets, and no longer a per-partition threshold.
    text = readme()
    assert f"`lagThreshold` ({threshold:,})" in text
    assert f"The base sets {threshold:,}" in text
    assert "records per partition" not in text


def test_the_readme_says_what_static_membership_costs_at_a_scale_down() -> None:
    """A static member sends no LeaveGroup (aiokafka): a worker removed for good holds its
    partitions until the session timeout expires; the README gives the manifests' timeout."""
    timeout = config(rendered("overlays/example"))["ENGRAM_SESSION_TIMEOUT"]
    text = readme()
    assert (
        f"leaves no LeaveGroup: its partitions wait `ENGRAM_SESSION_TIMEOUT`, {timeout} s" in text
    )
    assert f"stops that pod's partitions for the {timeout} s session timeout" in text
    assert f"(`ENGRAM_SESSION_TIMEOUT`, {timeout} s in the manifests)" in text


def test_the_capacity_plans_share_of_embeddings_follows_from_its_figures() -> None:
    """Only memories carry an embedding: recordings, summaries and promotions."""
    plan = readme_section("## Capacity plan: 1,000,000 agents at 100,000 events/s")
    derived = re.search(
        r"\| derived events \| [\d.]+ \((\d+) recording.*?"
        r"([\d.]+) summaries, ([\d.]+) promotions\)",
        plan,
    )
    sizes = re.search(
        r"(\d+) B raw \+ ([\d,]+) B derived .*?~(\d+) KB is its float16 embedding", plan
    )
    assert derived is not None
    assert sizes is not None
    raw, derived_bytes, embedding = sizes.groups()
    memories = sum(float(n) for n in derived.groups())
    share = memories * int(embedding) * 1024 / (int(raw) + int(derived_bytes.replace(",", "")))
    assert 0.3 < share < 0.4, share
    (growth,) = (line for line in plan.splitlines() if line.startswith("- **Log growth**"))
    following = plan[plan.index(growth) :].split("\n- ")[0]
    assert "About a third" in following
    assert "half" not in following
    assert f"{memories:.2f} memories per agent event" in following


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
    # The Job renders beside the overlay it belongs to, unchanged (the reprocess Job has a
    # ConfigMap of its own besides).
    others = [r for r in resources if r["kind"] != "Job" and r not in job_configmaps(resources)]
    assert others == rendered("overlays/example")
    # A Job's pod template cannot be changed: every run is a new Job, and the README deletes
    # the finished one before it applies the overlay again; finished ones go within a day.
    assert spec["ttlSecondsAfterFinished"] <= 86400
    name = workload["metadata"]["name"]
    commands = readme_section("### Jobs: replay, reprocess, forget-agent").splitlines()
    apply = commands.index(next(c for c in commands if f"example-jobs/{job} " in c))
    assert commands[apply - 1] == f"kubectl -n engram delete job {name} --ignore-not-found"


def job_configmaps(resources: list[Resource]) -> list[Resource]:
    return [
        r
        for r in of_kind(resources, "ConfigMap")
        if r["metadata"]["name"].startswith("engram-reprocess-config-")
    ]


def readme() -> str:
    return (KUBERNETES.parent / "README.md").read_text()


def readme_section(heading: str) -> str:
    """deploy/README.md from ``heading`` to the next heading."""
    text = readme()
    start = text.index(heading + "\n")
    rest = text[start + len(heading) :]
    ends = [i for i in (rest.find("\n## "), rest.find("\n### ")) if i >= 0]
    return rest[: min(ends)] if ends else rest


def test_a_reprocess_has_its_own_configuration_and_the_workers_keep_theirs(
    tmp_path: Path,
) -> None:
    """The overlay's engram-reprocess-config, given a setting, reaches the reprocess Job only:
    the workers and query services render as in the example overlay (not restarted)."""
    source = KUBERNETES / "overlays" / "example-jobs" / "reprocess"
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    kustomization = yaml.safe_load((source / "kustomization.yaml").read_text())
    # kustomize takes a relative path to another kustomization, never an absolute one.
    for key in ("resources", "components"):
        kustomization[key] = [os.path.relpath(source / e, overlay) for e in kustomization[key]]
    (generator,) = (
        g for g in kustomization["configMapGenerator"] if g["name"] == "engram-reprocess-config"
    )
    generator["literals"] = ["ENGRAM_EPISODIC_THRESHOLD=0.5"]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    done = subprocess.run(
        [kubectl(), "kustomize", str(overlay)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    resources = [d for d in yaml.safe_load_all(done.stdout) if d]
    (own,) = job_configmaps(resources)
    assert own["data"] == {"ENGRAM_EPISODIC_THRESHOLD": "0.5"}
    assert own["metadata"]["namespace"] == "engram"
    (job,) = of_kind(resources, "Job")
    (container,) = pod_spec(job)["containers"]
    # Later envFrom sources win: the reprocess's settings over the live ones.
    assert [s["configMapRef"]["name"] for s in container["envFrom"]] == [
        next(r for r in of_kind(resources, "ConfigMap") if r is not own)["metadata"]["name"],
        own["metadata"]["name"],
    ]
    others = [r for r in resources if r["kind"] != "Job" and r is not own]
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
