"""Creating Engram's topics with the partition count the processors expect.

All agent topics share one partition count and one key (the agent id), so an agent's events
land on the same partition number everywhere and one worker owns them (co-partitioning).
"""

from __future__ import annotations

import contextlib

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from schemas.topics import Topics


async def ensure_topics(
    bootstrap: str, topics: Topics, partitions: int, *, replication: int = 1
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15_000)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [
            NewTopic(name, num_partitions=partitions, replication_factor=replication)
            for name in topics.all()
            if name not in existing
        ]
        if missing:
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(missing)
    except KafkaError as exc:
        raise RuntimeError(f"cannot create Engram's topics on {bootstrap}: {exc}") from exc
    finally:
        await admin.close()
