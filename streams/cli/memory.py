"""An agent's side of Engram from the command line: ``publish`` an event to the log, and
``retrieve`` memories from the query service."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError

from streams.cli import deferred
from streams.cli.configuration import bootstrap_of, load_settings, open_keyring
from streams.cli.console import (
    UNREACHABLE,
    console,
    err,
    fail,
    friendly_errors,
    invalid_retrieval,
    run,
)
from streams.settings import EngramSettings

if TYPE_CHECKING:
    from projections.retrieval.models import RetrievalResponse
    from schemas.agent_events import AgentEvent

commands = typer.Typer()


@commands.command(
    help=("Publish one agent event and print where it landed (topic, partition, offset).")
)
def publish(
    agent_id: Annotated[str, typer.Argument(help="The agent the event belongs to.")],
    content: Annotated[str, typer.Argument(help="What happened, in words.")],
    event_type: Annotated[str, typer.Option("--type", help="observation|decision|feedback")] = (
        "observation"
    ),
    skill: Annotated[str | None, typer.Option(help="Decisions: the skill taken.")] = None,
    target: Annotated[str | None, typer.Option(help="Feedback: the event id it is about.")] = None,
    signal_value: Annotated[float | None, typer.Option("--signal", help="Feedback: -1..1")] = None,
    importance: Annotated[float | None, typer.Option(help="Explicit importance 0..1.")] = None,
    kind: Annotated[str | None, typer.Option(help="Event-type table key, e.g. flood.major")] = None,
    source: Annotated[str | None, typer.Option(help="personal|neighbor|community|abstract")] = None,
    tags: Annotated[str | None, typer.Option(help="Comma-separated tags.")] = None,
    agent_type: Annotated[str, typer.Option(help="Profile in agent_types.yaml.")] = "default",
    year: Annotated[int | None, typer.Option()] = None,
    step: Annotated[int | None, typer.Option()] = None,
    reset_surprise: Annotated[
        bool,
        typer.Option(
            help="This event begins a new episode: the agent's surprise strategy starts again "
            "from its initial state (seed 003's reset_surprise)."
        ),
    ] = False,
) -> None:
    settings = load_settings()
    bootstrap = bootstrap_of(settings)
    fields: dict[str, Any] = {
        "agent_id": agent_id,
        "content": content,
        "importance": importance,
        "kind": kind,
        "source": source,
        "agent_type": agent_type,
        "year": year,
        "step": step,
        "tags": tuple(t.strip() for t in tags.split(",") if t.strip()) if tags else (),
        "reset_surprise": reset_surprise or None,
    }
    fields = {k: v for k, v in fields.items() if v is not None}
    _warn_unknown_profile(settings, agent_type, source)

    async def main() -> None:
        event = _event(event_type, fields, skill=skill, target=target, signal=signal_value)
        await _publish(settings, bootstrap, event)

    run(main)


def _warn_unknown_profile(settings: EngramSettings, agent_type: str, source: str | None) -> None:
    """A mistyped agent type or source is valid (the default profile, no source weight) and
    silently changes the importance, the routing and the agent's capacities: say so."""
    with friendly_errors():
        config = deferred.processing_config.load_processing_config(settings.agent_types)
    known = config.agent_types
    if agent_type not in known:
        err.print(
            f"warning: agent type {agent_type!r} is not in the agent types "
            f"({', '.join(sorted(known))}): the default profile applies"
        )
    profile = config.profile_for(agent_type)
    if source is not None and source not in profile.source_weights:
        err.print(
            f"warning: source {source!r} is not one of the profile's "
            f"({', '.join(sorted(profile.source_weights))}): it weighs as "
            f"{profile.default_source!r}"
        )


def _event(
    event_type: str,
    fields: dict[str, Any],
    *,
    skill: str | None,
    target: str | None,
    signal: float | None,
) -> AgentEvent:
    """The event ``--type`` names, or the one line saying what it is missing."""
    if event_type == "observation":
        return deferred.agent_events.Observation(**fields)
    if event_type == "decision":
        if not skill:
            fail("a decision needs --skill")
        return deferred.agent_events.Decision(skill=skill, **fields)
    if event_type == "feedback":
        if target is None or signal is None:
            fail("feedback needs --target and --signal")
        return deferred.agent_events.Feedback(target_event_id=target, signal=signal, **fields)
    fail(f"--type must be observation, decision or feedback, not {event_type!r}")


async def _publish(settings: EngramSettings, bootstrap: str, event: AgentEvent) -> None:
    topics = deferred.topics.Topics(settings.topic_prefix)
    keyring = await open_keyring(settings)
    try:
        tracing = deferred.tracing.start_tracing(settings, "engram-publish")
        async with deferred.publisher.AsyncPublisher(
            bootstrap,
            topics=topics,
            keyring=keyring,
            headers=tracing.publish_headers if tracing else None,
        ) as publisher:
            position = await publisher.publish(event)
    finally:
        if keyring is not None:
            await keyring.close()
    console.print_json(
        data={
            "event_id": event.event_id,
            "topic": position.topic,
            "partition": position.partition,
            "offset": position.offset,
        }
    )


