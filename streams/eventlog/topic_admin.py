"""Creating Engram's topics with the partition count the processors expect.

All topics share one partition count and one key (the agent id): an agent's events land on the
same partition number everywhere, one worker owns them (co-partitioning), and derived records go
to the partition number of their source record. Topics keep their records forever
(``retention.ms=-1``): the log is the truth, and a worker folds its state from it. The snapshot
topic is compacted (``cleanup.policy=compact``): only its latest records per key matter, and
its readers never depend on compaction having happened (a broker may not implement it).
"""

from __future__ import annotations

import contextlib

from aiokafka.admin import NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from schemas.errors import BackendUnavailableError, EngramError
from schemas.topics import Topics
from streams.eventlog.kafka_clients import admin_client

TOPIC_CONFIG = {"retention.ms": "-1"}
SNAPSHOT_TOPIC_CONFIG = {"cleanup.policy": "compact"}


class TopicLayoutError(EngramError, RuntimeError):
    """Existing topics do not have the partition count Engram is configured for."""


async def ensure_topics(
    bootstrap: str, topics: Topics, partitions: int, *, replication: int = 1
) -> None:
    admin = admin_client(bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        configs = {name: TOPIC_CONFIG for name in topics.all()}
        configs[topics.snapshots] = SNAPSHOT_TOPIC_CONFIG
        missing = [
            NewTopic(name, partitions, replication, topic_configs=config)
            for name, config in configs.items()
            if name not in existing
        ]
        if missing:
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(missing)
        present = [name for name in configs if name in existing]
        if present:
            wrong = {
                d["topic"]: len(d["partitions"])
                for d in await admin.describe_topics(present)
                if len(d["partitions"]) != partitions
            }
            if wrong:
                raise TopicLayoutError(
                    f"topics exist with other partition counts than ENGRAM_PARTITIONS="
                    f"{partitions}: {wrong}; all Engram topics must share one count"
                )
    except KafkaError as exc:
        message = f"cannot create Engram's topics on {bootstrap}: {exc}"
        raise BackendUnavailableError(message) from exc
    finally:
        await admin.close()
