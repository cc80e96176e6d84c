"""Creating Engram's topics with the partition count the processors expect.

All topics share one partition count and one key (the agent id): an agent's events land on the
same partition number everywhere, one worker owns them (co-partitioning), and derived records go
to the partition number of their source record. Topics keep their records forever
(``retention.ms=-1``): the log is the truth, and a worker folds its state from it. The snapshot
topic is compacted (``cleanup.policy=compact``): only its latest records per key matter, and
its readers never depend on compaction having happened (a broker may not implement it).

Every topic Engram creates itself (these, a reprocessed version's derived topics, an imported
archive's, Faust's own) gets the replication of :class:`TopicReplication`, from the settings:
on a cluster, a keep-forever log with one copy is one disk failure from gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError, for_code

from schemas.errors import BackendUnavailableError, EngramError
from schemas.topics import Topics
from streams.eventlog.kafka_clients import admin_client
from streams.settings import EngramSettings

TOPIC_CONFIG = {"retention.ms": "-1"}
SNAPSHOT_TOPIC_CONFIG = {"cleanup.policy": "compact"}


@dataclass(frozen=True)
class TopicReplication:
    """How many copies a new topic gets, and how many must acknowledge a write."""

    factor: int = 1
    """Replicas per partition (``ENGRAM_TOPIC_REPLICATION_FACTOR``)."""
    min_insync: int | None = None
    """``min.insync.replicas`` (``ENGRAM_TOPIC_MIN_INSYNC_REPLICAS``); None: the broker's."""

    @classmethod
    def from_settings(cls, settings: EngramSettings) -> TopicReplication:
        return cls(settings.topic_replication_factor, settings.topic_min_insync_replicas)

    def configs(self) -> dict[str, str]:
        """The topic configs this adds to a new topic's."""
        if self.min_insync is None:
            return {}
        return {"min.insync.replicas": str(self.min_insync)}

    def new_topic(
        self, name: str, partitions: int, extra: dict[str, str] | None = None
    ) -> NewTopic:
        """A keep-forever topic with this replication (and ``extra`` configs: compaction)."""
        configs = {**TOPIC_CONFIG, **self.configs(), **(extra or {})}
        return NewTopic(name, partitions, self.factor, topic_configs=configs)


ONE_COPY = TopicReplication()
"""The settings' defaults: what the one-node dev broker can hold."""


class TopicLayoutError(EngramError, RuntimeError):
    """Existing topics do not have the partition count Engram is configured for."""


async def started_admin(bootstrap: str) -> AIOKafkaAdminClient:
    """An admin client, started; closed again if it cannot start (else it lingers, and its
    finaliser warns of it at exit), its error raised as it is: a broker out of reach."""
    admin = admin_client(bootstrap)
    try:
        await admin.start()
    except BaseException:
        await admin.close()
        raise
    return admin


async def ensure_topics(
    bootstrap: str,
    topics: Topics,
    partitions: int,
    *,
    replication: TopicReplication = ONE_COPY,
) -> None:
    """Create the missing ones (existing topics keep their replication: Kafka changes it only
    by a partition reassignment) and check every one has ``partitions``."""
    admin = await started_admin(bootstrap)
    try:
        existing = set(await admin.list_topics())
        configs: dict[str, dict[str, str]] = {name: {} for name in topics.all()}
        configs[topics.snapshots] = SNAPSHOT_TOPIC_CONFIG
        missing = [
            replication.new_topic(name, partitions, config)
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


async def delete_topics(
    bootstrap: str, names: Sequence[str], *, timeout: float = 30.0
) -> list[str]:
    """Delete those of ``names`` that exist (the derived log of a dropped projection version)
    and wait until the broker no longer lists them: Kafka deletes topics asynchronously, and a
    topic created again under a name still being deleted would keep its old records. Returns
    the topics deleted."""
    admin = await started_admin(bootstrap)
    try:
        doomed = sorted(set(names) & set(await admin.list_topics()))
        if doomed:
            answer = await admin.delete_topics(doomed)
            if refused := refused_deletions(answer.topic_error_codes):
                raise BackendUnavailableError(f"the broker at {bootstrap} refused: {refused}")
        deadline = time.monotonic() + timeout
        while left := sorted(set(doomed) & set(await admin.list_topics())):
            if time.monotonic() > deadline:
                raise BackendUnavailableError(
                    f"the broker at {bootstrap} still lists {', '.join(left)} {timeout:.0f}s "
                    "after deleting them: run the command again later"
                )
            await asyncio.sleep(0.2)
        return doomed
    except KafkaError as exc:
        raise BackendUnavailableError(f"cannot delete topics on {bootstrap}: {exc}") from exc
    finally:
        await admin.close()


def refused_deletions(topic_error_codes: Sequence[tuple[Any, ...]]) -> dict[str, str]:
    """The topics a DeleteTopics answer refused, with the broker's reason. aiokafka returns
    the answer rather than raising: unread, a refusal (an ACL, deletion disabled) looked like a
    deletion still under way."""
    return {str(t[0]): for_code(int(t[1])).__name__ for t in topic_error_codes if t[1] != 0}
