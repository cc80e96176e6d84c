"""Assembling a running Engram: backends, processors and the query service.

``Node`` runs any of the roles in one process: the embedded dev stack runs them all (plus
local servers from :mod:`streams.devstack.stack`); in a cluster ``engram worker`` runs the
processors and ``engram serve`` the query service, each scaled on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from aiokafka.errors import KafkaError

from processors.config import ProcessingConfig, load_processing_config
from processors.embedding import Embedder, embedder_from_name
from projections.episodic.factory import open_episodic_store
from projections.history import AgentHistory
from projections.interfaces import EpisodicMemoryStore, ProjectionError, WorkingMemoryStore
from projections.retrieval.engine import RetrievalEngine
from projections.service.app import HistoryReader, RetrievalHook, create_app
from projections.versions import ProjectionVersion, ProjectionVersions
from projections.working.redis_store import RedisWorkingMemory
from schemas.codec import encode_event
from schemas.memory_events import MemoryRetrieved
from schemas.topics import Topics
from streams.chat_summariser import summariser_from_url
from streams.episodic_projector import EpisodicProjector
from streams.history import read_agent_history
from streams.ingest import IngestPipeline
from streams.processor_app import ProcessorApp, create_processor_app
from streams.projection_switch import ProjectionFollower
from streams.publisher import producer_for
from streams.settings import EngramSettings
from streams.topic_admin import ensure_topics

log = logging.getLogger("engram.runtime")

HISTORY_TIMEOUT_S = 15.0
"""Longest one history request may read the log; past it the service answers 503, not hangs."""


@dataclass
class Endpoints:
    """Where the backends are: configured (cluster) or started locally (dev stack)."""

    kafka_bootstrap: str
    redis_url: str


def processing_config(settings: EngramSettings) -> ProcessingConfig:
    return load_processing_config(
        settings.agent_types,
        episodic_threshold=settings.episodic_threshold,
        working_capacity=settings.working_capacity,
        episodic_capacity=settings.episodic_capacity,
        lifecycle=settings.lifecycle,
    )


class RetrievalRecorder:
    """Puts each answered retrieval on ``memory.access``, keyed by agent id.

    A retrieval only waits for its record to be enqueued: delivery is the producer's job, and
    a delivery that fails is logged and counted, never raised into the retrieval that made it.
    """

    def __init__(self, bootstrap: str, topic: str, *, linger: float = 0.0) -> None:
        self.topic = topic
        self.delivered = 0
        self.failed = 0
        self._producer = producer_for(bootstrap, linger=linger)

    async def start(self) -> RetrievalRecorder:
        try:
            await self._producer.start()
            # The topic's metadata now, so the first retrieval does not wait for it.
            await self._producer.partitions_for(self.topic)
        except KafkaError as exc:
            await self._producer.stop()
            raise RuntimeError(f"cannot record retrievals on {self.topic}: {exc}") from exc
        return self

    async def __call__(self, event: MemoryRetrieved) -> None:
        delivery = await self._producer.send(
            self.topic, encode_event(event), key=event.agent_id.encode("utf-8")
        )
        delivery.add_done_callback(self._delivered)

    def _delivered(self, delivery: asyncio.Future[Any]) -> None:
        if delivery.cancelled() or delivery.exception() is not None:
            self.failed += 1
            reason = "cancelled" if delivery.cancelled() else delivery.exception()
            log.warning("a retrieval record was not delivered to %s: %s", self.topic, reason)
        else:
            self.delivered += 1

    async def stop(self) -> None:
        """Delivers what is still in flight, then closes the producer."""
        await self._producer.stop()


@dataclass
class Node:
    settings: EngramSettings
    endpoints: Endpoints
    run_processors: bool = True
    run_service: bool = True
    run_projector: bool = False
    embedder: Embedder = field(init=False)
    working: WorkingMemoryStore = field(init=False)
    episodic: EpisodicMemoryStore | None = field(default=None, init=False)
    projector: EpisodicProjector | None = field(default=None, init=False)
    processor: ProcessorApp | None = field(default=None, init=False)
    pipeline: IngestPipeline | None = field(default=None, init=False)
    recorder: RetrievalRecorder | None = field(default=None, init=False)
    engine: RetrievalEngine | None = field(default=None, init=False)
    versions: ProjectionVersions = field(init=False)
    version: ProjectionVersion = field(init=False)
    follower: ProjectionFollower | None = field(default=None, init=False)
    _write_lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)
    """One lock for every writer of this process, so one fence pauses them all."""
    http_port: int | None = field(default=None, init=False)
    _server: uvicorn.Server | None = field(default=None, init=False)
    _server_task: asyncio.Task[None] | None = field(default=None, init=False)

    async def start(self) -> Node:
        settings = self.settings
        self.embedder = embedder_from_name(settings.embedder)
        self.versions = ProjectionVersions.from_url(
            self.endpoints.redis_url, settings.redis_namespace, settings.qdrant_collection
        )
        self.version = await self.versions.active()
        self.working, self.episodic = await self._open_stores(self.version)
        if self.run_processors or self.run_projector:
            topics = Topics(settings.topic_prefix)
            await ensure_topics(self.endpoints.kafka_bootstrap, topics, settings.partitions)
        if self.run_projector:
            assert self.episodic is not None
            self.projector = await EpisodicProjector(
                self.endpoints.kafka_bootstrap,
                Topics(settings.topic_prefix),
                self.episodic,
                group_id=f"{settings.topic_prefix}{settings.app_id}-episodic",
                fetch_max_wait=settings.fetch_max_wait,
                write_lock=self._write_lock,
            ).start()
        if self.run_processors:
            await self._start_processors()
        if self.run_service:
            await self._start_service()
        writes = self.run_processors or self.run_projector
        self.follower = await ProjectionFollower(
            versions=self.versions,
            role="worker" if self.run_processors else "projector" if writes else "service",
            version=self.version,
            stores=(self.working, self.episodic),
            open_stores=self._open_stores,
            on_switch=self._use_version,
            write_lock=self._write_lock if writes else None,
        ).start()
        return self

    async def _open_stores(
        self, version: ProjectionVersion
    ) -> tuple[WorkingMemoryStore, EpisodicMemoryStore | None]:
        """The stores of one projection version that this process's roles need, answering."""
        settings = self.settings
        working = RedisWorkingMemory.from_url(
            self.endpoints.redis_url, namespace=version.redis_namespace
        )
        episodic: EpisodicMemoryStore | None = None
        try:
            await working.ping()
            workers_write = self.run_processors and settings.episodic_writer == "worker"
            if workers_write or self.run_service or self.run_projector:
                episodic = await open_episodic_store(
                    qdrant_url=settings.qdrant_url,
                    qdrant_path=None if settings.qdrant_url else settings.edge_path(),
                    collection=version.qdrant_collection,
                    dim=self.embedder.dim,
                    api_key=(
                        settings.qdrant_api_key.get_secret_value()
                        if settings.qdrant_api_key
                        else None
                    ),
                )
                await episodic.ping()
        except BaseException:
            await working.close()
            if episodic is not None:
                await episodic.close()
            raise
        return working, episodic

    async def _use_version(
        self,
        version: ProjectionVersion,
        stores: tuple[WorkingMemoryStore, EpisodicMemoryStore | None],
    ) -> None:
        """Every role of this process on the new version at once (no await in between)."""
        working, episodic = stores
        self.version, self.working, self.episodic = version, working, episodic
        if self.pipeline is not None:
            self.pipeline.working = working
            if self.settings.episodic_writer == "worker":
                self.pipeline.episodic = episodic
        if self.projector is not None and episodic is not None:
            self.projector.use(episodic)
        if self.engine is not None and episodic is not None:
            self.engine.use(working, episodic)

    async def _start_processors(self) -> None:
        settings = self.settings
        topics = Topics(settings.topic_prefix)
        self.processor = create_processor_app(settings, self.endpoints.kafka_bootstrap)
        config = processing_config(settings)

        def make_pipeline(**shell: Any) -> IngestPipeline:
            return IngestPipeline(
                config=config,
                embedder=self.embedder,
                topics=topics,
                working=self.working,
                episodic=self.episodic if settings.episodic_writer == "worker" else None,
                summariser=summariser_from_url(
                    settings.summariser_url,
                    settings.summariser_model,
                    (
                        settings.summariser_api_key.get_secret_value()
                        if settings.summariser_api_key
                        else None
                    ),
                    settings.summariser_timeout,
                ),
                **shell,
            )

        self.pipeline = self.processor.bind(make_pipeline)
        self.pipeline.write_lock = self._write_lock
        await self.processor.app.start()
        log.info("processors started", extra={"config_version": self.pipeline.config_version})

    async def _start_service(self) -> None:
        assert self.episodic is not None
        topics = Topics(self.settings.topic_prefix)
        engine = self.engine = RetrievalEngine(
            self.working,
            self.episodic,
            self.embedder,
            source_topics=(*topics.agent_inputs, topics.schedule, topics.access),
        )
        on_retrieval, history = await self._log_access()
        app = create_app(
            engine, readiness=self.readiness, on_retrieval=on_retrieval, history=history
        )
        config = uvicorn.Config(
            app,
            host=self.settings.http_host,
            port=self.settings.http_port,
            log_level="warning",
            lifespan="off",
            access_log=False,
        )
        self._server = uvicorn.Server(config)
        self._server.install_signal_handlers = False  # type: ignore[attr-defined]
        self._server_task = asyncio.create_task(self._server.serve())
        for _ in range(200):
            if self._server.started:
                break
            if self._server_task.done():
                self._server_task.result()
                raise RuntimeError("the query service stopped while starting")
            await asyncio.sleep(0.05)
        else:
            raise RuntimeError("the query service did not start within 10 s")
        sockets = [s for server in self._server.servers for s in server.sockets]
        self.http_port = int(sockets[0].getsockname()[1])

    async def _log_access(self) -> tuple[RetrievalHook | None, HistoryReader | None]:
        """The service's recorder of retrievals and its history reader, given a broker."""
        settings, bootstrap = self.settings, self.endpoints.kafka_bootstrap
        if not bootstrap:
            log.warning(
                "no Kafka bootstrap: retrievals are not recorded on memory.access, "
                "and the history route answers 503"
            )
            return None, None
        topics = Topics(settings.topic_prefix)
        if not (self.run_processors or self.run_projector):
            # Otherwise a first retrieval could auto-create memory.access with another count.
            await ensure_topics(bootstrap, topics, settings.partitions)
        self.recorder = await RetrievalRecorder(
            bootstrap, topics.access, linger=settings.producer_linger
        ).start()

        async def history(agent_id: str, limit: int) -> AgentHistory:
            return await read_agent_history(
                bootstrap,
                topics,
                agent_id,
                settings.partitions,
                limit=limit,
                timeout=HISTORY_TIMEOUT_S,
            )

        return self.recorder, history

    @property
    def http_url(self) -> str | None:
        if self.http_port is None:
            return None
        return f"http://{self.settings.http_host}:{self.http_port}"

    async def readiness(self) -> dict[str, str]:
        checks: dict[str, str] = {}
        stores = [("redis", self.working), ("qdrant", self.episodic)]
        for name, store in [(n, s) for n, s in stores if s is not None]:
            try:
                await store.ping()
                checks[name] = "ok"
            except ProjectionError as exc:
                checks[name] = f"unavailable: {exc}"
        if self.processor is not None:
            checks["processors"] = "ok" if not self.processor.app.should_stop else "stopped"
        if self.projector is not None:
            checks["episodic projector"] = "ok" if self.projector.running else "stopped"
        return checks

    async def stop(self) -> None:
        """Drain: the query service stops taking requests, then Faust commits and stops."""
        if self._server is not None:
            self._server.should_exit = True
            if self._server_task is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._server_task, 10)
        if self.recorder is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.recorder.stop(), 10)
        if self.processor is not None:
            await self.processor.app.stop()
        if self.projector is not None:
            await self.projector.stop()
        if self.follower is not None:
            await self.follower.stop()
        for store in [s for s in (self.working, self.episodic) if s is not None]:
            with contextlib.suppress(Exception):
                await store.close()
        with contextlib.suppress(Exception):
            await self.versions.close()
