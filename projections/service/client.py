"""The Python client of the query service, sync and async, with typed results.

``retrieve(..., after=positions)`` reads your writes: it takes the positions publishing
returned (``streams.eventlog.publisher.Position`` or dicts of topic, partition and offset), and
raises :class:`WaitTimeoutError` when the service answers that they were not applied in time,
:class:`NotInLogError` when it answers that the log does not hold them.

:func:`format_for_prompt` (also ``client.format_for_prompt``) renders what a retrieval returned
as the memory block of an LLM prompt.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from projections.history import AgentHistory
from projections.learned.reads import Facts, PlanLookup, Procedures, ToolChoice
from projections.memory import StoredMemory
from projections.retrieval.as_of import RECALL_TIMEOUT_S
from projections.retrieval.models import (
    MissingPosition,
    NotInLog,
    PendingPosition,
    RecordPosition,
    RetrievalRequest,
    RetrievalResponse,
    WaitTimedOut,
)
from projections.surprise import AgentSurprise
from schemas.envelope import AGENT_ID_RULE, AgentId
from schemas.errors import BackendUnavailableError, EngramError

__all__ = [
    "PROMPT_HEADER",
    "AsyncEngramClient",
    "EngramClient",
    "InvalidServiceURLError",
    "NotInLogError",
    "QueryError",
    "ServiceTimeoutError",
    "ServiceUnreachableError",
    "UnreadableAnswerError",
    "WaitTimeoutError",
    "format_for_prompt",
]


class QueryError(EngramError, RuntimeError):
    """The query service refused or failed a request; ``status`` and the server's message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class WaitTimeoutError(QueryError):
    """The memory stores had not applied the positions of ``after`` in time (HTTP 504).

    ``pending`` names each position still missing and how far each store had got.
    """

    def __init__(self, status: int, message: str, timed_out: WaitTimedOut) -> None:
        super().__init__(status, message)
        self.pending: tuple[PendingPosition, ...] = timed_out.pending
        self.waited_ms = timed_out.waited_ms


class NotInLogError(QueryError):
    """Positions of ``after`` the log does not hold (HTTP 409): past the end of their
    partition, or on a partition that does not exist; no wait would see them applied.

    ``missing`` names each, with where its partition ends.
    """

    def __init__(self, status: int, message: str, not_in_log: NotInLog) -> None:
        super().__init__(status, message)
        self.missing: tuple[MissingPosition, ...] = not_in_log.missing


class ServiceUnreachableError(BackendUnavailableError):
    """The query service could not be reached: refused, reset, a name that does not resolve,
    a URL of a protocol httpx does not speak. httpx's own exception is the ``__cause__``; a
    caller that retries later catches this one name, whichever way the connection failed."""

    def __init__(self, message: str, *, url: str, reason: str) -> None:
        super().__init__(message)
        self.url = url
        self.reason = reason
        """What failed, in httpx's words."""


class ServiceTimeoutError(ServiceUnreachableError, TimeoutError):
    """The query service did not answer within the client's timeout (``timeout``, plus the
    server's own wait for a request that may wait)."""


class UnreadableAnswerError(EngramError, ValueError):
    """What answered is not Engram's query service, or not one of this version: a 2xx whose
    body is not the answer the route gives (another server on that port, a proxy's page), or
    redirects in a loop."""


class InvalidServiceURLError(EngramError, ValueError):
    """The query service's URL is not http:// or https://: no retry reaches it (``notaurl``,
    ``ftp://...``)."""


T = TypeVar("T", bound=BaseModel)


