"""Running README blocks as one shell session would, and checking what each command answers.

What a command may be, and how it is run:

* ``.venv/bin/engram ARGS``: the CLI of this checkout, in a process of its own. ``up``,
  ``serve`` and ``mcp --transport http`` keep running: started, awaited until they say they
  are ready, stopped with SIGTERM when the session ends (they must exit 0). ``engram publish``
  must say where the event landed; ``engram retrieve`` must answer with memories (below).
* ``curl URL ...``: run with curl, or reproduced with httpx where curl is missing.
* ``echo JSON | kcat -P -b BROKER -t TOPIC -k KEY``: the same record published with aiokafka.
* ``export K=V ...``: sets variables for every later command and Python block.
* a ``python`` block: executed in this process (top-level ``await`` allowed), sharing its
  names with the earlier blocks of the same file; its own ``assert`` lines are its checks.

Anything else fails the test: a block the test cannot run must be marked (see ``blocks``).

Addresses. The README shows the addresses a user gets (the query service on port 8000, MCP on
8765) and placeholders for those ``engram up`` prints (broker ``127.0.0.1:9092``, Redis
``redis://127.0.0.1:6379/0``); ``127.0.0.1:19092`` stands for another, empty broker. The
session gives every service a free port instead and replaces each address, in commands and
Python blocks, by the live one: ``engram up``'s own broker and Redis, the test session's broker
for the other one. ``ENGRAM_URL``, which commands call when no address is given, names the
live query service.

Checks. A retrieval (``engram retrieve``, ``curl .../retrieve``) must answer with at least one
memory, and, unless it asks for a mode, a query, levels or a filter, with every memory the
README's commands published for that agent before it. Processing is asynchronous, so a
retrieval is repeated until that holds (bounded).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from aiokafka import AIOKafkaProducer

from streams.runtime.devstack.ports import free_port
from tests.integration.docs.blocks import REPO, Block
from tests.integration.docs.shell import CommandLine, command_lines

ENGRAM = ".venv/bin/engram"
SERVICE_READY = {"up": "Ctrl-C stops", "serve": "query service on", "mcp": "MCP server on"}
"""Long-running commands and the line each prints once it is ready."""
DEFAULT_PORTS = {"up": 8000, "serve": 8000}
ANOTHER_BROKER = "127.0.0.1:19092"
PRINTED_BY_UP = {
    "127.0.0.1:9092": r"^\s*kafka bootstrap\s+(\S+)$",
    "redis://127.0.0.1:6379/0": r"^\s*redis\s+(redis://\S+)$",
}
PLAIN_RETRIEVAL = {"top_k", "current_year", "current_step", "after", "wait_timeout_ms"}
PLAIN_RETRIEVE_OPTIONS = {"--year", "--step", "--top-k", "--url", "--after", "--wait-timeout-ms"}
COMMAND_TIMEOUT = 120.0
READY_TIMEOUT = 120.0
PORT_ATTEMPTS = 3
"""Starts of a service whose port another test took meanwhile (the ports are chosen when the
session begins)."""
RETRIEVAL_TIMEOUT = 30.0


class ReadmeCommandError(AssertionError):
    """A README command failed, or answered something other than the README says."""


@dataclass
class Service:
    where: str
    process: subprocess.Popen[bytes]
    output: Path

    def text(self) -> str:
        return self.output.read_text(errors="replace")


@dataclass
class DocSession:
    workdir: Path
    other_broker: str
    env: dict[str, str] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)
    published: dict[str, list[str]] = field(default_factory=dict)
    """Per agent, the contents the README's commands published (Python blocks check theirs)."""
    services: list[Service] = field(default_factory=list)
    namespaces: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("ENGRAM_") or k == "ENGRAM_TEST_BACKEND"
        }
        self.env["PYTHONPATH"] = str(REPO)
        service_port = f"127.0.0.1:{free_port()}"
        self.addresses.update(
            {
                "127.0.0.1:8000": service_port,
                "localhost:8000": service_port,
                "127.0.0.1:8765": f"127.0.0.1:{free_port()}",
                ANOTHER_BROKER: self.other_broker,
            }
        )
        # What a command calls when the README names no address: the service on port 8000.
        self.env["ENGRAM_URL"] = f"http://{service_port}"

    # Blocks.

    def run(self, block: Block) -> None:
        if block.language == "python":
            self._python(block)
        else:
            for line in command_lines(block.code):
                self._line(line, block.where)

    def _python(self, block: Block) -> None:
        source = self._live(block.code, block.where)
        code = compile(
            source, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
        )
        names = self.namespaces.setdefault(block.path, {"__name__": "__readme__"})
        with self._environment():
            try:
                result = eval(code, names)
                if asyncio.iscoroutine(result):
                    asyncio.run(result)
            except Exception as exc:
                raise ReadmeCommandError(
                    f"{block.where}: the Python block failed: {exc!r}"
                ) from exc

    @contextlib.contextmanager
    def _environment(self) -> Iterator[None]:
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(self.env)
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)

    # Command lines.

    def _line(self, parsed: CommandLine, where: str) -> None:
        line = command_lines(self._live(parsed.text, where))[0]
        where = f"{where}: {parsed.text}"
        if line.argv == ["export"]:
            self.env.update(line.assignments)
            return
        env = {**self.env, **line.assignments}
        argv = [self._expand(token, env, where) for token in line.argv]
        if argv[:1] == [ENGRAM]:
            self._engram(argv[1:], env, where)
        elif argv[:1] == ["curl"]:
            self._curl(argv, where)
        elif argv[:1] == ["kcat"] and line.piped is not None:
            piped = [self._expand(token, env, where) for token in line.piped]
            self._kcat(argv, " ".join(piped[1:]), where)
        else:
            raise ReadmeCommandError(
                f"{where}\nnot a command the README test can run: run it here, or mark its "
                "block <!-- readme-test: skip because ... -->"
            )

    def _live(self, text: str, where: str) -> str:
        """``text`` with every example address replaced by its live one, in one pass."""
        examples = sorted(self.addresses, key=len, reverse=True)
        pattern = "|".join(re.escape(example) for example in examples)
        text = re.sub(pattern, lambda found: self.addresses[found.group(0)], text)
        for example in PRINTED_BY_UP:
            if example not in self.addresses and example in text:
                raise ReadmeCommandError(f"{where}: {example} before `engram up` printed it")
        return text

    @staticmethod
    def _expand(token: str, env: dict[str, str], where: str) -> str:
        def value(match: re.Match[str]) -> str:
            name = match.group(1) or match.group(2)
            if name not in env:
                raise ReadmeCommandError(f"{where}: ${name} is not set")
            return env[name]

        return re.sub(r"\$\{([A-Z_][A-Z0-9_]*)\}|\$([A-Z_][A-Z0-9_]*)", value, token)

    def _engram(self, args: list[str], env: dict[str, str], where: str) -> None:
        command = args[0] if args else ""
        argv = [sys.executable, "-m", "streams.cli.main", *args]
        if command in SERVICE_READY:
            self._start(command, argv, env, where)
            return
        if command == "retrieve":
            self._retrieve(argv, env, where)
            return
        out = self._call(argv, env, where)
        if command == "publish":
            landed = json.loads(out)
            if not {"topic", "partition", "offset"} <= landed.keys():
                raise ReadmeCommandError(f"{where}\npublished, but not said where: {out}")
            self.published.setdefault(args[1], []).append(args[2])

    def _call(self, argv: list[str], env: dict[str, str], where: str) -> str:
        done = subprocess.run(
            argv,
            env=env,
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )
        if done.returncode != 0:
            raise ReadmeCommandError(
                f"{where}\nexited {done.returncode}\n{done.stdout}\n{done.stderr}"
            )
        return done.stdout

    def _retrieve(self, argv: list[str], env: dict[str, str], where: str) -> None:
        options = {a.split("=")[0] for a in argv if a.startswith("--")}
        plain = options <= PLAIN_RETRIEVE_OPTIONS
        agent = argv[4]

        def attempt() -> str | None:
            out = self._call(argv, env, where)
            if "--prompt" in options:
                return None if out.strip() else "an empty prompt block"
            return self._missing(agent, json.loads(out)["results"], plain)

        self._until_retrieved(attempt, where)

    def _missing(self, agent: str, results: list[dict[str, Any]], plain: bool) -> str | None:
        """What a retrieval's answer lacks, or None."""
        if not results:
            return "no memories"
        if not plain:
            return None
        contents = {r["content"] for r in results}
        missing = [c for c in self.published.get(agent, []) if c not in contents]
        return f"not the memories published: {missing}" if missing else None

    @staticmethod
    def _until_retrieved(attempt: Callable[[], str | None], where: str) -> None:
        deadline = time.monotonic() + RETRIEVAL_TIMEOUT
        while (problem := attempt()) is not None:
            if time.monotonic() > deadline:
                raise ReadmeCommandError(f"{where}\n{problem} within {RETRIEVAL_TIMEOUT:.0f}s")
            time.sleep(0.3)

    # Long-running services.

    def _start(self, command: str, argv: list[str], env: dict[str, str], where: str) -> None:
        if command == "mcp" and "http" not in argv:
            raise ReadmeCommandError(f"{where}: MCP over stdio needs a client; mark the block")
        service = self._ready(command, argv, env, where)
        if command == "up":
            banner = service.text()
            for example, pattern in PRINTED_BY_UP.items():
                found = re.search(pattern, banner, re.MULTILINE)
                if found is None:
                    raise ReadmeCommandError(f"{where}\nengram up did not print {example}")
                self.addresses[example] = found.group(1)

    def _ready(self, command: str, argv: list[str], env: dict[str, str], where: str) -> Service:
        """The service started and ready, on another free port if the one chosen when the
        session began was taken since (by another test: :data:`PORT_ATTEMPTS`)."""
        attempt = 1
        while True:
            live = self._live_port(command, argv)
            service = self._started(command, live, env, where)
            if service is not None:
                return service
            text = self.services[-1].text()
            taken = "address already in use" in text and "--port" in live
            if not taken or attempt == PORT_ATTEMPTS:
                raise ReadmeCommandError(f"{where}\nnot ready:\n{text}")
            self.services.pop()
            self._move(live[live.index("--port") + 1])
            attempt += 1

    def _started(
        self, command: str, argv: list[str], env: dict[str, str], where: str
    ) -> Service | None:
        """The service once it says it is ready; None if it exited or timed out first."""
        output = self.workdir / f"service-{len(self.services)}.out"
        with output.open("wb") as sink:
            process = subprocess.Popen(
                argv, env=env, cwd=self.workdir, stdout=sink, stderr=subprocess.STDOUT
            )
        service = Service(where, process, output)
        self.services.append(service)
        ready = SERVICE_READY[command]
        deadline = time.monotonic() + READY_TIMEOUT
        while ready not in service.text():
            if process.poll() is not None or time.monotonic() > deadline:
                if process.poll() is None:
                    process.kill()
                    process.wait(10)
                return None
            time.sleep(0.1)
        return service

    def _move(self, port: str) -> None:
        """Every address on ``port`` moved to a new free port, and ENGRAM_URL with them."""
        moved = f"127.0.0.1:{free_port()}"
        for example, live in list(self.addresses.items()):
            if live == f"127.0.0.1:{port}":
                self.addresses[example] = moved
        if self.env.get("ENGRAM_URL") == f"http://127.0.0.1:{port}":
            self.env["ENGRAM_URL"] = f"http://{moved}"

    def _live_port(self, command: str, argv: list[str]) -> list[str]:
        """The service on the free port chosen for the address the README gives it."""
        if "--port" in argv:
            i = argv.index("--port") + 1
            argv = [*argv[:i], self._port_for(int(argv[i])), *argv[i + 1 :]]
        elif command in DEFAULT_PORTS:
            argv = [*argv, "--port", self._port_for(DEFAULT_PORTS[command])]
        return argv

    def _port_for(self, port: int) -> str:
        live = self.addresses.get(f"127.0.0.1:{port}")
        return str(port) if live is None else live.rsplit(":", 1)[1]

    def stop(self) -> None:
        """SIGTERM every service, newest first; each must drain and exit 0."""
        problems = []
        for service in reversed(self.services):
            if service.process.poll() is None:
                service.process.send_signal(signal.SIGTERM)
            try:
                code = service.process.wait(60)
            except subprocess.TimeoutExpired:
                service.process.kill()
                code = service.process.wait(10)
            if code != 0:
                problems.append(f"{service.where}\nexited {code}:\n{service.text()}")
        self.services.clear()
        if problems:
            raise ReadmeCommandError("\n\n".join(problems))

    def kill(self) -> None:
        for service in self.services:
            if service.process.poll() is None:
                service.process.kill()
                service.process.wait(10)

    # curl and kcat.

    def _curl(self, argv: list[str], where: str) -> None:
        url, headers, data = _curl_request(argv[1:], where)
        path = urlsplit(url).path
        agent = path.split("/")[3] if path.startswith("/v1/agents/") else ""

        def attempt() -> str | None:
            if shutil.which("curl") is not None:
                out = self._call([*argv, "--fail-with-body"], self.env, where)
            else:
                method = "POST" if data is not None else "GET"
                answer = httpx.request(method, url, headers=headers, content=data, timeout=60)
                if answer.is_error:
                    raise ReadmeCommandError(f"{where}\n{answer.status_code}: {answer.text}")
                out = answer.text
            body = json.loads(out)
            if not path.endswith("/retrieve"):
                return None
            asked = set(json.loads(data or "{}"))
            return self._missing(agent, body["results"], asked <= PLAIN_RETRIEVAL)

        self._until_retrieved(attempt, where)

    def _kcat(self, argv: list[str], value: str, where: str) -> None:
        flags = {
            flag: argv[i + 1] for i, flag in enumerate(argv[:-1]) if flag in ("-b", "-t", "-k")
        }
        if "-P" not in argv or len(flags) != 3:
            raise ReadmeCommandError(f"{where}: only `kcat -P -b BROKER -t TOPIC -k KEY` runs here")
        # aiokafka places keys by murmur2, as Engram's publisher does; kcat does so only when told.
        settings = [argv[i + 1] for i, flag in enumerate(argv[:-1]) if flag == "-X"]
        if settings != ["topic.partitioner=murmur2_random"]:
            raise ReadmeCommandError(
                f"{where}: a kcat line must say -X topic.partitioner=murmur2_random, or an "
                "agent's records land on another partition than Engram's publisher puts them"
            )

        async def produce() -> None:
            producer = AIOKafkaProducer(bootstrap_servers=flags["-b"], acks="all")
            await producer.start()
            try:
                await producer.send_and_wait(flags["-t"], value.encode(), key=flags["-k"].encode())
            finally:
                await producer.stop()

        asyncio.run(produce())
        event = json.loads(value)
        self.published.setdefault(event["agent_id"], []).append(event["content"])


def _curl_request(args: list[str], where: str) -> tuple[str, dict[str, str], str | None]:
    url, headers, data = None, {}, None
    tokens = iter(args)
    for token in tokens:
        if token == "-s":
            continue
        if token == "-H":
            name, _, value = next(tokens).partition(":")
            headers[name.strip()] = value.strip()
        elif token == "-d":
            data = next(tokens)
        elif token.startswith("-"):
            raise ReadmeCommandError(f"{where}: curl option {token} is not understood here")
        else:
            url = token if "://" in token else f"http://{token}"
    if url is None:
        raise ReadmeCommandError(f"{where}: curl without a URL")
    return url, headers, data
