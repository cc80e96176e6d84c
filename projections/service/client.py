"""The Python client of the query service, sync and async, with typed results."""

from __future__ import annotations

from types import TracebackType
from typing import Any

import httpx

from projections.history import AgentHistory
from projections.retrieval.models import RetrievalRequest, RetrievalResponse


class QueryError(RuntimeError):
    """The query service refused or failed a request; ``status`` and the server's message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


def _raise_for(response: httpx.Response) -> None:
    if response.is_success:
        return
    try:
        detail: Any = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    raise QueryError(response.status_code, str(detail))


def _body(request: RetrievalRequest | None, params: dict[str, Any]) -> dict[str, Any]:
    req = request or RetrievalRequest(**params)
    return req.model_dump(mode="json", exclude_none=True)


def _history_params(limit: int | None) -> dict[str, int]:
    return {} if limit is None else {"limit": limit}


class EngramClient:
    def __init__(self, base_url: str, *, timeout: float = 10.0) -> None:
        self._http = httpx.Client(base_url=base_url, timeout=timeout)

    def retrieve(
        self, agent_id: str, request: RetrievalRequest | None = None, **params: Any
    ) -> RetrievalResponse:
        response = self._http.post(f"/v1/agents/{agent_id}/retrieve", json=_body(request, params))
        _raise_for(response)
        return RetrievalResponse.model_validate_json(response.content)

    def history(self, agent_id: str, *, limit: int | None = None) -> AgentHistory:
        """The agent's latest ``limit`` history entries (the service's default if None)."""
        response = self._http.get(f"/v1/agents/{agent_id}/history", params=_history_params(limit))
        _raise_for(response)
        return AgentHistory.model_validate_json(response.content)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> EngramClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncEngramClient:
    def __init__(self, base_url: str, *, timeout: float = 10.0) -> None:
        self._http = httpx.AsyncClient(base_url=base_url, timeout=timeout)

    async def retrieve(
        self, agent_id: str, request: RetrievalRequest | None = None, **params: Any
    ) -> RetrievalResponse:
        response = await self._http.post(
            f"/v1/agents/{agent_id}/retrieve", json=_body(request, params)
        )
        _raise_for(response)
        return RetrievalResponse.model_validate_json(response.content)

    async def history(self, agent_id: str, *, limit: int | None = None) -> AgentHistory:
        """The agent's latest ``limit`` history entries (the service's default if None)."""
        response = await self._http.get(
            f"/v1/agents/{agent_id}/history", params=_history_params(limit)
        )
        _raise_for(response)
        return AgentHistory.model_validate_json(response.content)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncEngramClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
