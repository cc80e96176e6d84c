"""The worker exits without acknowledging a batch it could not even prepare: Faust would
restart the agent instead, and the batch would be acknowledged unprocessed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from streams.settings import EngramSettings
from streams.worker import app as worker_app


class ExitedError(Exception):
    """Stands in for the process's exit."""


async def test_a_batch_that_fails_before_the_pipeline_exits_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exits: list[str] = []

    def exit_without_committing(what: str) -> Any:
        exits.append(what)
        raise ExitedError(what)

    monkeypatch.setattr(worker_app, "exit_without_committing", exit_without_committing)

    @contextmanager
    def failing_trace(headers: Iterable[Any]) -> Iterator[None]:
        raise RuntimeError("the tracer failed")
        yield

    processor = worker_app.create_processor_app(
        EngramSettings(data_dir=tmp_path), "127.0.0.1:1", trace_batch=failing_trace
    )
    # No pipeline bound: the batch must stop before one is needed.
    consumer: Any = processor.app.consumer
    consumer.assignment = lambda: set()
    agent = next(iter(processor.app.agents.values()))
    try:
        async with agent.test_context() as running:
            await running.put(b"{}")
            for _ in range(200):
                if exits:
                    break
                await asyncio.sleep(0.01)
    finally:
        # The stream's iterator made the consumer (never started) and its thread's loop.
        consumer._thread.thread_loop.close()
    assert exits == ["a batch could not be prepared"]
