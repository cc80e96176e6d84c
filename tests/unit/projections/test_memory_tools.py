"""The memory tools and the prompt block, without servers: ``format_for_prompt`` on its own, and
the tools through the MCP SDK's own client connected in-process to the server, with the query
service answered by an in-test HTTP handler (what it answers is the service's contract:
:class:`RetrievalResponse`, and its 409/422/503/504 bodies). The tools over stdio and streamable
HTTP against the real service and broker are in
``tests/integration/projections/test_mcp_tools.py``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, get_args

import httpx
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent

from projections.memory import StoredMemory
from projections.retrieval.models import (
    Mode,
    RetrievalRequest,
    RetrievalResponse,
    RetrievedMemory,
)
from projections.service.client import (
    PROMPT_HEADER,
    AsyncEngramClient,
    EngramClient,
    format_for_prompt,
)
from projections.service.mcp_server import create_mcp_server
from projections.service.tools import (
    MAX_RETRIEVE,
    ToolContext,
    ToolError,
    ToolRegistry,
    memory_tools,
    recall_tool,
)
from schemas.agent_events import Observation
from schemas.envelope import TIME_BOUND
from streams.eventlog.publisher import Position

pytestmark = pytest.mark.timeout(60)

BASE = "http://engram.test"
AGENT = "H001"


def memory(
    rank: int,
    content: str,
    *,
    store: str = "episodic",
    year: int | None = None,
    step: int | None = None,
    level: int = 0,
) -> RetrievedMemory:
    return RetrievedMemory.model_validate(
        {
            "memory_id": f"m{rank}",
            "agent_id": AGENT,
            "content": content,
            "importance": 0.9,
            "destination": store,
            "seq": 10 - rank,
            "occurred_at": datetime(2024, 1, 1, tzinfo=UTC),
            "year": year,
            "step": step,
            "level": level,
            "source_event_id": f"e{rank}",
            "source_event_type": "observation",
            "rank": rank,
            "store": store,
            "score": 1.0 / rank,
            "breakdown": {
                "mode": "two_phase",
                "phase": 2,
                "time": year or 0,
                "time_imputed": year is None,
                "age": 1,
                "decay": 0.95,
                "importance": 0.9,
            },
        }
    )


def response(*results: RetrievedMemory) -> RetrievalResponse:
    return RetrievalResponse.model_validate(
        {
            "agent_id": AGENT,
            "mode": "two_phase",
            "clock": {"axis": "year", "now": 3},
            "working_count": 0,
            "episodic_count": len(results),
            "results": results,
            "took_ms": 0.4,
        }
    )


# Seed 004, section 8.3: the audit trail's result of retrieve_memory at year 3.
SEED_RESULTS = response(
    memory(1, "Year 2: A flood occurred causing $50,000 in damages", year=2),
    memory(2, "I decided to buy_insurance", store="working", year=2),
)


def test_strings_render_as_the_seed_prompt_block() -> None:
    """Seed 004, section 6.1: the header, then one ``- `` line per memory."""
    assert format_for_prompt(["A flood", "I bought insurance"]) == (
        "=== YOUR MEMORY ===\n- A flood\n- I bought insurance"
    )


def test_a_response_renders_in_rank_order_with_each_memorys_year_once() -> None:
    text = format_for_prompt(SEED_RESULTS, with_time=True)
    assert text.splitlines() == [
        PROMPT_HEADER,
        "- Year 2: A flood occurred causing $50,000 in damages",
        "- Year 2: I decided to buy_insurance",
    ]


def test_without_with_time_the_contents_are_left_as_they_are() -> None:
    assert format_for_prompt(SEED_RESULTS).splitlines()[1:] == [
        "- Year 2: A flood occurred causing $50,000 in damages",
        "- I decided to buy_insurance",
    ]


def test_the_time_is_the_step_without_a_year_and_nothing_without_either() -> None:
    memories: list[StoredMemory] = [memory(1, "stepped", step=14), memory(2, "timeless")]
    assert format_for_prompt(memories, header=None, with_time=True) == (
        "- Step 14: stepped\n- timeless"
    )


def test_the_store_closes_the_line_and_names_a_summarys_level() -> None:
    memories = [
        memory(1, "a chat", store="working"),
        memory(2, "the season in short", level=1),
    ]
    assert format_for_prompt(memories, header=None, with_store=True) == (
        "- a chat (working)\n- the season in short (episodic, L1 summary)"
    )


def test_a_content_of_several_lines_stays_under_its_one_bullet() -> None:
    text = format_for_prompt(["first line\nsecond line", "next memory"])
    assert text.splitlines()[1:] == ["- first line", "  second line", "- next memory"]


def test_no_memories_are_said_so_under_the_header() -> None:
    assert format_for_prompt(response()) == f"{PROMPT_HEADER}\n(nothing remembered yet)"
    assert format_for_prompt([], header=None, empty="none") == "none"


def test_the_clients_offer_it_where_the_responses_come_from() -> None:
    with EngramClient(BASE) as client:
        assert client.format_for_prompt(SEED_RESULTS) == format_for_prompt(SEED_RESULTS)
    assert AsyncEngramClient.format_for_prompt is format_for_prompt


Handler = Callable[[httpx.Request], httpx.Response]


class Service:
    """The query service as the tools see it: every request recorded, ``answer`` replying."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.answer: Handler = lambda _: httpx.Response(200, text=SEED_RESULTS.model_dump_json())

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((request.url.path, json.loads(request.content)))
        return self.answer(request)


