"""Every Kafka client Engram builds, one named constructor per use.

The settings are tuned for the brokers Engram runs on (Tansu in the dev stack, Kafka in a
cluster); keeping them here means a client for a new use starts from one of these instead of
from aiokafka's defaults. The Faust worker builds its own consumer and producer
(:mod:`streams.worker.faust_tuning`), with the same credentials.

Encryption and login (:mod:`streams.eventlog.kafka_security`) are the process's: set once by
:func:`use_security` where the settings are read, added to every client made here.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from streams.eventlog.kafka_security import KafkaSecurity, aiokafka_security
from streams.settings import EngramSettings

__all__ = [
    "admin_client",
    "archive_producer",
    "group_offsets_client",
    "log_end_reader",
    "log_reader",
    "projector_consumer",
    "record_producer",
    "security_options",
    "use_security",
]

_security: dict[str, Any] = {}


def use_security(settings: EngramSettings) -> None:
    """Every client made from now on connects as ``settings`` say (TLS, SASL); a process
    calls it where it reads its settings, before its first client."""
    global _security
    _security = aiokafka_security(KafkaSecurity.from_settings(settings))


def security_options() -> dict[str, Any]:
    """The options :func:`use_security` set (PLAINTEXT until it is called)."""
    return dict(_security)


def log_reader(bootstrap: str, *, fetch_bytes: int = 8 << 20) -> AIOKafkaConsumer:
    """A group-less consumer for reading partitions from the start, in large fetches (smaller
    ones for a reader that wants a few records here and there)."""
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=fetch_bytes,
        fetch_max_bytes=max(fetch_bytes, 64 << 20) if fetch_bytes >= 8 << 20 else fetch_bytes,
        # A read ends at a fetch response's highwater, and Tansu holds a fetch for about the
        # whole wait.
        fetch_max_wait_ms=50,
        **_security,
    )


def log_end_reader(bootstrap: str) -> AIOKafkaConsumer:
    """A group-less consumer for finding where partitions end: it reads from just before the
    end the broker reports, and an offset out of range raises rather than jumping elsewhere."""
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="none",
        fetch_max_wait_ms=50,
        request_timeout_ms=5_000,
        **_security,
    )


def record_producer(bootstrap: str, *, linger: float = 0.0) -> AIOKafkaProducer:
    """acks=all without idempotence: portable to Tansu, which rejects idempotent producers."""
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=False,
        linger_ms=int(linger * 1000),
        max_batch_size=1 << 20,
        request_timeout_ms=30_000,
        **_security,
    )


def archive_producer(bootstrap: str) -> AIOKafkaProducer:
    """For importing an archive: acks=all without idempotence (Tansu), and requests large
    enough for the biggest record an archive may hold."""
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=False,
        linger_ms=5,
        max_batch_size=1 << 20,
        max_request_size=16 << 20,
        **_security,
    )


def admin_client(bootstrap: str) -> AIOKafkaAdminClient:
    """For creating and describing topics."""
    return AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15_000, **_security)


def group_offsets_client(bootstrap: str, group: str) -> AIOKafkaConsumer:
    """A consumer of ``group`` that subscribes to nothing: for reading or setting the group's
    committed offsets."""
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False, **_security
    )


def projector_consumer(
    bootstrap: str, topics: tuple[str, ...], group: str, *, fetch_max_wait: float
) -> AIOKafkaConsumer:
    """A group member that follows ``topics`` from its committed offsets, committing by hand
    (the episodic projector)."""
    return AIOKafkaConsumer(
        *topics,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=int(fetch_max_wait * 1000),
        max_partition_fetch_bytes=4 << 20,
        session_timeout_ms=6_000,
        heartbeat_interval_ms=1_000,
        **_security,
    )