Mode = Annotated[
    str | None,
    typer.Option(
        help="two_phase (the default) | weighted | saliency | basic | constrained | generative "
        "| relevance (needs --query) | recent (the last --days); left out with --query: "
        "relevance over all memories. See projections/README.md, 'Retrieval modes'."
    ),
]
Scope = Annotated[
    str | None,
    typer.Option(
        help="active (the default): what capacity and forgetting left | archive: what they "
        "took away | all; left out with --query and no --mode: all."
    ),
]
OccurredAfter = Annotated[
    str | None,
    typer.Option(help="Filter: events that occurred at or after this time (ISO 8601, offset)."),
]
OccurredBefore = Annotated[
    str | None,
    typer.Option(help="Filter: events that occurred at or before this time (ISO 8601, offset)."),
]
Profile = Annotated[
    str | None,
    typer.Option(
        help="constrained: MILLER_STANDARD (default) | COWAN_CONSERVATIVE | "
        "EXTENDED_CONTEXT | MINIMAL."
    ),
]
Arousal = Annotated[
    float | None,
    typer.Option(min=0.0, max=1.0, help="constrained: arousal; unset: the agent's own."),
]
Days = Annotated[
    float | None,
    typer.Option(
        help="recent: how many days before --time (now) the events occurred; unset: 7.",
    ),
]
Kinds = Annotated[
    list[str] | None,
    typer.Option(
        help="Filter: only memories of this kind (working, episodic, summary_l1, "
        "summary_l2; fact and procedure match no memory yet: `engram facts` and `engram "
        "procedures` show what an agent learned). Repeatable."
    ),
]
Tagged = Annotated[
    str | None,
    typer.Option(help="Filter: only memories with any of these tags, comma-separated."),
]
MinImportance = Annotated[
    float | None, typer.Option(min=0.0, max=1.0, help="Filter: importance at least this.")
]
Weights = Annotated[
    list[str] | None,
    typer.Option(
        help="weighted: recency, importance, context, relevance or interference=W (seed "
        "003's 0.3/0.5/0.2/0/0 for the rest); generative: recency, importance, relevance "
        "or recency_decay=W. Repeatable."
    ),
]
AsPrompt = Annotated[
    bool,
    typer.Option(
        "--prompt", help="Print the memories as an LLM prompt block, not the JSON answer."
    ),
]
After = Annotated[
    list[str] | None,
    typer.Option(
        help="Read your writes: wait until this position (topic:partition:offset, from what "
        "`engram publish` prints) is applied. Repeatable."
    ),
]
WaitTimeout = Annotated[
    int | None, typer.Option(min=0, max=30_000, help="Longest wait for --after (ms).")
]
Url = Annotated[str, typer.Option(envvar="ENGRAM_URL", help="Query service URL.")]
ApiKey = Annotated[
    str | None,
    typer.Option(
        envvar="ENGRAM_API_KEY",
        show_envvar=True,
        help="API key for a query service that asks for one (ENGRAM_API_KEYS_FILE).",
    ),
]
Query = Annotated[str | None, typer.Option(help="Query text.")]
TopK = Annotated[
    int | None, typer.Option(min=1, max=100, help="How many memories; unset: 5 (recent: 10).")
]
Year = Annotated[int | None, typer.Option(help="Current simulation year.")]
Step = Annotated[int | None, typer.Option(help="Current simulation step.")]
Now = Annotated[
    str | None,
    typer.Option(
        "--time",
        help="Current wall-clock time (ISO 8601, with an offset), for agents without years or "
        "steps: ages are then in hours of the events' time; recent counts --days back from "
        "it (unset: now).",
    ),
]
ContextTags = Annotated[
    str | None, typer.Option(help="Context tags of the weighted mode, comma-separated.")
]
YearFrom = Annotated[int | None, typer.Option(help="Filter: from this year on.")]
YearTo = Annotated[int | None, typer.Option(help="Filter: up to this year.")]
StepFrom = Annotated[int | None, typer.Option(min=0, help="Filter: from this step on.")]
StepTo = Annotated[int | None, typer.Option(min=0, help="Filter: up to this step.")]


