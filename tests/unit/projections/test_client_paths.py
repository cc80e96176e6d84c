"""The clients put an agent id in a path only if the events accept it, and percent-encoded:
``x/../H1`` read H1's memories (httpx resolves dot segments), and the agents ``.`` and ``..``,
which publishing accepts, could not be read at all."""

from __future__ import annotations

import httpx
import pytest

from projections.service.client import AsyncEngramClient, EngramClient, QueryError

BASE = "http://engram.test"


def recording(paths: list[str]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.raw_path.decode())
        return httpx.Response(503, json={"detail": "recorded only"})

    return httpx.MockTransport(answer)


@pytest.mark.parametrize("agent_id", ["x/../H1", "a?b", "a#b", "", "a b", "H1/"])
def test_an_id_the_events_refuse_is_refused_before_any_request(agent_id: str) -> None:
    paths: list[str] = []
    with EngramClient(BASE, transport=recording(paths)) as client:
        for read in (
            lambda: client.retrieve(agent_id),
            lambda: client.history(agent_id),
            lambda: client.facts(agent_id),
            lambda: client.procedures(agent_id),
            lambda: client.lookup_plan(agent_id, "a prompt"),
            lambda: client.select_tool(agent_id, "a prompt"),
        ):
            with pytest.raises(QueryError, match="is not an agent id") as refused:
                read()
            assert refused.value.status == 422
    assert paths == []


@pytest.mark.parametrize(
    ("agent_id", "segment"),
    [(".", "%2E"), ("..", "%2E%2E"), ("H1", "H1"), ("user@host:1", "user%40host%3A1")],
)
async def test_an_id_names_its_own_path_segment(agent_id: str, segment: str) -> None:
    paths: list[str] = []
    with EngramClient(BASE, transport=recording(paths)) as client, pytest.raises(QueryError):
        client.history(agent_id)
    async with AsyncEngramClient(BASE, transport=recording(paths)) as async_client:
        with pytest.raises(QueryError):
            await async_client.history(agent_id)
    assert [p.split("?")[0] for p in paths] == [f"/v1/agents/{segment}/history"] * 2