@contextmanager
def _reaching(base_url: httpx.URL) -> Iterator[None]:
    """httpx's failures to get an answer, as Engram's errors naming the service's URL: a caller
    catches :class:`~schemas.errors.EngramError` and never meets httpx's names."""
    url = str(base_url).rstrip("/")
    try:
        yield
    except httpx.TimeoutException as exc:
        reason = str(exc) or type(exc).__name__
        message = f"the query service at {url} did not answer in time ({reason})"
        raise ServiceTimeoutError(message, url=url, reason=reason) from exc
    except httpx.UnsupportedProtocol as exc:
        # A TransportError to httpx, which a retry would meet again: not an outage.
        message = f"the query service URL {url!r} is not http:// or https:// ({exc})"
        raise InvalidServiceURLError(message) from None
    except httpx.TransportError as exc:
        reason = str(exc) or type(exc).__name__
        message = f"cannot reach the query service at {url}: {reason}"
        raise ServiceUnreachableError(message, url=url, reason=reason) from exc
    except httpx.HTTPError as exc:
        message = f"the query service at {url} answered unreadably: {exc}"
        raise UnreadableAnswerError(message) from exc


def _answer(response: httpx.Response, model: type[T]) -> T:
    """The route's answer as ``model``, after its refusals (:func:`_raise_for`)."""
    _raise_for(response)
    try:
        return model.model_validate_json(response.content)
    except ValidationError as exc:
        preview = response.text[:80].replace("\n", " ")
        raise UnreadableAnswerError(
            f"{response.url} answered {response.status_code} with something other than "
            f"Engram's {model.__name__} ({exc.error_count()} problems; it begins {preview!r}): "
            "is the URL that of Engram's query service?"
        ) from exc


class HasPosition(Protocol):
    """What ``streams.eventlog.publisher.Position`` offers (not imported:
    projections stand alone)."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...


PositionLike = HasPosition | Mapping[str, Any]

WAIT_MARGIN_S = 5.0
"""Added to the HTTP timeout of a request that may wait, so the server's 504 arrives first."""


def _raise_for(response: httpx.Response) -> None:
    if response.is_success:
        return
    try:
        body: Any = response.json()
        detail: Any = body.get("detail", response.text)
    except (ValueError, AttributeError):
        body, detail = None, response.text
    if response.status_code == 504 and body is not None:
        try:
            timed_out = WaitTimedOut.model_validate(body)
        except ValidationError:
            pass  # a proxy's 504, not the service's: the plain error below says so
        else:
            raise WaitTimeoutError(response.status_code, timed_out.detail, timed_out)
    if response.status_code == 409 and body is not None:
        try:
            not_in_log = NotInLog.model_validate(body)
        except ValidationError:
            pass
        else:
            raise NotInLogError(response.status_code, not_in_log.detail, not_in_log)
    raise QueryError(response.status_code, _detail_text(detail))


def _detail_text(detail: Any) -> str:
    """The service's 422 lists its errors, each ``msg`` naming the field: joined, they read as
    one sentence, where the list's repr read as Python."""
    if isinstance(detail, list) and detail and all(isinstance(e, dict) for e in detail):
        return "; ".join(str(e.get("msg", e)) for e in detail)
    return str(detail)


def _position(position: PositionLike) -> RecordPosition:
    if isinstance(position, Mapping):
        return RecordPosition.model_validate(position)
    return RecordPosition(
        topic=position.topic, partition=position.partition, offset=position.offset
    )


def _request(
    request: RetrievalRequest | None,
    after: Iterable[PositionLike] | None,
    params: dict[str, Any],
) -> RetrievalRequest:
    if request is not None and params:
        raise TypeError(
            f"give a RetrievalRequest or its fields as keywords, not both (got {sorted(params)})"
        )
    req = request or RetrievalRequest(**params)
    if after is not None:
        positions = (*req.after, *(_position(p) for p in after))
        req = RetrievalRequest.model_validate({**req.model_dump(), "after": positions})
    return req


def _body(request: RetrievalRequest) -> dict[str, Any]:
    return request.model_dump(mode="json", exclude_none=True)


