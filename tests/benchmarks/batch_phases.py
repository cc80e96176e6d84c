"""Where a worker's batch spends its time: each phase of an ``IngestPipeline`` timed per batch.

For ``bench_latency --phases``: the latency at a steady rate follows how long a batch takes,
since a batch is derived, logged, marked and applied before the next one starts. The phases
are the pipeline's own steps, wrapped on the one pipeline object measured (its class is left
alone): deriving, handing records to the producer, logging the markers (sent and delivered),
every wait for delivery (the records' and the markers' together), and applying to both stores,
each store's own apply beside (they run at once).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from streams.worker.pipeline import IngestPipeline
from tests.benchmarks.servers import percentile

PHASES = ("derive", "_send", "_log_markers", "_await_deliveries", "apply")
"""The pipeline's methods timed, in the order a batch runs them."""

LABELS = {
    "batch": "the batch",
    "derive": "deriving",
    "_send": "handing records to the producer",
    "_log_markers": "the markers, sent and delivered",
    "_await_deliveries": "waits for delivery (records' and markers')",
    "apply": "applying to both stores",
}


@dataclass
class BatchPhases:
    """Milliseconds per phase of every batch handled while :meth:`watch` was in force."""

    batches: list[dict[str, float]] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    _current: dict[str, float] = field(default_factory=dict)
    _stores: list[str] = field(default_factory=list)

    def watch(self, pipeline: IngestPipeline) -> None:
        """Time ``pipeline``'s phases from its next batch on."""
        handle = pipeline._handle

        @functools.wraps(handle)
        async def timed_handle(records: Any) -> Any:
            self._current = {}
            started = time.perf_counter()
            result = await handle(records)
            self._current["batch"] = (time.perf_counter() - started) * 1000.0
            self.batches.append(self._current)
            self.sizes.append(len(records))
            return result

        for name in PHASES:
            setattr(pipeline, name, self._timed(name, getattr(pipeline, name)))
        for store in pipeline.stores:
            name = type(store).__name__
            self._stores.append(name)
            store.apply = self._timed(name, store.apply)  # type: ignore[method-assign]
        pipeline._handle = timed_handle  # type: ignore[method-assign]

    def _timed(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def add(started: float) -> None:
            elapsed = (time.perf_counter() - started) * 1000.0
            self._current[name] = self._current.get(name, 0.0) + elapsed

        if name == "derive":

            @functools.wraps(call)
            def timed(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return call(*args, **kwargs)
                finally:
                    add(started)

            return timed

        @functools.wraps(call)
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                result: Awaitable[Any] = call(*args, **kwargs)
                return await result
            finally:
                add(started)

        return timed_async

    def report(self, skip: int = 0) -> str:
        """A table of p50 / p90 / max ms per phase over the batches after the first ``skip``."""
        batches, sizes = self.batches[skip:], self.sizes[skip:]
        if not batches:
            return "no batch was timed"
        lines = [
            f"{len(batches)} batches of {percentile([float(s) for s in sizes], 50):.0f} events "
            f"at the median (p90 {percentile([float(s) for s in sizes], 90):.0f}, max "
            f"{max(sizes)}); busy {sum(b['batch'] for b in batches) / 1000.0:.1f} s",
            "| phase | p50 ms | p90 ms | max ms |",
            "|---|---|---|---|",
        ]
        for name in ("batch", *PHASES, *self._stores):
            values = [b.get(name, 0.0) for b in batches]
            lines.append(
                f"| {LABELS.get(name, f'of which {name}.apply')} | {percentile(values, 50):.1f} | "
                f"{percentile(values, 90):.1f} | {max(values):.1f} |"
            )
        return "\n".join(lines)
