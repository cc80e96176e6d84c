"""The OpenAPI document one deployment serves: the generated one, with the topics positions of
``after`` may name.

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


def document_with_topics(
    app: FastAPI, topics: Collection[str] | None
) -> Callable[[], dict[str, Any]]:
    """A replacement for ``app.openapi``: the generated document (built once, as FastAPI
    does), its positions restricted to ``topics``, or to names ending with one of
    :data:`~projections.retrieval.engine.SOURCE_TOPICS` when ``topics`` is None."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            restrict_topics(generate(), topics)
        return generate()

    return openapi


def restrict_topics(document: dict[str, Any], topics: Collection[str] | None) -> None:
    """Restricts the topic of a position, in place."""
    topic: dict[str, Any] = document["components"]["schemas"][POSITION_SCHEMA]["properties"][
        "topic"
    ]
    if topics is None:
        endings = "|".join(re.escape(name) for name in SOURCE_TOPICS)
        topic["pattern"] = f"^[A-Za-z0-9._-]*(?:{endings})$"
        topic["description"] = "A topic the processors consume: " + ", ".join(SOURCE_TOPICS)
        topic["description"] += ", with the deployment's prefix."
        return
    names = sorted(topics)
    for constraint in ("pattern", "minLength", "maxLength"):
        topic.pop(constraint, None)
    topic["enum"] = names
    observations = [name for name in names if name.endswith(SOURCE_TOPICS[0])]
    topic["examples"] = observations[:1] or names[:1]
    topic["description"] = "A topic the processors of this deployment consume."
