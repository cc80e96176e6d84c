"""The root of Engram's exceptions, and the one category that catching needs.

Every exception Engram defines derives from :class:`EngramError`, so the CLI, the HTTP service
and a program that embeds Engram can tell Engram's own failures from bugs with one ``except``.
An adapter maps a client library's exception (redis, aiokafka, qdrant-client, Qdrant Edge) at
the boundary: it raises an Engram error ``from`` it, so the library's exception stays readable
as ``__cause__`` while callers depend on Engram's names only, whichever backend is configured.

Where an error is also of a builtin kind (a bad value, a timeout, a runtime failure), it derives
from that builtin too (``class DecodeError(EngramError, ValueError)``), so an ``except
ValueError`` around the call catches it as well.
"""

from __future__ import annotations

__all__ = ["BackendUnavailableError", "EngramError"]


class EngramError(Exception):
    """A failure Engram knows how to describe; the message says what went wrong and, where it
    can, what to do. One root so callers catch Engram's failures in one place."""


class BackendUnavailableError(EngramError, RuntimeError):
    """A backend Engram depends on (the broker, Redis, Qdrant, the keyring) failed or could
    not be reached.

    The subclass says which part of Engram was using it (a projection store, the event log, the
    keyring, a publisher) and the message says where; the client library's exception is the
    ``__cause__``. A ``RuntimeError`` as well, so ``except RuntimeError`` keeps catching it.
    """
