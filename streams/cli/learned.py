"""``engram procedures``, ``engram facts``, ``engram plan``, ``engram select-tool`` and
``engram feedback``: what an agent learned from feedback, read from the query service, and the
feedback it learns from, published to the log; and ``engram surprise``, how surprised it is."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from pydantic import BaseModel
from rich import box
from rich.table import Table
from rich.text import Text

from streams.cli import deferred
from streams.cli.configuration import bootstrap_of, load_settings
from streams.cli.console import console, fail, friendly_errors, print_whole, run
from streams.cli.memory import ApiKey, Url, _publish, query_service_errors

if TYPE_CHECKING:
    from projections.learned.reads import Facts, ToolChoice
    from projections.service.client import EngramClient

commands = typer.Typer()

AsJson = Annotated[bool, typer.Option("--json", help="Print the answer as JSON.")]
LearnedTopK = Annotated[int, typer.Option(min=1, max=50, help="How many to show.")]
Answer = TypeVar("Answer", bound=BaseModel)


def _ask(url: str, api_key: str | None, call: Callable[[EngramClient], Answer]) -> Answer:
    with (
        query_service_errors(url),
        deferred.query_client.EngramClient(url, api_key=api_key) as client,
    ):
        return call(client)


@commands.command(help="Show an agent's procedures (decision skills) and their success rates.")
def procedures(
    agent_id: Annotated[str, typer.Argument(help="Whose procedures.")],
    context: Annotated[str | None, typer.Option(help="The situation: relevant ones only.")] = None,
    min_success_rate: Annotated[float, typer.Option(min=0.0, max=1.0)] = 0.0,
    top_k: LearnedTopK = 10,
    url: Url = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    answer = _ask(
        url,
        api_key,
        lambda c: c.procedures(agent_id, context, min_success_rate=min_success_rate, top_k=top_k),
    )
    if as_json:
        typer.echo(answer.model_dump_json(indent=2))
        return
    for p in answer.procedures:
        relevance = "" if p.score is None else f", relevance {p.score:.2f}"
        if p.name_words:
            relevance += f", named by {', '.join(p.name_words)}"
        console.print(
            f"{p.name}: success rate {p.success_rate:.4f}, {p.usage_count} uses{relevance}"
        )
    if not answer.procedures:
        console.print(f"no procedures of {agent_id} match")


@commands.command(
    help="Show an agent's cognitive system (System 1 or 2), arousal and latest surprise trace "
    "(seed 003's get_cognitive_system and get_surprise_trace)."
)
def surprise(
    agent_id: Annotated[str, typer.Argument(help="Whose surprise.")],
    url: Url = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    answer = _ask(url, api_key, lambda c: c.surprise(agent_id))
    if as_json:
        typer.echo(answer.model_dump_json(indent=2))
        return
    console.print(f"{agent_id}: {answer.system}, arousal {answer.arousal:.3f}")
    trace = answer.trace
    if trace is None:
        console.print("no surprise reading yet (its agent type has no strategy, or it read none)")
        return
    expected = "" if trace.expectation is None else f", expected {trace.expectation:g}"
    likely = "" if trace.probability is None else f", probability {trace.probability:.3f}"
    console.print(
        f"{trace.strategy}: observed {trace.observed}{expected}{likely}; surprise "
        f"{trace.surprise:.3f} against the threshold {trace.threshold:g}"
    )


@commands.command(
    help="Show an agent's current facts (with --history, superseded ones too), each with how "
    "many searches returned it."
)
def facts(
    agent_id: Annotated[str, typer.Argument(help="Whose facts.")],
    query: Annotated[
        str | None,
        typer.Option(help="What to recall: a search, counted on the facts it returns."),
    ] = None,
    history: Annotated[bool, typer.Option(help="Include superseded facts.")] = False,
    min_confidence: Annotated[
        float,
        typer.Option(min=0.0, max=1.0, help="Leave out facts less certain than this (0 to 1)."),
    ] = 0.0,
    top_k: LearnedTopK = 10,
    url: Url = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    answer = _ask(
        url,
        api_key,
        lambda c: c.facts(
            agent_id, query, top_k=top_k, history=history, min_confidence=min_confidence
        ),
    )
    if as_json:
        typer.echo(answer.model_dump_json(indent=2))
        return
    if not answer.facts:
        console.print(f"no facts of {agent_id} match")
        return
    print_whole(facts_table(answer))


def facts_table(answer: Facts) -> Table:
    """One row per fact: what it says, and how many searches returned it (seed 000's
    access_count; a read with --query is one, counted once the worker has read it)."""
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("fact", ratio=1, overflow="fold")
    table.add_column("searched", justify="right", no_wrap=True)
    for f in answer.facts:
        until = ""
        if f.valid_to is not None:
            until = f" (until {f.valid_to:%Y-%m-%d %H:%M})"
        elif not f.current:  # found superseded without its end: the time is not known
            until = " (superseded)"
        sure = "" if f.confidence == 1.0 else f" (confidence {f.confidence:g})"
        table.add_row(
            Text(f"{f.subject} {f.attribute}: {f.value}{sure}{until}"), str(f.access_count)
        )
    return table


@commands.command(help="Look up a cached plan for a request: a hit, or a miss.")
def plan(
    agent_id: Annotated[str, typer.Argument(help="Whose plan cache.")],
    prompt: Annotated[str, typer.Argument(help="The request.")],
    url: Url = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    answer = _ask(url, api_key, lambda c: c.lookup_plan(agent_id, prompt))
    if as_json:
        typer.echo(answer.model_dump_json(indent=2))
        return
    if not answer.hit or answer.plan is None:
        console.print("miss")
        return
    console.print(
        f"hit: {answer.plan.prompt!r}, similarity {answer.similarity:.3f}, score {answer.score:.3f}"
    )
    for i, action in enumerate(answer.plan.actions, 1):
        console.print(f"  {i}. {action.tool}({action.input}) -> {action.observation}")


SELECT_TOOL_HELP = (
    "Choose the procedure to use as the tool for a request (seed 002).\n\n"
    "The request is compared with each of the agent's procedures: its description (the text "
    "of the decision that created it) and the texts of its upvoted decisions. The most similar "
    "one is selected if its similarity is at least --min-similarity (inclusive), whatever its "
    "success rate; ties go to the higher success rate, then the name.\n\n"
    "Otherwise it is a miss: no known tool fits, and the agent should define a new one "
    "(publish a decision with a new skill). An upvote on a decision attaches its text to its "
    "procedure, so a decision that states the request makes the same request select it next "
    "time; after a downvote, ask again with --exclude NAME to fall to the next procedure, or "
    "to a miss.\n\n"
    "Prints what was selected, or the miss and why, with the similarity; a miss exits 0 as a "
    "selection does (--json gives `reason`)."
)


@commands.command("select-tool", help=SELECT_TOOL_HELP)
def select_tool(
    agent_id: Annotated[str, typer.Argument(help="Whose procedures.")],
    prompt: Annotated[str, typer.Argument(help="The request to choose a tool for.")],
    exclude: Annotated[
        list[str] | None,
        typer.Option(
            "--exclude",
            metavar="NAME",
            help="A procedure not to choose (one downvoted for this request); repeatable.",
        ),
    ] = None,
    min_similarity: Annotated[
        float | None,
        typer.Option(
            min=-1.0,
            max=1.0,
            help="The similarity a procedure needs to be selected (default: the service's, 0.4).",
        ),
    ] = None,
    url: Url = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    answer = _ask(
        url,
        api_key,
        lambda c: c.select_tool(
            agent_id, prompt, exclude=exclude or (), min_similarity=min_similarity
        ),
    )
    if as_json:
        typer.echo(answer.model_dump_json(indent=2))
        return
    console.print(_choice_line(agent_id, answer), highlight=False)


def _choice_line(agent_id: str, answer: ToolChoice) -> str:
    """One line a person reads: what was chosen and how closely, or why nothing was."""
    if answer.selected is not None:
        chosen = answer.selected
        return (
            f"selected {chosen.name}: similarity {answer.similarity:.3f} >= "
            f"{answer.threshold:g}, success rate {chosen.success_rate:.4f}"
        )
    if answer.closest is not None:
        return (
            f"miss: the closest, {answer.closest.name}, is {answer.similarity:.3f} similar, "
            f"below {answer.threshold:g}: define a new tool (a decision with a new skill)"
        )
    if answer.reason == "all_excluded":
        return f"miss: every procedure of {agent_id} was excluded: define a new tool"
    return f"miss: {agent_id} has no procedures yet: define a new tool"


@commands.command(
    help="Publish feedback on an agent's decision or memory (signal -1..1).",
    # A negative SIGNAL (`engram feedback H001 ID -1`) reads as an option otherwise.
    context_settings={"ignore_unknown_options": True},
)
def feedback(
    agent_id: Annotated[str, typer.Argument(help="Whose event it is.")],
    target: Annotated[str, typer.Argument(help="The event id the feedback is about.")],
    signal_value: Annotated[float, typer.Argument(metavar="SIGNAL", help="-1..1")],
    content: Annotated[str | None, typer.Option(help="Why, in words.")] = None,
    agent_type: Annotated[
        str,
        typer.Option(
            help="Profile in agent_types.yaml. Feedback keeps the type an agent already has: "
            "this one applies only when the feedback is the agent's first event."
        ),
    ] = "default",
) -> None:
    if not -1.0 <= signal_value <= 1.0:
        fail(f"SIGNAL must lie in [-1, 1], got {signal_value}")
    settings = load_settings()
    bootstrap = bootstrap_of(settings)
    fields = {"content": content} if content else {}
    with friendly_errors():  # an invalid id or an empty target: one line, not a traceback
        event = deferred.agent_events.Feedback(
            agent_id=agent_id,
            agent_type=agent_type,
            target_event_id=target,
            signal=signal_value,
            **fields,
        )

    async def main() -> None:
        await _publish(settings, bootstrap, event)

    run(main)
