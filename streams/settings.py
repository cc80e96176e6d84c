"""Configuration of every Engram process, from ``ENGRAM_*`` environment variables.

Read once at the entry point and passed down. With nothing set, Engram runs the embedded dev
stack: a local broker, a local redis-server and Qdrant Edge under ``ENGRAM_DATA_DIR``.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urlsplit

from pydantic import Field, FilePath, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from processors.config import LifecycleRules, ProcessingConfig, load_processing_config
from projections.episodic.edge_segments import DECODED_MEMORIES, OPTIMIZE_EVERY, VECTOR_DATATYPE
from projections.episodic.scope import CANDIDATE_LIMIT, RELEVANCE_CANDIDATE_LIMIT

RENAMED_VARIABLES: dict[str, tuple[str, str]] = {
    "ENGRAM_SNAPSHOT_EVERY_BATCHES": (
        "ENGRAM_SNAPSHOT_EVERY_RECORDS",
        "snapshots fall due by records: batches times ENGRAM_BATCH_SIZE gives a backlog's "
        "cadence; default 100000",
    )
}
"""Variables renamed (old: new, and how to convert): setting the old one is an error, not a
silent default."""

KAFKA_NAME_CHARACTERS = r"^[A-Za-z0-9._-]*$"
"""What a Kafka topic or group name may hold; names built from a setting are also paths."""


BOOTSTRAP_ENTRY = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s:/,\[\]]+)(?::(?P<port>\d{1,5}))?")
"""One broker of ENGRAM_KAFKA_BOOTSTRAP: a host name, an IPv4 address or a bracketed IPv6 one,
and a port (Kafka's 9092 when none is given, as its clients assume)."""


def _bare_ipv6(entry: str) -> bool:
    try:
        ipaddress.IPv6Address(entry)
    except ValueError:
        return False
    return True


REDIS_SCHEMES = ("redis", "rediss", "unix")


class EngramSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ENGRAM_", frozen=True, extra="ignore")

    kafka_bootstrap: str | None = Field(
        default=None, description="host:port[,host:port]; unset starts the embedded broker."
    )
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT",
        description="How every Kafka client of Engram connects: SSL encrypts, SASL_* log in.",
    )
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "PLAIN"
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    kafka_ssl_cafile: FilePath | None = Field(
        default=None,
        description="CA bundle the broker's certificate is checked against; unset: the system's.",
    )
    kafka_ssl_certfile: FilePath | None = Field(
        default=None, description="Client certificate (mutual TLS), PEM; may hold the key too."
    )
    kafka_ssl_keyfile: FilePath | None = Field(default=None, description="Its private key, PEM.")

    redis_url: str | None = Field(
        default=None,
        repr=False,  # it may carry the password: redis://:PASSWORD@host:6379/0
        description="unset starts a local redis-server. rediss:// for TLS; the password in "
        "the URL.",
    )
    redis_ssl_cafile: FilePath | None = Field(
        default=None,
        description="CA bundle a rediss:// server's certificate is checked against (added to "
        "the URL as ssl_ca_certs); unset: the system's.",
    )
    redis_namespace: str = "engram"
    agent_index_cap: int = Field(
        default=10_000,
        ge=1,
        description="Places the agent index keeps per agent (one per batch and topic partition "
        "that took its records, ~60 bytes each); beyond it the oldest are dropped and that "
        "agent's history scans its partition.",
    )
    qdrant_url: str | None = Field(default=None, description="a Qdrant server; else Qdrant Edge.")
    qdrant_api_key: SecretStr | None = None
    qdrant_path: Path | None = Field(default=None, description="Qdrant Edge shard directory.")
    qdrant_collection: str = "engram_episodic"
    data_dir: Path = Path(".engram")

    topic_prefix: str = Field(
        default="",
        max_length=200,
        pattern=KAFKA_NAME_CHARACTERS,
        description="Put before every topic name (tenants or tests sharing one broker): "
        "letters, digits, '.', '_' and '-', as Kafka allows in a topic name.",
    )
    partitions: int = Field(default=4, ge=1)
    app_id: str = Field(
        default="engram",
        min_length=1,
        max_length=200,
        pattern=KAFKA_NAME_CHARACTERS,
        description="The processors' consumer group and Faust app (its topics and its "
        "directory under ENGRAM_DATA_DIR carry it): letters, digits, '.', '_' and '-'.",
    )
    topic_replication_factor: int = Field(
        default=1,
        ge=1,
        description="Copies of every topic Engram creates (its own, a reprocess's, an "
        "import's, Faust's); 1 suits the one-node dev broker, 3 a production cluster.",
    )
    topic_min_insync_replicas: int | None = Field(
        default=None,
        ge=1,
        description="min.insync.replicas of the topics Engram creates (producers wait for "
        "all in-sync replicas); unset: the broker's default.",
    )

    agent_types: Path | None = Field(default=None, description="YAML of importance profiles.")
    episodic_threshold: float = Field(default=0.7, ge=0.0, le=1.0)
    working_capacity: int = Field(default=10, ge=1)
    episodic_capacity: int = Field(default=50, ge=1)
    embedder: str = Field(
        default="hashing",
        description="'hashing' (fast, model-free) or 'minilm' (all-MiniLM-L6-v2, the 'semantic' "
        "extra). A projection is built with one embedder: changing it needs a rebuild.",
    )
    minilm_precision: Literal["auto", "bfloat16", "float32"] = Field(
        default="auto",
        description="How the 'minilm' embedder computes: 'bfloat16' runs its matrix products "
        "and attention in bfloat16 (~2.4x the texts/s on a CPU with AVX512-BF16 or AMX, each "
        "vector within a cosine of 2.5e-5 of float32's), 'float32' the model's own arithmetic; "
        "'auto' takes bfloat16 where the CPU computes it natively.",
    )
    minilm_runtime: Literal["auto", "onnx", "torch"] = Field(
        default="auto",
        description="What runs the 'minilm' embedder: 'onnx' (ONNX Runtime, float32 only, "
        "~7% less CPU a text than torch on an AVX2 CPU, rows within a cosine of 3e-7), "
        "'torch' (the only runtime of bfloat16), or 'auto': ONNX Runtime for float32 where "
        "it is installed.",
    )
    dense_share: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="The embedding cosine's share in hybrid relevance (the rest is BM25); "
        "unset: 0.75 for the hashing embedder, 0.9 for a semantic one.",
    )
    archive: bool = Field(
        default=True,
        description="Keep every memory an agent lived searchable (scope archive/all): working "
        "memories and what capacity or utility forgot, as archived points of the episodic "
        "store, until the agent is erased. Off: they are deleted, and each working memory "
        "costs no episodic write.",
    )
    retrieval_candidates: int = Field(
        default=CANDIDATE_LIMIT,
        ge=1,
        description="How many memories each signal of a retrieval mode (recency, importance, "
        "the query's embedding, its keywords, context tags) brings from the episodic store to be "
        "ranked: an agent's pool up to this size is ranked exactly as a whole, a larger one "
        "through its candidates (projections/README.md).",
    )
    relevance_candidates: int = Field(
        default=RELEVANCE_CANDIDATE_LIMIT,
        ge=1,
        description="The same for the relevance mode, whose only signals are the query's "
        "embedding and keywords: lower, as it recalled more and answered faster on the "
        "long-conversation benchmark (projections/README.md).",
    )
    edge_optimize_every: int = Field(
        default=OPTIMIZE_EVERY,
        ge=0,
        description="Points the embedded Qdrant Edge store writes between two optimizations of "
        "its shard (0: never). An optimized shard answers reads in time flat in its size; each "
        "optimization pauses the process that holds the shard (projections/README.md).",
    )
    edge_vectors: Literal["float16", "float32"] = Field(
        default=VECTOR_DATATYPE,
        description="How a new embedded Qdrant Edge shard stores its dense vectors: float16 "
        "halves their memory and speeds up an agent's nearest-memory scan; a cosine it reads "
        "differs from float32's by up to ~5e-4. A shard keeps the kind it was made with "
        "(projections/README.md).",
    )
    edge_sync_seconds: float = Field(
        default=1.0,
        ge=0.0,
        description="Longest time the embedded Qdrant Edge store's durable checkpoint (a flush "
        "and its applied positions) lags what was applied: one flush covers every batch of that "
        "time instead of one per batch, and the episodic projector commits its offsets at most "
        "that often. A crash replays the lag from the log; 0 makes every batch durable before "
        "the next (projections/README.md).",
    )
    edge_decoded_memories: int = Field(
        default=DECODED_MEMORIES,
        ge=0,
        description="Memories the embedded Qdrant Edge store keeps decoded, so that the next "
        "reads of them skip their payloads (~0.8 KB each; 0: none; projections/README.md).",
    )
    lifecycle: LifecycleRules = Field(
        default_factory=LifecycleRules,
        description="Consolidation, summary and pruning rules, as JSON: "
        'ENGRAM_LIFECYCLE=\'{"pruning": {"l1_min_age": 5}}\'.',
    )
    schedule_interval: float = Field(
        default=60.0,
        ge=0.0,
        description="Seconds between wall-clock ticks on memory.schedule; 0 turns them off.",
    )
    summariser_url: str | None = Field(
        default=None,
        description="Base URL of an OpenAI-compatible chat API (…/v1); unset: extractive.",
    )
    summariser_model: str = "gpt-4o-mini"
    summariser_api_key: SecretStr | None = None
    summariser_timeout: float = Field(default=20.0, gt=0.0)

    episodic_writer: Literal["worker", "projector"] = Field(
        default="worker",
        description="Who writes episodic memory: each worker, or one projector reading the log "
        "(for several worker processes around an embedded Qdrant Edge).",
    )

    batch_size: int = Field(
        default=2000, ge=1, description="Most records a worker's batch takes (a backlog's)."
    )
    batch_within: float = Field(
        default=0.005,
        gt=0.0,
        description="Seconds a worker's next batch waits for more records once the last one "
        "ended (or once its first record came, when none arrived meanwhile), unless it is full "
        "already. Records that arrive while a batch runs wait in the next one "
        "(streams/worker/faust_batches.py), so this adds to every event's latency without "
        "making a backlog's batches any smaller: while records keep coming at 4,000 a second or "
        "more, a batch waits up to 10 windows more to fill (measured at 1,000 events/s: 50 ms "
        "gave p50 ~120 ms, 5 ms ~50 ms).",
    )
    producer_linger: float = Field(
        default=0.005,
        ge=0.0,
        description="Seconds a producer batch waits for more records. Every batch of the "
        "processors waits for its deliveries, so this is latency; batches fill up anyway "
        "(measured: 5 ms instead of 50 ms took p50 from ~200 to ~120 ms, same throughput).",
    )
    fetch_max_wait: float = Field(
        default=0.05, gt=0.0, description="Longest a consumer fetch may wait for data (seconds)."
    )
    session_timeout: float = Field(
        default=6.0,
        gt=0.0,
        description="Short: Tansu's group join waits half of it. Also how long a revoked worker "
        "waits for its batch in flight before it exits instead of handing its partitions over "
        "mid-batch: raise it where batches take longer.",
    )

    delivery_timeout: float = Field(
        default=60.0,
        gt=0.0,
        description="Longest the worker's producer waits for the broker to take a record (its "
        "request timeout; a record no leader takes fails after it): a batch not delivered "
        "within it exits the worker 70, uncommitted, to be redelivered. Faust's own default, "
        "20 minutes, left a worker whose broker was lost hanging mid-batch that long.",
    )

    stop_timeout: float | None = Field(
        default=None,
        gt=0.0,
        description="Longest `engram worker` (or `serve`) takes to stop once signalled, its "
        "batch in flight finished and committed, before it exits 75 without committing (what "
        "it held is redelivered): a broker out of reach never lets the last commit end. Unset: "
        "ENGRAM_SESSION_TIMEOUT + 35 s (a stop may wait that long for the batch in flight, and "
        "up to 30 s for the query service and the recorder). Set, it must exceed "
        "ENGRAM_SESSION_TIMEOUT.",
    )

    snapshots: bool = Field(
        default=True,
        description="Write per-partition state snapshots, so a takeover reads the latest one and "
        "the log after it instead of the whole log; off, every takeover folds the whole log.",
    )
    snapshot_every_records: int = Field(
        default=100_000,
        ge=1,
        description="A worker writes a snapshot of its partitions' state once it has processed "
        "this many records since the last one (or ENGRAM_SNAPSHOT_EVERY_SECONDS, whichever comes "
        "first), so a takeover reads the snapshot and at most about this much of the log after "
        "it instead of the whole log. Counted in records, not batches: at a steady rate batches "
        "are small, and a snapshot every few of them would cost more than the events.",
    )
    snapshot_every_seconds: float = Field(
        default=30.0,
        gt=0.0,
        description="Longest time between a worker's snapshots while it processes batches.",
    )
    instance_id: str | None = Field(
        default=None,
        description="A stable id of this worker in its consumer group (e.g. the pod name): "
        "static membership, so a restart within the session timeout does not rebalance. "
        "Unique per worker: two workers of one id would both take every partition where the "
        "broker does not fence the older one (`engram up --workers N` suffixes it per worker).",
    )

    keyring: str | None = Field(
        default=None,
        repr=False,  # a redis:// URL may carry a password
        description="Where each agent's sealing key lives: 'redis' (ENGRAM_REDIS_URL), a "
        "redis:// URL, 'file:PATH', or 'off' (nothing sealed, so forget-agent cannot make the "
        "log unreadable). Unset: what the Redis records (the dev stack's directory), else "
        "'redis'; without a Redis, DATA_DIR/keyring.",
    )

    http_host: str = Field(
        default="127.0.0.1",
        description="Where the query service listens. Without ENGRAM_API_KEYS_FILE it is "
        "unauthenticated: keep it on localhost.",
    )
    http_port: int = Field(default=8000, ge=0, le=65535)
    api_keys_file: Path | None = Field(
        default=None,
        description="JSON of the API keys the query service and the MCP server accept "
        '({"keys": [{"name", "sha256", "agents", "scopes"}]}); unset: no authentication.',
    )
    api_key: SecretStr | None = Field(
        default=None,
        description="The key this process presents to the query service (engram retrieve, "
        "the MCP server's read tools).",
    )
    metrics: bool = Field(
        default=True,
        description="Serve Prometheus /metrics and time retrievals for it; false: neither.",
    )
    metrics_port: int = Field(
        default=9102,
        ge=0,
        le=65535,
        description="Where `engram worker` and `engram project` serve /metrics (the query "
        "service serves it on its own port); 0: any free port.",
    )
    health_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Port of the /healthz and /readyz of a worker or projector (on "
        "ENGRAM_HTTP_HOST; the query service has them on its own port); unset: none.",
    )
    tracing: bool = Field(
        default=False,
        description="OpenTelemetry traces (the 'tracing' extra), exported over OTLP as the "
        "OTEL_* variables say.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "console"] = "console"

    @model_validator(mode="before")
    @classmethod
    def _redis_ca_in_url(cls, values: Any) -> Any:
        """Every Redis client of Engram is made from a URL (``redis.from_url``), which takes the
        CA bundle as its ``ssl_ca_certs`` parameter: added to ``ENGRAM_REDIS_URL`` and to a
        keyring's own URL once, it reaches them all."""
        if not isinstance(values, dict):
            return values
        cafile = values.get("redis_ssl_cafile")
        if not cafile:
            return values
        values = dict(values)
        # A keyring of its own (a rediss:// URL) is a Redis of the same deployment: same CA.
        for name in ("redis_url", "keyring"):
            url = values.get(name)
            # TLS URLs only: redis-py refuses ssl_ca_certs on a plain connection (TypeError).
            if isinstance(url, str) and url.startswith("rediss://") and "ssl_ca_certs=" not in url:
                separator = "&" if "?" in url else "?"
                values[name] = f"{url}{separator}ssl_ca_certs={quote(str(cafile))}"
        return values

    @field_validator("kafka_bootstrap", "redis_url", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        """``ENGRAM_KAFKA_BOOTSTRAP=`` (exported empty) means unset, as the commands read it."""
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("kafka_bootstrap")
    @classmethod
    def _bootstrap_is_a_host_list(cls, value: str | None) -> str | None:
        """Checked here, not by the first Kafka client: aiokafka's own parse of a malformed
        list ends in "invalid literal for int()", far from the variable that caused it. Empty
        entries (a trailing comma) are dropped: aiokafka would read one as localhost:9092."""
        if value is None:
            return value
        entries = [e for e in (e.strip() for e in value.split(",")) if e]
        for entry in entries:
            if _bare_ipv6(entry):
                raise ValueError(
                    f"{entry!r}: write an IPv6 address in brackets, with its port ([{entry}]:9092)"
                )
            found = BOOTSTRAP_ENTRY.fullmatch(entry)
            if found is None or not 0 < int(found.group("port") or 9092) < 65536:
                raise ValueError(
                    f"{entry!r} is not host:port (ENGRAM_KAFKA_BOOTSTRAP is a "
                    "comma-separated list such as kafka-0:9092,kafka-1:9092)"
                )
        return ",".join(entries) or None

    @field_validator("redis_url")
    @classmethod
    def _redis_url_is_redis(cls, value: str | None) -> str | None:
        """A URL of another scheme reached redis-py as a traceback. The URL itself is never
        echoed: it may carry the password."""
        if value is None:
            return value
        parts = urlsplit(value)
        if parts.scheme not in REDIS_SCHEMES:
            raise ValueError(
                f"the scheme must be one of {', '.join(s + '://' for s in REDIS_SCHEMES)}, "
                f"not {parts.scheme + '://' if parts.scheme else 'none'}"
            )
        try:
            parts.port  # noqa: B018 (parsing it is the check)
        except ValueError:
            raise ValueError(
                "its host:port does not parse (a port from 0 to 65535; a password that holds "
                "/, ?, # or @ must be percent-encoded)"
            ) from None
        return value

    @model_validator(mode="after")
    def _kafka_security_consistent(self) -> EngramSettings:
        problem = kafka_security_problem(self)
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _no_renamed_variable(self) -> EngramSettings:
        """A variable Engram no longer reads would be ignored in silence (unknown ``ENGRAM_*``
        variables are), leaving the deployment on a default it did not choose."""
        for old, (new, how) in RENAMED_VARIABLES.items():
            if old in os.environ:
                raise ValueError(f"{old} is no longer read: set {new} instead ({how})")
        return self

    @model_validator(mode="after")
    def _stop_outlasts_a_batch(self) -> EngramSettings:
        """A stop waits for the batch in flight up to the session timeout: a shorter limit
        would end healthy stops with exit 75 and a misleading reason."""
        if self.stop_timeout is not None and self.stop_timeout <= self.session_timeout:
            raise ValueError(
                f"ENGRAM_STOP_TIMEOUT={self.stop_timeout:g} must exceed "
                f"ENGRAM_SESSION_TIMEOUT={self.session_timeout:g}: a stop waits that long for "
                "the batch in flight"
            )
        return self

    @property
    def stop_limit(self) -> float:
        """Seconds a signalled process has to stop (``ENGRAM_STOP_TIMEOUT``, or its default)."""
        if self.stop_timeout is not None:
            return self.stop_timeout
        return self.session_timeout + 35.0

    @model_validator(mode="after")
    def _replicas_reachable(self) -> EngramSettings:
        """More in-sync replicas than copies would fail every write (producers use acks=all)."""
        insync = self.topic_min_insync_replicas
        if insync is not None and insync > self.topic_replication_factor:
            raise ValueError(
                f"ENGRAM_TOPIC_MIN_INSYNC_REPLICAS={insync} exceeds "
                f"ENGRAM_TOPIC_REPLICATION_FACTOR={self.topic_replication_factor}: no write "
                "could ever be acknowledged"
            )
        return self

    def edge_path(self) -> Path:
        return self.qdrant_path or self.data_dir / "qdrant-edge"

    def keyring_dir(self) -> Path:
        return self.data_dir / "keyring"


def kafka_security_problem(settings: EngramSettings) -> str | None:
    """Why these Kafka security settings cannot work together, or None. Checked when the
    settings are read, so a half-configured cluster login fails at start with one sentence
    rather than as a broker refusing connections."""
    protocol = settings.kafka_security_protocol
    sasl, tls = protocol.startswith("SASL_"), protocol in ("SSL", "SASL_SSL")
    login = settings.kafka_sasl_username is not None or settings.kafka_sasl_password is not None
    if sasl and (not settings.kafka_sasl_username or settings.kafka_sasl_password is None):
        return (
            f"ENGRAM_KAFKA_SECURITY_PROTOCOL={protocol} logs in with "
            f"{settings.kafka_sasl_mechanism}: set ENGRAM_KAFKA_SASL_USERNAME and "
            "ENGRAM_KAFKA_SASL_PASSWORD"
        )
    if login and not sasl:
        return (
            "ENGRAM_KAFKA_SASL_USERNAME/PASSWORD are set but "
            f"ENGRAM_KAFKA_SECURITY_PROTOCOL={protocol} does not log in: use SASL_SSL "
            "(or SASL_PLAINTEXT on a trusted network)"
        )
    files = (settings.kafka_ssl_cafile, settings.kafka_ssl_certfile, settings.kafka_ssl_keyfile)
    if any(f is not None for f in files) and not tls:
        return (
            f"ENGRAM_KAFKA_SSL_* files are set but ENGRAM_KAFKA_SECURITY_PROTOCOL={protocol} "
            "does not use TLS: use SSL or SASL_SSL"
        )
    if settings.kafka_ssl_keyfile is not None and settings.kafka_ssl_certfile is None:
        return "ENGRAM_KAFKA_SSL_KEYFILE needs ENGRAM_KAFKA_SSL_CERTFILE (the client certificate)"
    return None


def processing_config(settings: EngramSettings) -> ProcessingConfig:
    """The rules a process derives by: the agent types' file and the settings that override
    it (capacities, the episodic threshold, the lifecycle rules)."""
    return load_processing_config(
        settings.agent_types,
        episodic_threshold=settings.episodic_threshold,
        working_capacity=settings.working_capacity,
        episodic_capacity=settings.episodic_capacity,
        lifecycle=settings.lifecycle,
    )
