"""The modules a command loads only when it runs, so that ``engram --help`` stays fast.

``engram --help`` needs typer, rich and the settings (about 0.3 s). Engram's own modules bring
numpy and the event models (importing :mod:`schemas` alone adds about 0.12 s), and the client
libraries behind them (Faust, the MCP SDK, the Qdrant client, FastAPI, aiokafka, redis, httpx,
cryptography) add about 1.3 s more. So the command modules import those here and nowhere else,
and reach them as attributes, ``deferred.replay.Replay``: the first use imports the module
(PEP 562), and mypy sees the real module through the ``TYPE_CHECKING`` imports.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

    from processors import config as processing_config
    from processors import embedding
    from projections import history as agent_history
    from projections import interfaces as store_interfaces
    from projections import versions as projection_versions
    from projections.episodic import edge_location
    from projections.episodic import factory as episodic_factory
    from projections.retrieval import models as retrieval_models
    from projections.service import auth as service_auth
    from projections.service import client as query_client
    from projections.working import agent_index, redis_store
    from schemas import agent_events, envelope, errors, json_schema, topics
    from streams import demo
    from streams.eventlog import archive, dead_letters, kafka_clients, publisher, topic_admin
    from streams.eventlog import history as history_reader
    from streams.integrations import chat_summariser, tool_server
    from streams.privacy import forgetting, keyring, sealing
    from streams.rebuild import as_of, log_cut, projection_switch, replay, reprocess
    from streams.runtime import metrics_server, node, tracing
    from streams.runtime.devstack import broker, redis_server
    from streams.runtime.devstack import stack as devstack
    from streams.worker import app as worker_app

_MODULES = {
    "httpx": "httpx",
    "embedding": "processors.embedding",
    "processing_config": "processors.config",
    "agent_history": "projections.history",
    "store_interfaces": "projections.interfaces",
    "projection_versions": "projections.versions",
    "edge_location": "projections.episodic.edge_location",
    "episodic_factory": "projections.episodic.factory",
    "retrieval_models": "projections.retrieval.models",
    "query_client": "projections.service.client",
    "service_auth": "projections.service.auth",
    "redis_store": "projections.working.redis_store",
    "agent_index": "projections.working.agent_index",
    "agent_events": "schemas.agent_events",
    "envelope": "schemas.envelope",
    "errors": "schemas.errors",
    "json_schema": "schemas.json_schema",
    "topics": "schemas.topics",
    "demo": "streams.demo",
    "archive": "streams.eventlog.archive",
    "dead_letters": "streams.eventlog.dead_letters",
    "history_reader": "streams.eventlog.history",
    "kafka_clients": "streams.eventlog.kafka_clients",
    "publisher": "streams.eventlog.publisher",
    "topic_admin": "streams.eventlog.topic_admin",
    "chat_summariser": "streams.integrations.chat_summariser",
    "tool_server": "streams.integrations.tool_server",
    "forgetting": "streams.privacy.forgetting",
    "keyring": "streams.privacy.keyring",
    "sealing": "streams.privacy.sealing",
    "as_of": "streams.rebuild.as_of",
    "log_cut": "streams.rebuild.log_cut",
    "projection_switch": "streams.rebuild.projection_switch",
    "replay": "streams.rebuild.replay",
    "reprocess": "streams.rebuild.reprocess",
    "node": "streams.runtime.node",
    "metrics_server": "streams.runtime.metrics_server",
    "tracing": "streams.runtime.tracing",
    "broker": "streams.runtime.devstack.broker",
    "redis_server": "streams.runtime.devstack.redis_server",
    "devstack": "streams.runtime.devstack.stack",
    "worker_app": "streams.worker.app",
}

__all__ = [
    "agent_events",
    "agent_history",
    "agent_index",
    "archive",
    "as_of",
    "broker",
    "chat_summariser",
    "dead_letters",
    "demo",
    "devstack",
    "edge_location",
    "embedding",
    "envelope",
    "episodic_factory",
    "errors",
    "forgetting",
    "history_reader",
    "httpx",
    "json_schema",
    "kafka_clients",
    "keyring",
    "log_cut",
    "metrics_server",
    "node",
    "processing_config",
    "projection_switch",
    "projection_versions",
    "publisher",
    "query_client",
    "redis_server",
    "redis_store",
    "replay",
    "reprocess",
    "retrieval_models",
    "sealing",
    "service_auth",
    "store_interfaces",
    "tool_server",
    "topic_admin",
    "topics",
    "tracing",
    "worker_app",
]


def __getattr__(name: str) -> ModuleType:
    """Import the module called ``name`` on its first use, and keep it for the next."""
    try:
        path = _MODULES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    module = importlib.import_module(path)
    globals()[name] = module
    return module
