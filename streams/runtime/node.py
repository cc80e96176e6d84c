"""Assembling a running Engram: backends, processors and the query service.

``Node`` runs any of the roles in one process: the embedded dev stack runs them all (plus
local servers from :mod:`streams.runtime.devstack.stack`); in a cluster ``engram worker`` runs the
processors and ``engram serve`` the query service, each scaled on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from prometheus_client import CollectorRegistry

from processors.embedding import Embedder, embedder_from_name
from processors.summarising import Summariser
from projections.episodic.edge_location import EdgeHolderLease, record_edge_dir
from projections.episodic.factory import open_episodic_store
from projections.history import AgentHistory
from projections.interfaces import EpisodicMemoryStore, ProjectionError, WorkingMemoryStore
from projections.learned.reads import LearnedMemory
from projections.retrieval.as_of import RECALL_TIMEOUT_S
from projections.retrieval.engine import RetrievalEngine
from projections.service.app import HistoryReader, RetrievalHook, create_app
from projections.service.auth import ApiKeys
from projections.service.embedded_server import EmbeddedServer
from projections.service.http_auth import api_keys_for
from projections.service.metrics import ServiceMetrics
from projections.versions import (
    DerivedLog,
    ProjectionStores,
    ProjectionVersion,
    ProjectionVersions,
    WriteLock,
)
from projections.working.agent_index import AgentIndex
from projections.working.redis_store import RedisWorkingMemory
from schemas.topics import Topics
from streams.eventlog.history import placement, read_agent_history
from streams.eventlog.kafka_clients import use_security
from streams.eventlog.log_ends import BrokerLogEnds
from streams.eventlog.topic_admin import TopicReplication, ensure_topics
from streams.integrations.chat_summariser import summariser_from_url
from streams.privacy.keyring import Keyring, open_keyring
from streams.privacy.sealing import RecordSealer
from streams.rebuild.as_of import LogRecaller
from streams.rebuild.projection_switch import ProjectionFollower, Serving, WrongConfigurationError
from streams.rebuild.projector import EpisodicProjector
from streams.runtime.node_metrics import node_registry
from streams.runtime.retrieval_recorder import RetrievalRecorder
from streams.runtime.tracing import Tracing, start_tracing
from streams.runtime.worker_health import AssignmentProgress, ProbeServer, probe_app
from streams.settings import EngramSettings, processing_config
from streams.worker.app import ProcessorApp, create_processor_app
from streams.worker.pipeline import IngestPipeline

log = logging.getLogger("engram.runtime")

HISTORY_TIMEOUT_S = 15.0
"""Longest one history request may read the log; past it the service answers 503, not hangs."""


@dataclass
class Endpoints:
    """Where the backends are: configured (cluster) or started locally (dev stack)."""

    kafka_bootstrap: str
    redis_url: str


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
    log_ends: BrokerLogEnds | None = field(default=None, init=False)
    """Where the log ends, for the query service to refuse positions it does not hold."""
    versions: ProjectionVersions = field(init=False)
    version: ProjectionVersion = field(init=False)
    follower: ProjectionFollower | None = field(default=None, init=False)
    keyring: Keyring | None = field(default=None, init=False)
    """The agents' sealing keys (``ENGRAM_KEYRING``), shared by this process's roles."""
    topics: Topics = field(init=False)
    """The raw topics, and the derived log the active version continues."""
    serving: Serving = field(init=False)
    summariser: Summariser = field(init=False)
    left: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    """Set when the active version moved to one this process cannot serve (``left_reason``
    says why): its owner stops it, and it is restarted with the version's configuration."""
    left_reason: str | None = field(default=None, init=False)
    _logs: dict[str | None, DerivedLog | None] = field(default_factory=dict, init=False)
    _write_lock: WriteLock = field(default_factory=WriteLock, init=False)
    """One lock for every writer of this process, so one fence pauses them all."""
    _agent_indexes: list[AgentIndex] = field(default_factory=list, init=False)
    agent_index: AgentIndex | None = field(default=None, init=False)
    """The active version's agent index, which this process's workers write and its history
    reads (one for all, moved with the version at a switch)."""
    http_port: int | None = field(default=None, init=False)
    metrics: CollectorRegistry = field(init=False)
    """Every Prometheus metric of this node (its workers' and its query service's)."""
    _service_metrics: ServiceMetrics = field(init=False)
    api_keys: ApiKeys | None = field(default=None, init=False)
    """The keys the query service accepts (``ENGRAM_API_KEYS_FILE``); None: it takes anyone."""
    _server: uvicorn.Server | None = field(default=None, init=False)
    _server_task: asyncio.Task[None] | None = field(default=None, init=False)
    progress: AssignmentProgress | None = field(default=None, init=False)
    """Whether the processors caught up with their assignment (``ENGRAM_HEALTH_PORT`` set)."""
    probes: ProbeServer | None = field(default=None, init=False)
    edge_lease: EdgeHolderLease | None = field(default=None, init=False)
    tracing: Tracing | None = field(default=None, init=False)
    """Spans around batches and retrievals (``ENGRAM_TRACING``); None: no tracing."""

    @property
    def _service_name(self) -> str:
        """What the traces call this process."""
        if self.run_service:
            return "engram" if self.run_processors else "engram-query"
        return "engram-worker" if self.run_processors else "engram-projector"

    async def start(self) -> Node:
        settings = self.settings
        use_security(settings)
        self.tracing = start_tracing(settings, self._service_name)
        self.metrics, self._service_metrics = node_registry(self)
        if self.run_service:
            # Before any backend: a bad keys file is a configuration error, said at once.
            self.api_keys = api_keys_for(
                settings.api_keys_file, "query service", settings.http_host
            )
        self.embedder = embedder_from_name(
            settings.embedder,
            minilm_precision=settings.minilm_precision,
            minilm_runtime=settings.minilm_runtime,
        )
        self.keyring = await open_keyring(
            settings.keyring,
            redis_url=self.endpoints.redis_url,
            namespace=settings.redis_namespace,
            default_dir=settings.keyring_dir(),
        )
        self.versions = ProjectionVersions.from_url(
            self.endpoints.redis_url, settings.redis_namespace, settings.qdrant_collection
        )
        self.version = await self.versions.active()
        await self._serve_derived_log_of(self.version)
        try:
            await self._start_roles()
        except BaseException:
            # What started is stopped (Faust's thread, above all, which would hold the
            # process), then the failure goes on: a port in use, a backend gone.
            with contextlib.suppress(Exception):
                await self.stop()
            raise
        return self

    async def _start_roles(self) -> None:
        """The stores, and each role this process runs, on the active version."""
        settings = self.settings
        self.working, self.episodic = await self._open_stores(self.version)
        if self.episodic is not None and not settings.qdrant_url:  # this process holds Edge
            self.edge_lease = await EdgeHolderLease.take(
                self.endpoints.redis_url, settings.redis_namespace, settings.edge_path()
            )
        if self.run_processors or self.run_projector:
            await ensure_topics(
                self.endpoints.kafka_bootstrap,
                self.topics,
                settings.partitions,
                replication=TopicReplication.from_settings(settings),
            )
        if self.run_projector:
            assert self.episodic is not None
            self.projector = await EpisodicProjector(
                self.endpoints.kafka_bootstrap,
                self.topics,
                self.episodic,
                group_id=f"{self._group}-episodic",
                fetch_max_wait=settings.fetch_max_wait,
                write_lock=self._write_lock,
                sealer=RecordSealer(self.keyring),
                commit_every=settings.edge_sync_seconds,
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
            refusal=self._refusal,
            on_leave=self._leave,
        ).start()
        if settings.health_port is not None and not self.run_service:
            app = probe_app(
                self.liveness,
                self.probe_readiness,
                metrics=self.metrics if settings.metrics else None,
            )
            self.probes = await ProbeServer(app, settings.http_host, settings.health_port).start()
        if self.edge_lease is not None:
            # Where replays build versions; once started only (a failed start's misled them).
            await record_edge_dir(
                self.endpoints.redis_url, settings.redis_namespace, settings.edge_path()
            )

    async def _serve_derived_log_of(self, version: ProjectionVersion) -> None:
        """Write (and read history from) the derived log ``version`` continues, under its
        consumer group; refuse a version reprocessed with another configuration."""
        settings = self.settings
        self.summariser = summariser_from_url(
            settings.summariser_url,
            settings.summariser_model,
            settings.summariser_api_key.get_secret_value() if settings.summariser_api_key else None,
            settings.summariser_timeout,
        )
        config_version = (
            processing_config(settings).version(self.embedder.id, self.summariser.id)
            if self.run_processors
            else ""
        )
        derived = await self.versions.derived_log(version.name)
        self.serving = Serving(
            derived,
            config_version,
            self.embedder.id,
            derives=self.run_processors,
            applies_log=self.run_processors or self.run_projector,
        )
        reason = self.serving.refusal(version, derived)
        if reason is None and derived is None:
            reason = await self._live_embedder_refusal()
        if reason is not None:
            with contextlib.suppress(Exception):
                await self.versions.close()
            if self.keyring is not None:
                with contextlib.suppress(Exception):
                    await self.keyring.close()
            raise WrongConfigurationError(reason)
        self.topics = self._topics_of(derived)

    async def _live_embedder_refusal(self) -> str | None:
        """Why this process cannot serve the live derived log: another embedder made its
        vectors (None if none did, or nothing recorded one yet)."""
        mine = self.embedder.id
        recorded = await self.versions.live_embedder(claim=mine if self.run_processors else None)
        if recorded is None or recorded == mine:
            return None
        return (
            f"the live derived log is embedded with {recorded}, this process has embedder "
            f"{mine} (ENGRAM_EMBEDDER): vectors of two embedders cannot be compared. Start "
            f"it with the log's embedder, or derive a version with this one (`engram "
            f"reprocess`, then `engram versions activate`)"
        )

    def _topics_of(self, derived: DerivedLog | None) -> Topics:
        prefix = self.settings.topic_prefix
        return Topics(prefix, None if derived is None else derived.topic_prefix)

    @property
    def _group(self) -> str:
        """The processors' consumer group (Faust app id): the live one or the version's."""
        derived = self.serving.derived_log
        settings = self.settings
        return derived.group if derived else f"{settings.topic_prefix}{settings.app_id}"

    async def _refusal(self, version: ProjectionVersion) -> str | None:
        derived = await self.versions.derived_log(version.name)
        self._logs[version.name] = derived
        reason = self.serving.refusal(version, derived)
        if reason is None and derived is None:
            # A query service set up for a reprocessed version's embedder, moved back to the
            # live log, would embed its queries unlike the live log's vectors.
            reason = await self._live_embedder_refusal()
        return reason

    def _leave(self, version: ProjectionVersion, reason: str) -> None:
        self.left_reason = reason
        self.left.set()

    async def _open_stores(self, version: ProjectionVersion) -> ProjectionStores:
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
                    archive=settings.archive,
                    optimize_every=settings.edge_optimize_every,
                    decoded_memories=settings.edge_decoded_memories,
                    edge_vectors=settings.edge_vectors,
                    sync_every=settings.edge_sync_seconds,
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

    async def _use_version(self, version: ProjectionVersion, stores: ProjectionStores) -> None:
        """Every role of this process on the new version at once (no await in between)."""
        working, episodic = stores
        self.version, self.working, self.episodic = version, working, episodic
        if version.name in self._logs:
            # Only a process that writes no derived log switches between two of them.
            self.topics = self._topics_of(self._logs.pop(version.name))
        if self.agent_index is not None:
            # A replay wrote the new version's index up to the switch: the batches after it
            # go on from there, and a history reads it.
            self.agent_index = self._agent_index_of(version)
        if self.pipeline is not None:
            self.pipeline.agent_index = self.agent_index
            self.pipeline.working = working
            if self.settings.episodic_writer == "worker":
                self.pipeline.episodic = episodic
        if self.projector is not None and episodic is not None:
            self.projector.use(episodic)
        if self.engine is not None and episodic is not None:
            self.engine.use(working, episodic)

    async def _start_processors(self) -> None:
        settings = self.settings
        topics = self.topics
        self.processor = create_processor_app(
            settings,
            self.endpoints.kafka_bootstrap,
            topics=topics,
            app_id=self._group,
            trace_batch=self.tracing.batch if self.tracing else None,
        )
        config = processing_config(settings)

        def make_pipeline(**shell: Any) -> IngestPipeline:
            return IngestPipeline(
                config=config,
                embedder=self.embedder,
                topics=topics,
                working=self.working,
                episodic=self.episodic if settings.episodic_writer == "worker" else None,
                summariser=self.summariser,
                sealer=RecordSealer(self.keyring),
                agent_index=self._current_agent_index(),
                placement=placement(settings.partitions),
                **shell,
            )

        self.pipeline = self.processor.bind(make_pipeline)
        self.pipeline.write_lock = self._write_lock
        if settings.health_port is not None:
            stats = self.pipeline.stats
            self.progress = AssignmentProgress(
                self.endpoints.kafka_bootstrap, self._group, lambda: stats.applied
            )
            self.progress.watch(self.processor.app)  # before the app joins its group
        await self.processor.app.start()
        started: dict[str, object] = {
            "config_version": self.pipeline.config_version,
            "embedder": self.embedder.id,
        }
        # MiniLM's arithmetic and runtime: auto picks both by the CPU and what is installed,
        # which an operator sizing a cluster from our figures needs to know.
        for name in ("precision", "runtime"):
            if (value := getattr(self.embedder, name, None)) is not None:
                started[name] = value
        log.info("processors started", extra=started)

    async def _start_service(self) -> None:
        assert self.episodic is not None
        topics = self.topics
        bootstrap = self.endpoints.kafka_bootstrap
        if bootstrap:
            self.log_ends = await BrokerLogEnds(bootstrap, self.settings.partitions).start()
        engine = self.engine = RetrievalEngine(
            self.working,
            self.episodic,
            self.embedder,
            source_topics=(*topics.agent_inputs, topics.schedule, topics.access),
            dense_share=self.settings.dense_share,
            candidate_limit=self.settings.retrieval_candidates,
            relevance_candidate_limit=self.settings.relevance_candidates,
            log_ends=self.log_ends,
        )
        on_retrieval, history = await self._log_access()
        app = create_app(
            engine,
            readiness=self.readiness,
            on_retrieval=on_retrieval,
            history=history,
            recall=self._log_recall(),
            api_keys=self.api_keys,
            metrics=self._service_metrics if self.settings.metrics else None,
            learned=LearnedMemory(lambda: self.working, self.embedder),
            trace_retrieval=self.tracing.retrieval if self.tracing else None,
        )
        self._server = EmbeddedServer.serving(
            app, host=self.settings.http_host, port=self.settings.http_port
        )
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
        if not (self.run_processors or self.run_projector):
            # Otherwise a first retrieval could auto-create memory.access with another count.
            await ensure_topics(
                bootstrap,
                self.topics,
                settings.partitions,
                replication=TopicReplication.from_settings(settings),
            )
        self.recorder = await RetrievalRecorder(
            bootstrap,
            self.topics.access,
            linger=settings.producer_linger,
            sealer=RecordSealer(self.keyring),
        ).start()

        self._current_agent_index()

        async def history(agent_id: str, limit: int) -> AgentHistory:
            # The active version's derived log, read when asked: it follows the pointer.
            return await read_agent_history(
                bootstrap,
                self.topics,
                agent_id,
                settings.partitions,
                limit=limit,
                timeout=HISTORY_TIMEOUT_S,
                sealer=RecordSealer(self.keyring),
                index=self.agent_index,
            )

        return self.recorder, history

    def _current_agent_index(self) -> AgentIndex:
        """Where each agent's records lie, beside the active version's projections: a history
        reads only those (derived data; without it a history scans the agent's partition)."""
        if self.agent_index is None:
            self.agent_index = self._agent_index_of(self.version)
        return self.agent_index

    def _agent_index_of(self, version: ProjectionVersion) -> AgentIndex:
        index = AgentIndex.from_url(
            self.endpoints.redis_url, version.redis_namespace, cap=self.settings.agent_index_cap
        )
        self._agent_indexes.append(index)
        return index

    def _log_recall(self) -> LogRecaller | None:
        """Retrievals ``as_of`` a point of the log, rebuilt in scratch stores beside this
        process's (a Redis namespace next to its own, an Edge shard in a temporary directory)
        from the derived log of the active version; None without a broker."""
        bootstrap = self.endpoints.kafka_bootstrap
        if not bootstrap:
            return None
        return LogRecaller(
            bootstrap,
            lambda: self.topics,
            self.settings.partitions,
            self.endpoints.redis_url,
            self.settings.redis_namespace,
            self.embedder,
            dense_share=self.settings.dense_share,
            candidate_limit=self.settings.retrieval_candidates,
            relevance_candidate_limit=self.settings.relevance_candidates,
            sealer=RecordSealer(self.keyring),
            timeout=RECALL_TIMEOUT_S,
            log_ends=self.log_ends,
        )

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

    async def liveness(self) -> dict[str, str]:
        """The processing loops run (answering at all says the event loop does)."""
        checks: dict[str, str] = {}
        if self.processor is not None:
            checks["processors"] = "ok" if not self.processor.app.should_stop else "stopped"
        if self.projector is not None:
            checks["episodic projector"] = "ok" if self.projector.running else "stopped"
        return checks

    async def probe_readiness(self) -> dict[str, str]:
        """Live, and the processors took their partitions over and processed their backlog."""
        checks = await self.liveness()
        if self.progress is not None:
            checks["partitions"] = await self.progress.check()
        return checks

    async def stop(self) -> None:
        """Drain: the query service stops taking requests, then Faust commits and stops."""
        if self.probes is not None:
            await self.probes.stop()
        if self._server is not None:
            self._server.should_exit = True
            if self._server_task is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._server_task, 10)
        if self.recorder is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.recorder.stop(), 10)
        if self.log_ends is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.log_ends.stop(), 10)
        if self.processor is not None:
            await self.processor.app.stop()
        if self.projector is not None:
            await self.projector.stop()
        if self.follower is not None:
            await self.follower.stop()
        stores = (getattr(self, "working", None), self.episodic)  # none if a start failed first
        for store in [s for s in stores if s is not None]:
            with contextlib.suppress(Exception):
                await store.close()
        for index in self._agent_indexes:
            with contextlib.suppress(Exception):
                await index.close()
        with contextlib.suppress(Exception):
            await self.versions.close()
        if self.edge_lease is not None:  # once its shards are closed
            await self.edge_lease.release()
        if self.keyring is not None:
            with contextlib.suppress(Exception):
                await self.keyring.close()

    async def __aenter__(self) -> Node:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