@commands.command(
    help=("Retrieve an agent's memories from the query service, with score breakdowns.")
)
def retrieve(
    agent_id: Annotated[str, typer.Argument(help="Whose memories.")],
    query: Query = None,
    top_k: TopK = None,
    mode: Mode = None,
    scope: Scope = None,
    year: Year = None,
    step: Step = None,
    time: Now = None,
    days: Days = None,
    tags: ContextTags = None,
    profile: Profile = None,
    arousal: Arousal = None,
    kind: Kinds = None,
    tagged: Tagged = None,
    min_importance: MinImportance = None,
    year_from: YearFrom = None,
    year_to: YearTo = None,
    step_from: StepFrom = None,
    step_to: StepTo = None,
    occurred_after: OccurredAfter = None,
    occurred_before: OccurredBefore = None,
    weight: Weights = None,
    prompt: AsPrompt = False,
    after: After = None,
    wait_timeout_ms: WaitTimeout = None,
    url: Url = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    positions = [_position(text) for text in after or []]
    params = retrieval_params(
        query=query,
        top_k=top_k,
        mode=mode,
        scope=scope,
        year=year,
        step=step,
        time=time,
        days=days,
        tags=tags,
        profile=profile,
        arousal=arousal,
        kind=kind,
        tagged=tagged,
        min_importance=min_importance,
        year_from=year_from,
        year_to=year_to,
        step_from=step_from,
        step_to=step_to,
        occurred_after=occurred_after,
        occurred_before=occurred_before,
        weight=weight,
    )
    params["wait_timeout_ms"] = wait_timeout_ms
    response = _retrieve(url, agent_id, positions, params, api_key)
    print_answer(response, prompt)


def print_answer(response: RetrievalResponse, prompt: bool) -> None:
    """The answer as JSON, or as an LLM prompt block (``--prompt``)."""
    if prompt:
        print(deferred.query_client.format_for_prompt(response, with_time=True, with_store=True))
    else:
        console.print_json(response.model_dump_json())


def retrieval_params(
    *,
    query: str | None = None,
    top_k: int | None = None,
    mode: str | None = None,
    scope: str | None = None,
    year: int | None = None,
    step: int | None = None,
    time: str | None = None,
    days: float | None = None,
    tags: str | None = None,
    profile: str | None = None,
    arousal: float | None = None,
    kind: list[str] | None = None,
    tagged: str | None = None,
    min_importance: float | None = None,
    year_from: int | None = None,
    year_to: int | None = None,
    step_from: int | None = None,
    step_to: int | None = None,
    occurred_after: str | None = None,
    occurred_before: str | None = None,
    weight: list[str] | None = None,
) -> dict[str, Any]:
    """The fields of a retrieval request the retrieval options give (None: not given, so the
    request's default for its mode applies: ``top_k`` is 10 in mode recent, 5 otherwise); the
    defaults are those of the options, so ``retrieval_params()`` is a request of defaults."""
    params: dict[str, Any] = {
        "top_k": top_k,
        "mode": mode,
        "scope": scope,
        "query": query,
        "current_year": year,
        "current_step": step,
        "current_time": time,
        "days": days,
        "tags": [t.strip() for t in tags.split(",")] if tags else [],
        "profile": profile,
        "arousal": arousal,
    }
    if weight:
        if mode not in ("weighted", "generative"):
            fail("--weight applies to --mode weighted or generative")
        params["weights" if mode == "weighted" else "generative"] = _weights(weight)
    memory_filter: dict[str, Any] = {
        "kinds": kind or [],
        "tags": [t.strip() for t in tagged.split(",")] if tagged else [],
        "min_importance": min_importance,
        "year_from": year_from,
        "year_to": year_to,
        "step_from": step_from,
        "step_to": step_to,
        "occurred_after": occurred_after,
        "occurred_before": occurred_before,
    }
    if any(value not in (None, []) for value in memory_filter.values()):
        params["filter"] = {k: v for k, v in memory_filter.items() if v not in (None, [])}
    return params


def _position(text: str) -> dict[str, Any]:
    """``topic:partition:offset`` (as ``engram publish`` prints it) as the service takes it."""
    from schemas.topics import parse_position

    try:
        return parse_position(text).model_dump()
    except ValueError as exc:
        fail(f"--after: {exc}")


def _weights(texts: list[str]) -> dict[str, float]:
    weights: dict[str, float] = {}
    for text in texts:
        name, _, value = text.partition("=")
        try:
            weights[name.strip()] = float(value)
        except ValueError:
            fail(f"--weight: {text!r} is not name=number")
    return weights


def _retrieve(
    url: str,
    agent_id: str,
    positions: list[dict[str, Any]],
    params: dict[str, Any],
    api_key: str | None,
) -> RetrievalResponse:
    """The service's answer, or one line naming the invalid field or the unreachable URL."""
    with query_service_errors(url):
        try:
            with deferred.query_client.EngramClient(url, api_key=api_key) as client:
                return client.retrieve(
                    agent_id,
                    after=positions,
                    **{k: v for k, v in params.items() if v is not None},
                )
        except ValidationError as exc:
            invalid_retrieval(exc)


@contextlib.contextmanager
def query_service_errors(url: str) -> Iterator[None]:
    """A call to the query service at ``url``: a malformed URL or a service out of reach is
    one line naming it (:func:`friendly_errors` for the rest), never a traceback. Out of reach
    exits :data:`UNREACHABLE`, as an unreachable broker or Redis does: a retry may succeed."""
    with friendly_errors():
        try:
            yield
        except deferred.httpx.InvalidURL as exc:
            fail(f"--url: {url!r} is not a valid URL ({exc})")
        except deferred.query_client.ServiceUnreachableError as exc:
            fail(str(exc), UNREACHABLE)
        except deferred.query_client.UnreadableAnswerError as exc:
            fail(str(exc))
