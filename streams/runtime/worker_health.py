"""The probes of a process without the query service (``engram worker``, ``engram project``):
``/healthz`` and ``/readyz`` on ``ENGRAM_HEALTH_PORT``, for an orchestrator's liveness,
readiness and startup probes.

Live: the processing loop runs (the event loop answers, and Faust has not stopped). A worker
that waits for a backend that is down stays live: it resumes by itself, and a restart would
only fold its state again.

Ready: the worker holds an assignment, and every assigned partition's backlog at the time of
the assignment is processed (the group committed past it, or the pipeline applied up to it).
Readiness answers "is this replica doing its share" for rollouts and disruption budgets, so it
is reached once per assignment and kept until the next rebalance: a replica that falls behind
under load stays ready (lag is the autoscaler's signal, not a reason to count a pod as down).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry, make_asgi_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Mount, Route

from projections.service.embedded_server import EmbeddedServer
from streams.eventlog.kafka_clients import log_end_reader
from streams.eventlog.log_ends import BrokerLogEnds
from streams.eventlog.log_starts import log_starts
from streams.rebuild.replay import committed_offsets

log = logging.getLogger("engram.health")

TopicPart = tuple[str, int]
Checks = Callable[[], Awaitable[dict[str, str]]]

CHECK_TIMEOUT_S = 5.0
"""Longest one probe waits for the broker; past it the probe answers 503 and says why."""


def behind(
    targets: Mapping[TopicPart, int],
    committed: Mapping[TopicPart, int],
    applied: Mapping[TopicPart, int],
) -> list[TopicPart]:
    """The partitions whose backlog is not processed yet: ``targets`` is where each one ended
    when it was assigned, ``committed`` the group's next offset to process, ``applied`` the
    last offset the pipeline handled in this process."""
    return sorted(
        tp
        for tp, end in targets.items()
        if max(committed.get(tp, 0), applied.get(tp, -1) + 1) < end
    )


@dataclass
class AssignmentProgress:
    """Whether the partitions assigned last are taken over and their backlog processed."""

    bootstrap: str
    group_id: str
    applied: Callable[[], Mapping[TopicPart, int]]
    """The last raw offset the pipeline handled per partition (its stats)."""
    assigned: set[TopicPart] | None = None
    """None until the first assignment: the worker has not joined its group yet."""
    targets: dict[TopicPart, int] | None = None
    """Where the assigned partitions ended, read at the first probe after the assignment."""
    caught_up: bool = False

    def on_assigned(self, partitions: Iterable[TopicPart]) -> None:
        self.assigned = set(partitions)
        self.targets = None
        self.caught_up = False

    async def check(self) -> str:
        """ "ok", or what the worker still waits for."""
        if self.assigned is None:
            return "waiting for a partition assignment"
        if self.caught_up:
            return "ok"
        if self.targets is None:
            self.targets = await self._backlogs(self.assigned)
        if not self.targets:
            self.caught_up = True
            return "ok"
        tps = [TopicPartition(t, p) for t, p in self.targets]
        committed = {
            (tp.topic, tp.partition): offset
            for tp, offset in (await committed_offsets(self.bootstrap, self.group_id, tps)).items()
        }
        waiting = behind(self.targets, committed, self.applied())
        if waiting:
            return f"processing the backlog of {len(waiting)} of {len(self.targets)} partitions"
        self.caught_up = True
        log.info("caught up with the backlog of %d partitions", len(self.targets))
        return "ok"

    async def _backlogs(self, assigned: set[TopicPart]) -> dict[TopicPart, int]:
        """The end of every assigned partition that holds records (read to the end: Tansu
        reports the last batch's base offset + 1, :class:`BrokerLogEnds`)."""
        if not assigned:
            return {}
        tps = [TopicPartition(t, p) for t, p in assigned]
        ends_of = await BrokerLogEnds(self.bootstrap, 1 + max(p for _, p in assigned)).start()
        reader = log_end_reader(self.bootstrap)
        try:
            await reader.start()
            ends = await ends_of(assigned)
            starts = await log_starts(reader, tps)
        finally:
            await reader.stop()
            await ends_of.stop()
        return {
            (tp.topic, tp.partition): ends[(tp.topic, tp.partition)]
            for tp in tps
            if ends[(tp.topic, tp.partition)] > starts[tp]
        }

    def watch(self, app: Any) -> None:
        """Follow a Faust app's assignments (its ``on_partitions_assigned`` signal)."""

        @app.on_partitions_assigned.connect  # type: ignore[untyped-decorator]
        async def assigned(sender: Any, /, *args: Any, signal: Any, **_: Any) -> None:
            self.on_assigned((tp.topic, tp.partition) for tp in args[0])


def probe_app(
    liveness: Checks, readiness: Checks, *, metrics: CollectorRegistry | None = None
) -> Starlette:
    """``/healthz`` and ``/readyz``: 200 when every check says "ok", else 503 with the checks;
    and ``/metrics`` of ``metrics``, so a pod has one port for its kubelet and its scraper."""

    def route(path: str, checks: Checks) -> Route:
        async def answer(request: Request) -> JSONResponse:
            try:
                async with asyncio.timeout(CHECK_TIMEOUT_S):
                    results = await checks()
            except TimeoutError:
                results = {"probe": f"no answer within {CHECK_TIMEOUT_S} s"}
            except Exception as error:  # a probe must answer, whatever the check raised
                log.warning("probe %s failed", path, exc_info=True)
                results = {"probe": str(error) or type(error).__name__}
            ok = all(status == "ok" for status in results.values())
            status = "ok" if ok else "not_ok"
            return JSONResponse({"status": status, "checks": results}, 200 if ok else 503)

        return Route(path, answer, methods=["GET"])

    routes: list[BaseRoute] = [route("/healthz", liveness), route("/readyz", readiness)]
    if metrics is not None:
        routes.append(Mount("/metrics", app=make_asgi_app(metrics)))
    return Starlette(routes=routes)


@dataclass
class ProbeServer:
    """The probes served by uvicorn on the running loop, beside the processors."""

    app: Starlette
    host: str
    port: int
    bound_port: int | None = None
    _server: uvicorn.Server | None = field(default=None, init=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False)

    async def start(self) -> ProbeServer:
        server = self._server = EmbeddedServer.serving(self.app, host=self.host, port=self.port)
        self._task = asyncio.create_task(server.serve())
        for _ in range(200):
            if server.started:
                break
            if self._task.done():
                self._task.result()
                raise RuntimeError(f"the probes did not start on port {self.port}")
            await asyncio.sleep(0.05)
        else:
            raise RuntimeError(f"the probes did not start on port {self.port} within 10 s")
        self.bound_port = int(server.servers[0].sockets[0].getsockname()[1])
        log.info("probes on http://%s:%d (/healthz, /readyz)", self.host, self.bound_port)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, 10)