class Sink:
    """The log as ``publish_observation`` sees it."""

    def __init__(self) -> None:
        self.published: list[Observation] = []
        self.failure: Exception | None = None

    async def __call__(self, observation: Observation, /) -> Position:
        if self.failure is not None:
            raise self.failure
        self.published.append(observation)
        return Position("agent.observations", 1, 41 + len(self.published))


@pytest.fixture
def service() -> Service:
    return Service()


@pytest.fixture
def sink() -> Sink:
    return Sink()


@pytest.fixture
def registry() -> ToolRegistry:
    return memory_tools()


@asynccontextmanager
async def connected(
    service: Service, sink: Sink | None = None, registry: ToolRegistry | None = None
) -> AsyncIterator[Client]:
    """The SDK's client on the server, in-process. Not a fixture: the client's task group must
    close in the task that opened it, and pytest-asyncio tears fixtures down in another."""
    transport = httpx.MockTransport(service)
    async with AsyncEngramClient(BASE, transport=transport) as memory_service:
        context = ToolContext(memory_service, sink)
        server = create_mcp_server(registry or memory_tools(), context)
        async with Client(server) as client:
            yield client


async def test_both_clients_send_the_request_and_answer_typed_results(service: Service) -> None:
    transport = httpx.MockTransport(service)
    with EngramClient(BASE, transport=transport) as client:
        answered = client.retrieve(AGENT, mode="weighted", tags=["flood"], current_year=3)
    async with AsyncEngramClient(BASE, transport=transport) as async_client:
        async_answered = await async_client.retrieve(
            AGENT, RetrievalRequest(mode="weighted", tags=("flood",), current_year=3)
        )

    assert answered == async_answered == SEED_RESULTS
    assert isinstance(answered.results[0], RetrievedMemory)
    [(path, body), (_, async_body)] = service.requests
    assert path == f"/v1/agents/{AGENT}/retrieve"
    assert body == async_body
    assert (body["mode"], body["tags"], body["current_year"]) == ("weighted", ["flood"], 3)


def test_a_request_and_keyword_fields_together_are_refused(service: Service) -> None:
    with (
        EngramClient(BASE, transport=httpx.MockTransport(service)) as client,
        pytest.raises(TypeError, match=r"not both \(got \['top_k'\]\)"),
    ):
        client.retrieve(AGENT, RetrievalRequest(mode="saliency"), top_k=3)
    assert service.requests == []


