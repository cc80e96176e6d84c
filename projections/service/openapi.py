"""The OpenAPI document one deployment serves: the generated one, with the topics positions of
``after`` (and of ``as_of``) may name.

Which topics those are depends on the deployment (its topic prefix), so the request models
cannot say it; left unsaid, a position on any other topic would be valid by the document and
refused by the service. The document names them exactly when the engine knows them, and by
their endings otherwise (the engine's rule then).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import Any

from fastapi import FastAPI

from projections.retrieval.engine import SOURCE_TOPICS

POSITION_SCHEMA = "RecordPosition"
"""The component of a position of ``after`` in the generated document."""

AS_OF_POSITION_SCHEMA = "AsOfPosition"
"""The component of a position of ``as_of``: a source topic, or the derived log."""

DERIVED_TOPICS = ("memory.items", "memory.lifecycle")
"""The derived log's topics, unprefixed: an ``as_of`` position may name them too."""


def document_with_topics(
    app: FastAPI,
    topics: Collection[str] | None,
    point_topics: Collection[str] | None = None,
) -> Callable[[], dict[str, Any]]:
    """A replacement for ``app.openapi``: the generated document (built once, as FastAPI
    does), its positions of ``after`` restricted to ``topics``, or to names ending with one of
    :data:`~projections.retrieval.engine.SOURCE_TOPICS` when ``topics`` is None; those of
    ``as_of`` to ``point_topics``, or to names ending with one of those or of
    :data:`DERIVED_TOPICS`."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = generate()
            restrict_topics(document, topics)
            restrict_topics(
                document,
                point_topics,
                component=AS_OF_POSITION_SCHEMA,
                endings=(*SOURCE_TOPICS, *DERIVED_TOPICS),
                role="consume or write",
            )
        return generate()

    return openapi


def restrict_topics(
    document: dict[str, Any],
    topics: Collection[str] | None,
    *,
    component: str = POSITION_SCHEMA,
    endings: tuple[str, ...] = SOURCE_TOPICS,
    role: str = "consume",
) -> None:
    """Restricts the topic of a position (of ``component``) to topics the processors
    ``role``, in place."""
    topic: dict[str, Any] = document["components"]["schemas"][component]["properties"]["topic"]
    if topics is None:
        alternatives = "|".join(re.escape(name) for name in endings)
        topic["pattern"] = f"^[A-Za-z0-9._-]*(?:{alternatives})$"
        topic["description"] = f"A topic the processors {role}: " + ", ".join(endings)
        topic["description"] += ", with the deployment's prefix."
        return
    names = sorted(topics)
    for constraint in ("pattern", "minLength", "maxLength"):
        topic.pop(constraint, None)
    topic["enum"] = names
    observations = [name for name in names if name.endswith(SOURCE_TOPICS[0])]
    topic["examples"] = observations[:1] or names[:1]
    topic["description"] = f"A topic the processors of this deployment {role}."
