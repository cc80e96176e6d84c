"""API keys (:mod:`projections.service.auth`) on HTTP: a FastAPI dependency for the query
service's routes, and an ASGI wrapper for the MCP server's streamable HTTP endpoint.

A refusal is 401 (no key, or one the deployment does not know) with ``WWW-Authenticate:
Bearer``, or 403 (a known key without the scope, or not for the agent the path names) with
the RFC 6750 ``insufficient_scope`` error. The answer names the key (by its name), never the
token, and a refusal is logged the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Depends, HTTPException, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from projections.service.auth import ApiKey, ApiKeys, Decision, Scope, load_api_keys

__all__ = [
    "API_KEY_SCOPE",
    "BEARER_CHALLENGE",
    "LOOPBACK_HOSTS",
    "McpBearerAuth",
    "api_keys_for",
    "challenge",
    "route_guard",
]

log = logging.getLogger("engram.auth")

BEARER_CHALLENGE = 'Bearer realm="engram"'

API_KEY_SCOPE = "engram.api_key"
"""The ASGI scope entry where the MCP wrapper leaves the request's :class:`ApiKey`."""

_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="An Engram API key: `Authorization: Bearer <key>`. The deployment's keys "
    "file lists its SHA-256, the agents it may act for and its scopes.",
)


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def api_keys_for(keys_file: Path | None, server: str, host: str) -> ApiKeys | None:
    """The keys ``server`` accepts (``ENGRAM_API_KEYS_FILE``), or None after saying that it
    is unauthenticated: a warning, and a louder one on an address other machines reach.
    Raises :class:`~projections.service.auth.ApiKeysFileError` for a bad file."""
    if keys_file is not None:
        keys = load_api_keys(keys_file)
        log.info("%s: %d API key(s) from %s", server, len(keys.keys), keys_file)
        return keys
    if host in LOOPBACK_HOSTS:
        log.warning(
            "%s is unauthenticated (no ENGRAM_API_KEYS_FILE): it listens on %s only", server, host
        )
    else:
        log.warning(
            "%s is UNAUTHENTICATED and listens on %s: anyone who reaches it reads every "
            "agent's memories. Set ENGRAM_API_KEYS_FILE, or listen on 127.0.0.1",
            server,
            host,
        )
    return None


def challenge(decision: Decision) -> dict[str, str]:
    """The ``WWW-Authenticate`` header of a refusal."""
    if decision.status == 403:
        return {"WWW-Authenticate": f'{BEARER_CHALLENGE}, error="insufficient_scope"'}
    return {"WWW-Authenticate": BEARER_CHALLENGE}


def route_guard(keys: ApiKeys, scope: Scope) -> Any:
    """A route dependency: the request's key must have ``scope`` and, when the path names an
    agent, be for that agent. Declared through ``HTTPBearer`` so the OpenAPI document carries
    the bearer scheme and each guarded operation's requirement."""

    async def guard(
        request: Request,
        _: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    ) -> ApiKey:
        agent_id = request.path_params.get("agent_id")
        decision = keys.decide(request.headers.get("authorization"), scope, agent_id)
        if not decision.allowed:
            log.info("refused %s %s: %s", request.method, request.url.path, decision.reason)
            raise HTTPException(decision.status, decision.reason, headers=challenge(decision))
        assert decision.key is not None
        return decision.key

    return Depends(guard)


AsgiApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]


class McpBearerAuth:
    """Lets an HTTP request through to the MCP endpoint only with a known key, and leaves the
    key in the request's scope (:data:`API_KEY_SCOPE`), where each tool call finds it and checks
    its scope and agent (:func:`projections.service.mcp_server.create_mcp_server`). Paths
    other than ``path`` pass untouched."""

    def __init__(self, app: AsgiApp, keys: ApiKeys, *, path: str) -> None:
        self._app = app
        self._keys = keys
        self._path = path

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self._path):
            await self._app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v for k, v in scope.get("headers", ())}
        raw = headers.get("authorization")
        authorization = None if raw is None else raw.decode("latin-1")
        key = self._keys.authenticate(authorization)
        if key is None:
            reason = "missing bearer token" if authorization is None else "unknown API key"
            log.info("refused an MCP request: %s", reason)
            await _refuse(send, reason)
            return
        scope[API_KEY_SCOPE] = key
        await self._app(scope, receive, send)


async def _refuse(send: Callable[[Any], Awaitable[None]], reason: str) -> None:
    body = ('{"detail": "' + reason + '"}').encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", BEARER_CHALLENGE.encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class ServiceError(BaseModel):
    detail: str


@dataclass(frozen=True)
class Guarded:
    """What a route adds for authentication: its dependency and its documented refusals
    (nothing at all without keys)."""

    keys: ApiKeys | None

    def dependencies(self, scope: Literal["read", "publish", "admin"]) -> list[Any]:
        return [] if self.keys is None else [route_guard(self.keys, scope)]

    def responses(self) -> dict[int | str, dict[str, Any]]:
        if self.keys is None:
            return {}
        return {
            401: {"model": ServiceError, "description": "No API key, or an unknown one."},
            403: {
                "model": ServiceError,
                "description": "The API key lacks the scope, or is not for this agent.",
            },
        }
