"""``engram forget-agent``: an agent's memories erased from every projection version and its
sealing keys deleted, through the worker that owns the agent, in log order."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from streams.cli import deferred
from streams.cli.configuration import configure, load_settings, open_keyring
from streams.cli.console import (
    checked_agent_id,
    console,
    fail,
    friendly_errors,
    if_stopped,
    run,
)
from streams.cli.version_stores import VersionStores, version_stores
from streams.settings import EngramSettings

if TYPE_CHECKING:
    from streams.privacy.forgetting import ForgetReport

commands = typer.Typer()


@commands.command(
    "forget-agent",
    help=(
        "Forget an agent: erase its memories from every projection version and delete its "
        "sealing keys, so its sealed events on every topic (and in every export) can no longer "
        "be read, and a replay cannot bring them back; events a client published unsealed (a "
        "plain Kafka client, a publisher given no keyring) stay readable on the agent topics. "
        "Runs in log order through the worker that owns the agent; this command waits until "
        "that worker has done it."
    ),
)
def forget_agent(
    agent_id: Annotated[str, typer.Argument(help="The agent to forget.")],
    reason: Annotated[
        str | None, typer.Option(help="Why (kept on the request in the log, max 500 chars).")
    ] = None,
    timeout: Annotated[
        float, typer.Option(min=0.0, help="Longest wait for a worker to complete it (seconds).")
    ] = 60.0,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    settings = load_settings()
    checked_agent_id(agent_id)
    with friendly_errors():
        if reason is not None and len(reason) > 500:
            raise ValueError("--reason is at most 500 characters")
    stores = version_stores(settings)
    if not yes and not typer.confirm(
        f"Forget {agent_id} for good (its memories and every readable copy of its events)?"
    ):
        fail("not forgotten", code=1)
    configure(settings)

    async def main() -> None:
        left = (
            f"the request to forget {agent_id} may be on the log already, and then the worker "
            f"that owns the agent carries it out; `engram forget-agent {agent_id} --yes` again "
            "waits for it (a second request changes nothing)"
        )
        with if_stopped(lambda: left):
            report = await _forget(settings, stores, agent_id, reason=reason, timeout=timeout)
        _print_report(agent_id, report, as_json=as_json)

    run(main)


async def _forget(
    settings: EngramSettings,
    stores: VersionStores,
    agent_id: str,
    *,
    reason: str | None,
    timeout: float,
) -> ForgetReport:
    forgetting = deferred.forgetting
    keyring = await open_keyring(settings)
    try:
        return await forgetting.forget_agent(
            agent_id,
            bootstrap=stores.bootstrap,
            topics=deferred.topics.Topics(settings.topic_prefix),
            keyring=keyring,
            versions=stores.versions,
            open_working=lambda v: deferred.redis_store.RedisWorkingMemory.from_url(
                stores.redis_url, v.redis_namespace
            ),
            open_inactive=stores.open_existing,
            reason=reason,
            timeout=timeout,
        )
    except forgetting.ForgetTimeoutError as exc:
        pending = exc.args[0]
        fail(
            f"the request to forget {agent_id} is in the log at "
            f"{forgetting.describe(pending)['request']} but no worker completed it within "
            f"{timeout:g}s (are the workers running?). It completes when a worker reaches "
            "it; run this command again to check.",
            code=1,
        )
    finally:
        await stores.versions.close()
        if keyring is not None:
            await keyring.close()


def _print_report(agent_id: str, report: ForgetReport, *, as_json: bool) -> None:
    summary = deferred.forgetting.describe(report)
    if as_json:
        console.print_json(data=summary)
        return
    console.print(f"[green]forgot {escape(agent_id)}[/green]", markup=True)
    for name, value in summary.items():
        console.print(f"  {name:<22} {value}")
    if not report.sealed:
        console.print(
            "[yellow]no keyring (ENGRAM_KEYRING=off): the agent's events stay readable "
            "in the log; only the projections were erased[/yellow]",
            markup=True,
        )
    elif not report.key_ids:
        console.print(
            f"[yellow]{escape(agent_id)} had no sealing key: no event of it was sealed under "
            "this id (is the id right?), or it was forgotten before. Events it published "
            "unsealed stay readable in the log; the projections were erased[/yellow]",
            markup=True,
        )
    else:
        console.print(
            "its sealed events can no longer be read; any it published unsealed (a plain Kafka "
            "client, a publisher given no keyring) stay readable on the agent topics, and in "
            "the dead letters where one was refused"
        )
