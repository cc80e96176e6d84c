"""The client agents publish with. Any Kafka client writing valid JSON works too; this one adds
validation before sending, keying by agent id, the record's position in the log, and sealing
with the agent's key when given a keyring (``keyring_for``), without which
``engram forget-agent`` cannot make the agent's events unreadable (deploy/README.md,
"Forgetting an agent")."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from aiokafka.errors import KafkaError

from schemas.agent_events import AgentEvent, Decision, Feedback, Observation
from schemas.codec import encode_event
from schemas.errors import BackendUnavailableError, EngramError
from schemas.topics import Topics
from streams.eventlog.kafka_clients import record_producer
from streams.privacy.keyring import Keyring, KeyringError, keyring_from_setting, open_keyring
from streams.privacy.sealing import RecordSealer
from streams.settings import EngramSettings

T = TypeVar("T")
PublishHeaders = Callable[[AgentEvent, str], list[tuple[str, bytes]]]
"""A record's headers, given its event and topic (:meth:`streams.runtime.tracing.Tracing.
publish_headers`: its trace context and event id)."""


class PublishError(BackendUnavailableError):
    """The broker did not take the record; the message says why."""


class PublisherSettingsError(EngramError, ValueError):
    """The environment does not say where to publish, or with which keys."""


@dataclass(frozen=True)
class Position:
    """Where a record landed: what a read-your-writes query waits for."""

    topic: str
    partition: int
    offset: int


KEY_REFRESH_S = 5.0
"""How long a publisher trusts its cached agent keys: once an agent is forgotten, what it
publishes with the old key within this window is forgotten with it."""


class AsyncPublisher:
    def __init__(
        self,
        bootstrap: str,
        *,
        topics: Topics | None = None,
        linger: float = 0.0,
        keyring: Keyring | None = None,
        headers: PublishHeaders | None = None,
    ):
        """``headers``: what each record carries besides its key and value (None: nothing)."""
        self.topics = topics or Topics()
        self._producer = record_producer(bootstrap, linger=linger)
        self._sealer = RecordSealer(keyring)
        self._headers = headers
        self._owns_keyring = False

    @classmethod
    async def from_environment(cls, *, linger: float = 0.0) -> AsyncPublisher:
        """Started, publishing as ``engram publish`` does: to the broker and topics of the
        ``ENGRAM_*`` environment (the line ``engram up`` prints), each event sealed with its
        agent's key from the deployment's keyring, so ``engram forget-agent`` can make it
        unreadable. A publisher given only a bootstrap publishes unsealed. The keyring is
        closed with the publisher."""
        settings = EngramSettings()
        if not settings.kafka_bootstrap:
            raise PublisherSettingsError("set ENGRAM_KAFKA_BOOTSTRAP (engram up prints it)")
        if settings.keyring is None and settings.redis_url is None:
            raise PublisherSettingsError(
                "set ENGRAM_REDIS_URL (the keyring is found there) or ENGRAM_KEYRING "
                "(ENGRAM_KEYRING=off publishes unsealed): without them the events would be "
                "sealed with keys no worker holds"
            )
        keyring = await open_keyring(
            settings.keyring,
            redis_url=settings.redis_url,
            namespace=settings.redis_namespace,
            default_dir=settings.keyring_dir(),
        )
        publisher = cls(
            settings.kafka_bootstrap,
            topics=Topics(settings.topic_prefix),
            linger=linger,
            keyring=keyring,
        )
        publisher._owns_keyring = True
        try:
            return await publisher.start()
        except BaseException:
            if keyring is not None:
                await keyring.close()
            raise

    async def start(self) -> AsyncPublisher:
        try:
            await self._producer.start()
        except KafkaError as exc:
            await self._producer.stop()
            raise PublishError(f"cannot reach the broker: {exc}") from exc
        return self

    async def close(self) -> None:
        """Stops the producer; the keyring belongs to whoever passed it (closed here only when
        :meth:`from_environment` opened it)."""
        try:
            await self._producer.stop()
        finally:
            keyring = self._sealer.keyring
            if self._owns_keyring and keyring is not None:
                self._owns_keyring = False
                await keyring.close()

    async def __aenter__(self) -> AsyncPublisher:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def publish(self, event: AgentEvent) -> Position:
        return await (await self.enqueue(event))

    async def enqueue(self, event: AgentEvent) -> asyncio.Future[Position]:
        """Hand the record to the producer; await the returned future for its position.

        Lets a caller keep many records in flight, which batching needs for throughput.
        """
        topic = self.topics.for_event_type(event.event_type)
        try:
            value = await self._sealed(event)
            key = event.agent_id.encode("utf-8")
            if self._headers is None:
                sent = await self._producer.send(topic, value, key=key)
            else:
                headers = self._headers(event, topic)
                sent = await self._producer.send(topic, value, key=key, headers=headers)
        except KeyringError as exc:
            raise PublishError(f"cannot seal the event of {event.agent_id}: {exc}") from exc
        except KafkaError as exc:
            raise PublishError(f"publishing to {topic} failed: {exc}") from exc
        loop = asyncio.get_running_loop()
        position: asyncio.Future[Position] = loop.create_future()

        def done(fut: asyncio.Future[Any]) -> None:
            if fut.cancelled():
                position.cancel()
            elif (exc := fut.exception()) is not None:
                position.set_exception(PublishError(f"publishing to {topic} failed: {exc}"))
            else:
                md = fut.result()
                position.set_result(Position(md.topic, md.partition, md.offset))

        sent.add_done_callback(done)
        return position

    async def _sealed(self, event: AgentEvent) -> bytes:
        sealer = self._sealer
        if not sealer.enabled:
            return encode_event(event)
        await sealer.refresh_every(KEY_REFRESH_S)
        await sealer.prepare_seal((event.agent_id,))
        return sealer.seal(event.agent_id, encode_event(event))

    async def publish_many(self, events: Iterable[AgentEvent]) -> list[Position]:
        events = list(events)
        try:
            # One keyring round trip for every agent of the lot, not one per new agent.
            await self._sealer.prepare_seal({e.agent_id for e in events})
        except KeyringError as exc:
            raise PublishError(f"cannot seal the events: {exc}") from exc
        pending = [await self.enqueue(event) for event in events]
        return list(await asyncio.gather(*pending))

    async def observe(self, agent_id: str, content: str, **fields: Any) -> Position:
        return await self.publish(Observation(agent_id=agent_id, content=content, **fields))

    async def decide(self, agent_id: str, skill: str, content: str, **fields: Any) -> Position:
        return await self.publish(
            Decision(agent_id=agent_id, skill=skill, content=content, **fields)
        )

    async def feedback(
        self, agent_id: str, target_event_id: str, signal: float, **fields: Any
    ) -> Position:
        return await self.publish(
            Feedback(agent_id=agent_id, target_event_id=target_event_id, signal=signal, **fields)
        )


class Publisher:
    """Blocking facade for simulation loops that are not async: one background event loop."""

    def __init__(
        self,
        bootstrap: str,
        *,
        topics: Topics | None = None,
        linger: float = 0.0,
        keyring: str | None = None,
        namespace: str = "engram",
    ):
        """``keyring``: where the agents' keys are, as ``ENGRAM_KEYRING`` says it (a redis://
        URL or ``file:PATH``); None publishes unsealed."""
        self._start(self._make(bootstrap, topics, linger, keyring, namespace))

    @classmethod
    def from_environment(cls, *, linger: float = 0.0) -> Publisher:
        """As :meth:`AsyncPublisher.from_environment`: the broker, topics and keyring of the
        ``ENGRAM_*`` environment, events sealed as ``engram publish`` seals them."""
        publisher = cls.__new__(cls)
        publisher._start(AsyncPublisher.from_environment(linger=linger))
        return publisher

    def _start(self, made: Coroutine[Any, Any, AsyncPublisher]) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        try:
            self._async = self._run(made)
        except BaseException:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()
            raise

    @staticmethod
    async def _make(
        bootstrap: str, topics: Topics | None, linger: float, keyring: str | None, namespace: str
    ) -> AsyncPublisher:
        keys = (
            None
            if keyring is None
            else keyring_from_setting(keyring, redis_url=None, namespace=namespace)
        )
        return await AsyncPublisher(bootstrap, topics=topics, linger=linger, keyring=keys).start()

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout)

    def publish(self, event: AgentEvent) -> Position:
        return self._run(self._async.publish(event))

    def publish_many(self, events: Iterable[AgentEvent]) -> list[Position]:
        return self._run(self._async.publish_many(list(events)), timeout=300.0)

    def observe(self, agent_id: str, content: str, **fields: Any) -> Position:
        return self._run(self._async.observe(agent_id, content, **fields))

    def decide(self, agent_id: str, skill: str, content: str, **fields: Any) -> Position:
        return self._run(self._async.decide(agent_id, skill, content, **fields))

    def feedback(
        self, agent_id: str, target_event_id: str, signal: float, **fields: Any
    ) -> Position:
        return self._run(self._async.feedback(agent_id, target_event_id, signal, **fields))

    def close(self) -> None:
        try:
            closes_its_keyring = self._async._owns_keyring
            self._run(self._async.close(), timeout=30.0)
            keyring = self._async._sealer.keyring
            if keyring is not None and not closes_its_keyring:
                self._run(keyring.close(), timeout=10.0)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    def __enter__(self) -> Publisher:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