def _timeout(http: httpx.Client | httpx.AsyncClient, request: RetrievalRequest) -> httpx.Timeout:
    """The client's timeout, with room for the server's wait when the request may wait (for
    ``after``, or for a recall ``as_of`` a point of the log)."""
    configured = http.timeout
    if request.as_of is not None:
        extra = RECALL_TIMEOUT_S + WAIT_MARGIN_S
    elif request.after:
        extra = request.wait_timeout_ms / 1000 + WAIT_MARGIN_S
    else:
        return configured
    read = None if configured.read is None else configured.read + extra
    return httpx.Timeout(
        connect=configured.connect, read=read, write=configured.write, pool=configured.pool
    )


_AGENT_ID: TypeAdapter[str] = TypeAdapter(AgentId)


def _agent_path(agent_id: str, rest: str) -> str:
    """The path of ``rest`` for one agent. An id the events refuse is refused here, before any
    request: put in a path as it was, ``x/../H1`` read the memories of H1 (httpx resolves the
    dot segments) and ``a?b`` asked for another path. Percent-encoded, so an id made of dots
    (``.``, ``..``, which the events accept) names that agent, not a directory."""
    try:
        _AGENT_ID.validate_python(agent_id)
    except ValidationError:
        # What the service answers for such an id, without asking it.
        raise QueryError(
            422, f"{agent_id!r} is not an agent id: it must be {AGENT_ID_RULE}"
        ) from None
    segment = quote(agent_id, safe="")
    if set(agent_id) == {"."}:
        segment = segment.replace(".", "%2E")
    return f"/v1/agents/{segment}/{rest}"


def _auth(api_key: str | None) -> dict[bytes, bytes]:
    """As UTF-8 bytes: httpx encodes a text header as ASCII, and a key with characters past it
    failed with a UnicodeEncodeError before any request."""
    return {} if api_key is None else {b"Authorization": f"Bearer {api_key}".encode()}


def _history_params(limit: int | None) -> dict[str, int]:
    return {} if limit is None else {"limit": limit}


PROMPT_HEADER = "=== YOUR MEMORY ==="
"""The heading ``build_household_prompt`` gives memories (seed 004, section 6.1)."""

NOTHING_REMEMBERED = "(nothing remembered yet)"


def _learned_params(**params: Any) -> dict[str, Any]:
    """Query parameters without the unset ones; booleans as the service reads them."""
    return {
        k: (str(v).lower() if isinstance(v, bool) else v)
        for k, v in params.items()
        if v is not None
    }


def _tool_select_body(
    prompt: str, exclude: Iterable[str], min_similarity: float | None
) -> dict[str, Any]:
    """Without ``min_similarity`` when unset, so the service's default applies. ``exclude`` as a
    list: a lone string would be sent as its letters otherwise, and be refused by no one."""
    if isinstance(exclude, str):
        raise TypeError(f"exclude takes names, not one string: exclude=[{exclude!r}]")
    body: dict[str, Any] = {"prompt": prompt, "exclude": list(exclude)}
    if min_similarity is not None:
        body["min_similarity"] = min_similarity
    return body


def format_for_prompt(
    memories: RetrievalResponse | Iterable[StoredMemory | str],
    *,
    header: str | None = PROMPT_HEADER,
    with_time: bool = False,
    with_store: bool = False,
    empty: str = NOTHING_REMEMBERED,
) -> str:
    """The memory block of an LLM prompt: ``header``, then ``- {content}`` per memory in the
    order given (rank order for a response), as ``build_household_prompt`` of seed 004 (section
    6.1) writes it; plain strings are taken as contents.

    ``with_time`` opens a line with the memory's time, ``Year 2: ...`` (or ``Step 14: ...``) as
    the tool results of section 8.3 read, unless the content already opens with it (the seed's
    contents do); ``with_store`` closes it with where the memory was kept, ``(episodic)`` or
    ``(episodic, L1 summary)``, for a prompt that tells the model what each store means.
    A content of several lines stays under its one bullet, indented, so the model reads one
    memory as one item. Without memories the block says so (``empty``): a header followed by
    nothing reads as a prompt cut short.
    """
    items = memories.results if isinstance(memories, RetrievalResponse) else memories
    lines = [] if header is None else [header]
    for item in items:
        text = item if isinstance(item, str) else _memory_line(item, with_time, with_store)
        lines.append("- " + "\n  ".join(text.splitlines() or [""]))
    if len(lines) == (0 if header is None else 1):
        lines.append(empty)
    return "\n".join(lines)