def text_of(result: CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def test_the_tools_are_listed_with_their_models_schemas(service: Service) -> None:
    async with connected(service) as mcp:
        tools = {tool.name: tool for tool in (await mcp.list_tools()).tools}
    assert list(tools) == [
        "retrieve_memory",
        "recall_similar_experience",
        "publish_observation",
        "recall_fact",
        "recall_procedure",
        "lookup_plan",
        "select_tool",
        "give_feedback",
    ]

    retrieve = tools["retrieve_memory"].input_schema
    assert retrieve["required"] == ["agent_id"]
    assert retrieve["properties"]["top_k"]["maximum"] == MAX_RETRIEVE == 5
    mode, unset = retrieve["properties"]["mode"]["anyOf"]
    assert (mode["enum"], unset) == (list(get_args(Mode)), {"type": "null"})
    scope = retrieve["properties"]["scope"]["anyOf"][0]
    assert scope["enum"] == ["active", "archive", "all"]
    recall = tools["recall_similar_experience"].input_schema
    assert recall["required"] == ["agent_id", "query"]
    min_importance = recall["properties"]["min_importance"]
    assert recall["properties"]["limit"]["default"] == 3
    assert (min_importance["default"], min_importance["maximum"]) == (0.3, 1.0)
    publish = tools["publish_observation"].input_schema
    assert publish["required"] == ["agent_id", "content"]
    # The bounds the event itself holds, told to the model rather than found out by a refusal.
    for schema, field in ((publish, "year"), (retrieve, "current_year")):
        year = schema["properties"][field]["anyOf"][0]
        assert (year["minimum"], year["maximum"]) == (-TIME_BOUND, TIME_BOUND)

    hints = {
        name: tool.annotations.read_only_hint for name, tool in tools.items() if tool.annotations
    }
    assert hints == {
        "retrieve_memory": True,
        "recall_similar_experience": True,
        "publish_observation": False,
        "recall_fact": True,
        "recall_procedure": True,
        "lookup_plan": True,
        "select_tool": True,
        "give_feedback": False,
    }
    assert all(tool.description and tool.output_schema for tool in tools.values())


async def test_retrieve_memory_answers_the_response_and_its_prompt_block(
    service: Service,
) -> None:
    async with connected(service) as mcp:
        result = await mcp.call_tool(
            "retrieve_memory",
            {"agent_id": AGENT, "current_year": 3, "mode": "weighted", "tags": ["flood"]},
        )

    assert not result.is_error, text_of(result)
    assert result.structured_content == SEED_RESULTS.model_dump(mode="json")
    assert text_of(result) == format_for_prompt(SEED_RESULTS, with_time=True)
    [(path, body)] = service.requests
    assert path == f"/v1/agents/{AGENT}/retrieve"
    asked = {k: body.get(k) for k in ("top_k", "mode", "current_year", "tags", "query")}
    assert asked == {
        "top_k": 5,
        "mode": "weighted",
        "current_year": 3,
        "tags": ["flood"],
        "query": None,
    }


async def test_retrieve_memory_asks_for_recent_memories_by_days(service: Service) -> None:
    async with connected(service) as mcp:
        result = await mcp.call_tool(
            "retrieve_memory", {"agent_id": AGENT, "mode": "recent", "days": 2.5}
        )
        refused = await mcp.call_tool(
            "retrieve_memory", {"agent_id": AGENT, "mode": "saliency", "days": 2.5}
        )

    assert not result.is_error, text_of(result)
    [(_, body)] = service.requests
    assert (body["mode"], body["days"], body["top_k"]) == ("recent", 2.5, MAX_RETRIEVE)
    assert "current_time" not in body, "now is the service's to pin and record"
    assert refused.is_error
    assert "days applies only to mode 'recent'" in text_of(refused)


async def test_retrieve_memory_passes_filter_and_weights_to_the_service(
    service: Service,
) -> None:
    arguments: dict[str, Any] = {
        "agent_id": AGENT,
        "mode": "weighted",
        "query": "flood insurance",
        "filter": {"kinds": ["episodic", "summary_l1"], "min_importance": 0.5, "year_from": 2},
        "weights": {"recency": 0.1, "importance": 0.4, "relevance": 0.5},
    }
    async with connected(service) as mcp:
        result = await mcp.call_tool("retrieve_memory", arguments)

    assert not result.is_error, text_of(result)
    [(_, body)] = service.requests
    assert body["filter"]["kinds"] == ["episodic", "summary_l1"]
    assert (body["filter"]["min_importance"], body["filter"]["year_from"]) == (0.5, 2)
    assert body["weights"]["relevance"] == 0.5
    assert body["weights"]["context"] == 0.2  # an omitted weight keeps seed 003's default


async def test_a_weighted_query_without_a_relevance_weight_ranks_by_the_query(
    service: Service,
) -> None:
    """The tool sends every weight, so the service read an unset relevance as a 0 given and
    answered a question by recency and importance alone, against this tool's description."""
    arguments = {"agent_id": AGENT, "mode": "weighted", "query": "flood", "weights": {"recency": 1}}
    async with connected(service) as mcp:
        result = await mcp.call_tool("retrieve_memory", arguments)

    assert not result.is_error, text_of(result)
    [(_, body)] = service.requests
    assert (body["weights"]["recency"], body["weights"]["relevance"]) == (1, 0.5)


async def test_recall_similar_experience_searches_every_experience_by_relevance(
    service: Service,
) -> None:
    """Seed 000: ``episodic_memory.search(query, limit=3)`` with ``min_importance`` 0.3, over
    every experience: here those below the episodic threshold are in working memory, and
    searching episodic memory alone made the 0.3 a dead letter."""
    async with connected(service) as mcp:
        result = await mcp.call_tool(
            "recall_similar_experience", {"agent_id": AGENT, "query": "the river is rising"}
        )

    assert not result.is_error, text_of(result)
    assert text_of(result).startswith("=== SIMILAR EXPERIENCES ===\n- Year 2: A flood")
    [(_, body)] = service.requests
    assert (body["mode"], body["query"], body["top_k"]) == ("relevance", "the river is rising", 3)
    assert (body["filter"]["kinds"], body["scope"]) == (["working", "episodic"], "all")
    assert body["filter"]["min_importance"] == 0.3


async def test_a_further_recall_tool_is_one_registration(
    registry: ToolRegistry, service: Service, sink: Sink
) -> None:
    registry.register(
        recall_tool(
            "recall_known",
            title="Recall what you know",
            description="Search what you know (semantic memory).",
            kinds=("fact",),
            header="=== WHAT YOU KNOW ===",
        )
    )
    with pytest.raises(ValueError, match="recall_known"):
        registry.register(registry.get("recall_known"))  # type: ignore[arg-type]

    async with connected(service, sink, registry) as mcp:
        names = [tool.name for tool in (await mcp.list_tools()).tools]
        result = await mcp.call_tool(
            "recall_known", {"agent_id": AGENT, "query": "flood insurance", "limit": 5}
        )
    assert names[-1] == "recall_known"
    assert not result.is_error, text_of(result)
    [(_, body)] = service.requests
    assert (body["filter"]["kinds"], body["top_k"]) == (["fact"], 5)


def waited(pending: list[dict[str, Any]]) -> dict[str, Any]:
    return {"detail": "1 of 1 positions not applied", "pending": pending, "waited_ms": 5000.0}


def raises(error: Exception) -> Handler:
    def handler(_: httpx.Request) -> httpx.Response:
        raise error

    return handler


FAILURES: dict[str, tuple[Handler, str]] = {
    "422": (
        lambda _: httpx.Response(
            422,
            json={
                "detail": [
                    {
                        "loc": ["body", "after", 0, "topic"],
                        "msg": "after.0.topic: no such topic",
                        "type": "value_error",
                    }
                ]
            },
        ),
        "the memory service refused the request: after.0.topic: no such topic",
    ),
    "503": (
        lambda _: httpx.Response(503, json={"detail": "memory store unavailable: Redis down"}),
        "memory is unavailable right now: memory store unavailable: Redis down",
    ),
    "504": (
        lambda _: httpx.Response(
            504,
            json=waited(
                [
                    {
                        "topic": "agent.observations",
                        "partition": 0,
                        "offset": 7,
                        "working": 6,
                        "episodic": 6,
                    }
                ]
            ),
        ),
        "memory has not taken in agent.observations:0:7 yet (waited 5000 ms)",
    ),
    "409": (
        lambda _: httpx.Response(
            409,
            json={
                "detail": "1 position(s) of after are not in the log",
                "missing": [
                    {"topic": "agent.observations", "partition": 0, "offset": 70, "log_end": 8}
                ],
            },
        ),
        "memory's log holds nothing at agent.observations:0:70: pass in after only the "
        "positions publish_observation returned",
    ),
    "refused connection": (
        raises(httpx.ConnectError("All connection attempts failed")),
        f"cannot reach the memory service at {BASE}: All connection attempts failed",
    ),
    "timeout": (
        raises(httpx.ReadTimeout("timed out")),
        f"the memory service at {BASE} did not answer in time",
    ),
    "not http": (
        raises(httpx.UnsupportedProtocol("Request URL has an unsupported protocol 'ftp://'.")),
        "the memory service cannot be called: the query service URL",
    ),
}


@pytest.mark.parametrize("failure", FAILURES)
async def test_a_failing_service_is_a_tool_error_in_words(service: Service, failure: str) -> None:
    service.answer, expected = FAILURES[failure]
    for tool, arguments in [
        ("retrieve_memory", {"agent_id": AGENT}),
        ("recall_similar_experience", {"agent_id": AGENT, "query": "flood"}),
    ]:
        async with connected(service) as mcp:
            result = await mcp.call_tool(tool, arguments)
        assert result.is_error
        assert expected in text_of(result)
        assert "Traceback" not in text_of(result)
    assert len(service.requests) == 2


@pytest.mark.parametrize(
    ("arguments", "problems"),
    [
        ({}, ["agent_id: Field required"]),
        (
            {"agent_id": "H 1", "top_k": 6},
            [
                "agent_id: must be 1-200 characters",
                "top_k: Input should be less than or equal to 5",
            ],
        ),
        ({"agent_id": AGENT, "tags": "flood"}, ["tags: Input should be a valid"]),
        ({"agent_id": AGENT, "surprise": 1}, ["surprise: Extra inputs are not permitted"]),
        (
            {"agent_id": AGENT, "current_year": 3, "current_step": 9},
            ["give current_year or current_step, not both"],
        ),
        (
            {"agent_id": AGENT, "filter": {"kinds": ["dream"], "year_from": 5, "year_to": 2}},
            ["filter.kinds.0: Input should be 'working'"],
        ),
        (
            {"agent_id": AGENT, "filter": {"year_from": 2**53 + 1}},
            ["filter.year_from: Input should be less than or equal to 9007199254740992"],
        ),
        (
            {"agent_id": AGENT, "mode": "two_phase", "weights": {"recency": 1.0}},
            ["weights apply only to mode 'weighted'"],
        ),
    ],
)
async def test_invalid_arguments_are_a_tool_error_naming_each_field(
    service: Service, arguments: dict[str, Any], problems: list[str]
) -> None:
    async with connected(service) as mcp:
        result = await mcp.call_tool("retrieve_memory", arguments)
    assert result.is_error
    for problem in problems:
        assert problem in text_of(result)
    assert "errors.pydantic.dev" not in text_of(result)
    assert service.requests == []


async def test_an_unknown_tool_is_a_protocol_error(service: Service) -> None:
    async with connected(service) as mcp:
        with pytest.raises(MCPError, match="unknown tool 'recall_everything'") as error:
            await mcp.call_tool("recall_everything", {"agent_id": AGENT})
    assert error.value.code == -32602


async def test_publish_observation_publishes_and_says_where_for_after(
    service: Service, sink: Sink
) -> None:
    async with connected(service, sink) as mcp:
        result = await mcp.call_tool(
            "publish_observation",
            {
                "agent_id": AGENT,
                "content": "Year 3: A major flood caused $60,000 in damages",
                "agent_type": "household",
                "year": 3,
                "kind": "flood.major",
                "tags": ["flood"],
                "metadata": {"depth_m": 1.2},
            },
        )

    assert not result.is_error, text_of(result)
    [observation] = sink.published
    assert (observation.agent_type, observation.year, observation.kind, observation.tags) == (
        "household",
        3,
        "flood.major",
        ("flood",),
    )
    assert observation.metadata == {"depth_m": 1.2}
    position = {"topic": "agent.observations", "partition": 1, "offset": 42}
    assert result.structured_content == {"event_id": observation.event_id, "position": position}
    assert f"after={json.dumps([position])}" in text_of(result)


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (ToolError("the observation was not recorded: broker gone"), "broker gone"),
        (RuntimeError("secret internals"), "publish_observation failed unexpectedly"),
    ],
)
async def test_a_failing_log_is_a_tool_error(
    service: Service, sink: Sink, failure: Exception, expected: str
) -> None:
    sink.failure = failure
    async with connected(service, sink) as mcp:
        result = await mcp.call_tool("publish_observation", {"agent_id": AGENT, "content": "rain"})
    assert result.is_error
    assert expected in text_of(result)
    assert "secret internals" not in text_of(result)


async def test_without_a_log_publishing_is_refused_and_reading_still_works(
    service: Service,
) -> None:
    async with connected(service) as mcp:
        published = await mcp.call_tool(
            "publish_observation", {"agent_id": AGENT, "content": "rain"}
        )
        retrieved = await mcp.call_tool("retrieve_memory", {"agent_id": AGENT})
    assert published.is_error
    assert "no event log" in text_of(published)
    assert not retrieved.is_error


async def test_an_address_the_mcp_server_cannot_bind_is_not_called_a_busy_port() -> None:
    """``--host 203.0.113.5`` (not this machine's) was "cannot listen (in use?)"."""
    import uvicorn

    from projections.service.mcp_server import _serve

    async def app(scope: Any, receive: Any, send: Any) -> None:  # never reached
        raise AssertionError("served")

    web = uvicorn.Server(uvicorn.Config(app, host="203.0.113.5", port=0, log_level="critical"))
    with pytest.raises(OSError, match=r"cannot listen on 203\.0\.113\.5:0") as refused:
        await _serve(web, "203.0.113.5:0")
    assert "(in use?)" not in str(refused.value)  # it guessed one cause for all