def _memory_line(memory: StoredMemory, with_time: bool, with_store: bool) -> str:
    text = memory.content
    if with_time:
        when = (
            f"Year {memory.year}"
            if memory.year is not None
            else None
            if memory.step is None
            else f"Step {memory.step}"
        )
        if when is not None and not text.startswith(f"{when}:"):
            text = f"{when}: {text}"
    if with_store:
        store: str = getattr(memory, "store", memory.destination)
        if memory.level:
            store = f"{store}, L{memory.level} summary"
        text = f"{text} ({store})"
    return text


class EngramClient:
    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
        api_key: str | None = None,
    ) -> None:
        """``api_key``: presented as ``Authorization: Bearer`` on every request (a service
        with ``ENGRAM_API_KEYS_FILE`` answers 401 without it).

        Every call raises :class:`~schemas.errors.EngramError`s only: :class:`QueryError` for
        a refusal (with :class:`WaitTimeoutError` and :class:`NotInLogError`),
        :class:`ServiceUnreachableError` (:class:`ServiceTimeoutError`) when no answer came,
        :class:`UnreadableAnswerError` when what answered is not the service."""
        self._http = httpx.Client(
            base_url=base_url, timeout=timeout, transport=transport, headers=_auth(api_key)
        )

    format_for_prompt = staticmethod(format_for_prompt)

    def _call(self, model: type[T], method: str, path: str, **kwargs: Any) -> T:
        with _reaching(self._http.base_url):
            response = self._http.request(method, path, **kwargs)
        return _answer(response, model)

    def retrieve(
        self,
        agent_id: str,
        request: RetrievalRequest | None = None,
        *,
        after: Iterable[PositionLike] | None = None,
        **params: Any,
    ) -> RetrievalResponse:
        """Rank the agent's memories; ``params`` are the fields of :class:`RetrievalRequest`.

        ``after``: positions to read (added to the request's own); raises
        :class:`WaitTimeoutError` if they are not applied within ``wait_timeout_ms``, and
        :class:`NotInLogError` if the log does not hold them.
        """
        req = _request(request, after, params)
        return self._call(
            RetrievalResponse,
            "POST",
            _agent_path(agent_id, "retrieve"),
            json=_body(req),
            timeout=_timeout(self._http, req),
        )

    @property
    def base_url(self) -> str:
        """The query service this client calls."""
        return str(self._http.base_url)

    def history(self, agent_id: str, *, limit: int | None = None) -> AgentHistory:
        """The agent's latest ``limit`` history entries (the service's default if None)."""
        path = _agent_path(agent_id, "history")
        return self._call(AgentHistory, "GET", path, params=_history_params(limit))

    def surprise(self, agent_id: str) -> AgentSurprise:
        """The agent's cognitive system, arousal and surprise trace (seed 003)."""
        return self._call(AgentSurprise, "GET", _agent_path(agent_id, "surprise"))

    def procedures(self, agent_id: str, context: str | None = None, **params: Any) -> Procedures:
        """The agent's procedures for ``context``; ``params``: ``min_success_rate``,
        ``min_similarity``, ``top_k`` (the route's query parameters)."""
        path = _agent_path(agent_id, "procedures")
        return self._call(
            Procedures, "GET", path, params=_learned_params(context=context, **params)
        )

    def facts(self, agent_id: str, query: str | None = None, **params: Any) -> Facts:
        """The agent's facts for ``query``; ``params``: ``top_k``, ``history``,
        ``min_confidence``."""
        path = _agent_path(agent_id, "facts")
        return self._call(Facts, "GET", path, params=_learned_params(query=query, **params))

    def lookup_plan(self, agent_id: str, prompt: str) -> PlanLookup:
        """A cached plan for ``prompt`` (a hit), or a miss."""
        path = _agent_path(agent_id, "plans/lookup")
        return self._call(PlanLookup, "POST", path, json={"prompt": prompt})

    def select_tool(
        self,
        agent_id: str,
        prompt: str,
        *,
        exclude: Iterable[str] = (),
        min_similarity: float | None = None,
    ) -> ToolChoice:
        """The procedure to use as the tool for ``prompt`` (seed 002), or a miss; ``exclude``:
        procedures downvoted for it; ``min_similarity``: the service's default (0.4) if None."""
        path = _agent_path(agent_id, "tools/select")
        body = _tool_select_body(prompt, exclude, min_similarity)
        return self._call(ToolChoice, "POST", path, json=body)

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
    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        api_key: str | None = None,
    ) -> None:
        """``transport``: another way to reach the service (an in-process ASGI app, say);
        ``api_key`` and the errors raised as for :class:`EngramClient`."""
        self._http = httpx.AsyncClient(
            base_url=base_url, timeout=timeout, transport=transport, headers=_auth(api_key)
        )

    format_for_prompt = staticmethod(format_for_prompt)

    @property
    def base_url(self) -> str:
        """The query service this client calls."""
        return str(self._http.base_url)

    async def _call(self, model: type[T], method: str, path: str, **kwargs: Any) -> T:
        with _reaching(self._http.base_url):
            response = await self._http.request(method, path, **kwargs)
        return _answer(response, model)

    async def retrieve(
        self,
        agent_id: str,
        request: RetrievalRequest | None = None,
        *,
        after: Iterable[PositionLike] | None = None,
        **params: Any,
    ) -> RetrievalResponse:
        """As :meth:`EngramClient.retrieve`."""
        req = _request(request, after, params)
        return await self._call(
            RetrievalResponse,
            "POST",
            _agent_path(agent_id, "retrieve"),
            json=_body(req),
            timeout=_timeout(self._http, req),
        )

    async def history(self, agent_id: str, *, limit: int | None = None) -> AgentHistory:
        """The agent's latest ``limit`` history entries (the service's default if None)."""
        path = _agent_path(agent_id, "history")
        return await self._call(AgentHistory, "GET", path, params=_history_params(limit))

    async def surprise(self, agent_id: str) -> AgentSurprise:
        """As :meth:`EngramClient.surprise`."""
        return await self._call(AgentSurprise, "GET", _agent_path(agent_id, "surprise"))

    async def procedures(
        self, agent_id: str, context: str | None = None, **params: Any
    ) -> Procedures:
        """As :meth:`EngramClient.procedures`."""
        path = _agent_path(agent_id, "procedures")
        return await self._call(
            Procedures, "GET", path, params=_learned_params(context=context, **params)
        )

    async def facts(self, agent_id: str, query: str | None = None, **params: Any) -> Facts:
        """As :meth:`EngramClient.facts`."""
        path = _agent_path(agent_id, "facts")
        return await self._call(Facts, "GET", path, params=_learned_params(query=query, **params))

    async def lookup_plan(self, agent_id: str, prompt: str) -> PlanLookup:
        """As :meth:`EngramClient.lookup_plan`."""
        path = _agent_path(agent_id, "plans/lookup")
        return await self._call(PlanLookup, "POST", path, json={"prompt": prompt})

    async def select_tool(
        self,
        agent_id: str,
        prompt: str,
        *,
        exclude: Iterable[str] = (),
        min_similarity: float | None = None,
    ) -> ToolChoice:
        """As :meth:`EngramClient.select_tool`."""
        path = _agent_path(agent_id, "tools/select")
        body = _tool_select_body(prompt, exclude, min_similarity)
        return await self._call(ToolChoice, "POST", path, json=body)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncEngramClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
