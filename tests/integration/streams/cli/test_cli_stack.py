"""The README's own flow: ``engram up``, publish and retrieve from the command line, SIGTERM
and Ctrl-C (to ``up`` and to ``demo``)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from streams.runtime.devstack.ports import free_port
from tests.integration.streams.embedded_stack import (
    ENGRAM,
    engram_process,
    engram_up,
    output_until,
    signal_as_a_user,
    signalled_once_started,
    stack_processes,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def retrieve_when_ready(port: int, env: dict[str, str], timeout: float) -> list[Any]:
    """H001's memories through ``engram retrieve``, polled until there are some (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        got = subprocess.run(
            [*ENGRAM, "retrieve", "H001", "--year", "3", "--url", f"http://127.0.0.1:{port}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        results: list[Any] = json.loads(got.stdout)["results"]
        if results or time.monotonic() > deadline:
            return results
        time.sleep(0.2)


def publish_a_flood(banner: str, env: dict[str, str]) -> None:
    """H001's Year-1 flood (importance 0.9), published to the broker the banner names."""
    bootstrap = re.search(r"kafka bootstrap\s+(\S+)", banner)
    assert bootstrap, banner
    subprocess.run(
        [*ENGRAM, "publish", "H001", "Year 1: the river rose", "--importance", "0.9"],
        env={**env, "ENGRAM_KAFKA_BOOTSTRAP": bootstrap.group(1)},
        capture_output=True,
        timeout=60,
        check=True,
    )


@pytest.mark.parametrize("workers", [1, 2])
def test_up_publish_retrieve_stop_and_up_again(tmp_path: Path, workers: int) -> None:
    """With 2 workers, episodic memory is written by the projector from the log. A second
    ``engram up`` keeps the memories of the first."""
    port = free_port()
    env = {**os.environ, "ENGRAM_DATA_DIR": str(tmp_path)}
    with engram_up(tmp_path, port, workers) as (up, banner):
        bootstrap = re.search(r"kafka bootstrap\s+(\S+)", banner)
        assert bootstrap, banner
        cli_env = {**env, "ENGRAM_KAFKA_BOOTSTRAP": bootstrap.group(1)}
        published = subprocess.run(
            [
                *ENGRAM,
                "publish",
                "H001",
                "Year 2: A major flood caused $80,000 in damages",
                "--kind",
                "flood.major",
                "--agent-type",
                "household",
                "--year",
                "2",
            ],
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert json.loads(published.stdout)["topic"] == "agent.observations"
        results = retrieve_when_ready(port, env, timeout=30)
        # The banner's variables reach the stack from another shell, its port included.
        exported = re.search(r"^\s*export (.+)$", banner, re.MULTILINE)
        assert exported, banner
        variables = dict(item.split("=", 1) for item in shlex.split(exported.group(1)))
        assert variables["ENGRAM_URL"] == f"http://127.0.0.1:{port}"
        by_banner = subprocess.run(
            [*ENGRAM, "retrieve", "H001", "--year", "3"],
            env={**env, **variables},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        found = json.loads(by_banner.stdout)["results"]
        assert [m["memory_id"] for m in found] == [m["memory_id"] for m in results]
        assert results[0]["importance"] == 0.9
        assert results[0]["store"] == "episodic"
        assert results[0]["score"] == pytest.approx(0.9 * 0.95)
        up.send_signal(signal.SIGTERM)
        assert up.wait(60) == 0
    assert (tmp_path / "archive" / "manifest.json").exists()

    # The broker kept its log in memory; the next run restores it from the archive, and the
    # processors rebuild the projections from it: the memory is still there.
    port = free_port()
    with engram_up(tmp_path, port, workers) as (up, banner):
        assert "restoring the log" in banner
        again = retrieve_when_ready(port, env, timeout=60)
        assert [(m["memory_id"], m["score"]) for m in again] == [
            (m["memory_id"], m["score"]) for m in results
        ]
        up.send_signal(signal.SIGTERM)
        assert up.wait(60) == 0


def test_one_stack_per_data_dir_and_the_demo_beside_it(tmp_path: Path) -> None:
    """A second `engram up` (or `engram demo`) on the data directory of a running one cleared
    that stack's Redis and Qdrant Edge files at its start (the first then failed every flush),
    and archived its own log over the first one's at its end."""
    port = free_port()
    env = {**os.environ, "ENGRAM_DATA_DIR": str(tmp_path)}
    with engram_up(tmp_path, port, 1) as (up, banner):
        publish_a_flood(banner, env)
        results = retrieve_when_ready(port, env, timeout=30)
        assert results
        stack_dir = (tmp_path / "stack").stat()

        second = subprocess.run(
            [*ENGRAM, "up", "--port", str(free_port())],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        said = " ".join(second.stderr.split())
        assert second.returncode == 2, said
        assert f"(pid {up.pid}) is running on {tmp_path}" in said
        assert "Traceback" not in said
        assert (tmp_path / "stack").stat().st_ino == stack_dir.st_ino, "the stack was cleared"

        # The demo keeps a directory of its own under the data directory.
        demo = subprocess.run(
            [*ENGRAM, "demo", "--households", "1", "--years", "1"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert (tmp_path / "demo" / "stack").is_dir()
        assert retrieve_when_ready(port, env, timeout=30) == results
        up.send_signal(signal.SIGTERM)
        assert up.wait(60) == 0


def test_up_killed_takes_its_broker_redis_and_workers_with_it(tmp_path: Path) -> None:
    """They run in sessions of their own, so nothing stopped them when `engram up` itself was
    killed: the broker, redis-server and the workers ran on as orphans, for good."""
    with engram_up(tmp_path, free_port(), 2) as (up, _):
        started = stack_processes(tmp_path)
        assert len(started) >= 5, started  # up, the broker, redis-server, two workers
        up.kill()
        up.wait(10)
        deadline = time.monotonic() + 15
        while (left := stack_processes(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert left == [], [child_process(str(pid)) for pid in left]


def child_process(pid: str) -> str:
    """A child's command line and state, as a failure message shows it (a zombie, a process
    that exited and was not yet waited for, has an empty command line)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].split(" ", 1)[0]
    except OSError:
        return f"{pid}: gone"
    return f"{pid} [{state}]: {command[:100]}"


def test_up_stops_when_a_worker_process_dies(tmp_path: Path) -> None:
    with engram_up(tmp_path, free_port(), 2) as (up, _):
        # Bounded: ``Popen`` returns once the child's exec is past the point of no return, and
        # the new command line is set a moment later (on a loaded machine, after the banner).
        deadline = time.monotonic() + 10
        while True:
            children = [
                child_process(pid)
                for pid in Path(f"/proc/{up.pid}/task/{up.pid}/children").read_text().split()
            ]
            workers = [int(child.split(" ", 1)[0]) for child in children if "worker" in child]
            if len(workers) == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if len(workers) != 2:
            up.send_signal(signal.SIGTERM)
            up.wait(60)
            assert up.stdout is not None
            pytest.fail(f"not two workers: {children}\n{up.stdout.read()[-4000:]}")
        os.kill(workers[0], signal.SIGKILL)
        assert up.wait(60) == 2
        assert up.stdout is not None
        assert re.search(r"worker process \d exited with code -9", up.stdout.read())


@pytest.mark.parametrize(
    ("server", "named", "archived"),
    [("tansu", "the broker", False), ("redis-server", "redis-server", True)],
)
def test_up_stops_when_its_broker_or_redis_dies(
    tmp_path: Path, server: str, named: str, archived: bool
) -> None:
    """It served on without them, logging connection errors, and took a minute and a thread's
    traceback to stop once asked. Now it stops by itself, without a traceback; the log is
    archived while its broker lives, and an archive is left alone once it is gone."""
    with engram_up(tmp_path, free_port(), 1) as (up, _):
        children = Path(f"/proc/{up.pid}/task/{up.pid}/children").read_text().split()
        (pid,) = [int(p) for p in children if server in child_process(p)]
        os.kill(pid, signal.SIGKILL)
        assert up.wait(60) == 2
        assert up.stdout is not None
        output = up.stdout.read()
    assert f"{named} exited with code -9" in output
    assert "Traceback" not in output, output
    assert (tmp_path / "archive" / "manifest.json").exists() is archived, output
    assert ("the broker is gone" in output) is not archived
    assert stack_processes(tmp_path) == []


@pytest.mark.parametrize(
    ("workers", "delay", "sig"),
    [
        (2, 0.0, signal.SIGTERM),
        (1, 1.5, signal.SIGTERM),
        (2, 1.5, signal.SIGTERM),
        (1, 1.5, signal.SIGINT),
        (2, 1.5, signal.SIGINT),
        (2, 1.5, signal.SIGHUP),
    ],
)
def test_a_signal_while_up_starts_stops_the_stack_and_leaves_no_process(
    tmp_path: Path, workers: int, delay: float, sig: signal.Signals
) -> None:
    """Once it is up; SIGTERM's default would end ``engram up`` at once, its broker left
    running. ``delay``: after the broker starts, while the processors start (cancelling them
    there, as Ctrl-C did, left a thread of Faust's running and the process hung). Ctrl-C goes
    to the whole process group: the workers, still importing, printed tracebacks. A terminal
    that closes (SIGHUP) ended ``up`` at once and left the workers, the broker and
    redis-server running."""
    up = ["up", "--port", str(free_port()), "--workers", str(workers)]
    code, output, left = signalled_once_started(up, tmp_path, delay, sig)
    assert code == 0, output
    assert "Engram is up" in output, "it stops once up"
    assert "Traceback" not in output, output
    assert left == []


def test_ctrl_c_twice_while_up_starts_stops_it_at_once_and_leaves_no_process(
    tmp_path: Path,
) -> None:
    """The second does not wait for the start to end: the stack's processes are killed."""
    up = ["up", "--port", str(free_port()), "--workers", "2"]
    code, output, left = signalled_once_started(up, tmp_path, 1.5, signal.SIGINT, times=2)
    assert code == 128 + signal.SIGINT, output
    assert "Ctrl-C again: stopping at once" in output
    assert "Traceback" not in output, output
    assert left == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_the_demo_starts_stops_it_and_leaves_no_process(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """While its processors start: the demo does not begin."""
    code, output, left = signalled_once_started(["demo"], tmp_path, 1.0, sig)
    assert code == 128 + sig, output
    name = "Ctrl-C" if sig == signal.SIGINT else "SIGTERM"
    assert f"stopped by {name} before the demo ended" in output
    assert "recalls before deciding" not in output
    assert "Traceback" not in output, output
    assert left == []


def signalled_during_the_demo(tmp_path: Path, sig: signal.Signals) -> tuple[int, str, list[int]]:
    """``engram demo`` sent ``sig`` once a household recalls: its exit code, its output, and
    the processes of its stack still there once it ended (looked for before
    :func:`engram_process` kills what is left)."""
    with engram_process(["demo"], tmp_path, session=True) as demo:
        started = output_until(demo, "recalls before deciding")
        signal_as_a_user(demo, sig)
        code = demo.wait(120)
        assert demo.stdout is not None
        return code, started + demo.stdout.read(), stack_processes(tmp_path)


def test_sigterm_during_the_demo_stops_it_and_leaves_no_process(tmp_path: Path) -> None:
    code, output, left = signalled_during_the_demo(tmp_path, signal.SIGTERM)
    assert code == 128 + signal.SIGTERM, output
    assert "stopped by SIGTERM before the demo ended" in output
    assert "memories recorded" not in output, "the demo ran on to its end"
    assert "Traceback" not in output
    assert left == []


def test_ctrl_c_during_the_demo_stops_it_without_a_traceback(tmp_path: Path) -> None:
    """The query service's server took SIGINT for itself and stopped serving while the demo
    still called it: the demo failed with a traceback (httpx.ConnectError)."""
    code, output, left = signalled_during_the_demo(tmp_path, signal.SIGINT)
    assert code == 128 + signal.SIGINT, output
    assert "stopped by Ctrl-C before the demo ended" in output
    assert "memories recorded" not in output, "the demo ran on to its end"
    assert "Traceback" not in output, output
    assert left == []


@pytest.mark.parametrize("taken", ["stack", "archive"])
def test_up_refuses_a_data_dir_whose_stack_or_archive_is_not_its_own(
    tmp_path: Path, taken: str
) -> None:
    """`engram up` deletes DATA_DIR/stack at every start and replaces DATA_DIR/archive at
    every stop: a directory of the user's under either name is refused before anything
    starts, and kept."""
    own = tmp_path / taken
    own.mkdir()
    (own / "notes.txt").write_text("keep me")
    env = {**os.environ, "ENGRAM_DATA_DIR": str(tmp_path)}
    up = subprocess.run(
        [*ENGRAM, "up", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert up.returncode == 2, up.stdout + up.stderr
    assert "Traceback" not in up.stderr
    assert re.search(rf"{taken}\s+exists", " ".join(up.stderr.split())), up.stderr
    assert (own / "notes.txt").read_text() == "keep me"
    assert stack_processes(tmp_path) == []


def test_up_archives_its_log_and_stops_its_servers_when_its_processors_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The processors run in `engram up`'s process and exit it at once on a batch they cannot
    process (crash-only). That left the broker and redis-server running, the run's log not
    archived, and the reason in no line of the terminal. Here the batch fails because the
    embedder changed (256 dimensions) under a log derived with 384, in an archive that does not
    name its embedder (written before archives did), so no refusal comes first."""
    port = free_port()
    env = {**os.environ, "ENGRAM_DATA_DIR": str(tmp_path)}
    with engram_up(tmp_path, port, 1) as (up, banner):
        publish_a_flood(banner, env)
        assert retrieve_when_ready(port, env, timeout=30), "the event was never derived"
        up.send_signal(signal.SIGTERM)
        assert up.wait(60) == 0
    manifest = json.loads((tmp_path / "archive" / "manifest.json").read_text())
    assert manifest.pop("notes") == {"live_embedder": "hashing-v1-384"}
    (tmp_path / "archive" / "manifest.json").write_text(json.dumps(manifest))
    first = manifest["exported_at"]

    monkeypatch.setenv("ENGRAM_EMBEDDER", "hashing-256")
    with engram_process(["up", "--port", str(free_port())], tmp_path) as up:
        assert up.wait(120) == 70
        assert up.stdout is not None
        output = up.stdout.read()
    told = " ".join(output.split())
    assert "has shape (384,), but this store holds 256-d vectors" in told, output
    assert "the stack stopped (exit code 70)" in told, output
    assert "Traceback" not in output
    again = json.loads((tmp_path / "archive" / "manifest.json").read_text())["exported_at"]
    assert again > first, "the crashed run's log was not archived"
    assert stack_processes(tmp_path) == []


def refused_up(data_dir: Path) -> str:
    """What ``engram up`` on ``data_dir`` says as it refuses to start (exit code 2)."""
    with engram_process(["up", "--port", str(free_port())], data_dir) as up:
        assert up.wait(120) == 2
        assert up.stdout is not None
        return " ".join(up.stdout.read().split())


def test_up_refuses_another_embedder_than_its_archived_log_was_embedded_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stack's Redis starts empty, so the archive carries the live log's embedder: a
    restart with another (here another dimension; MiniLM after hashing, both 384-d, would
    have mixed two vector spaces without a word) is refused before the processors start."""
    with engram_up(tmp_path, free_port(), 1) as (up, _):
        up.send_signal(signal.SIGTERM)
        assert up.wait(60) == 0
    before = (tmp_path / "archive" / "manifest.json").read_text()

    monkeypatch.setenv("ENGRAM_EMBEDDER", "hashing-256")
    told = refused_up(tmp_path)
    assert "the live derived log is embedded with hashing-v1-384" in told, told
    assert "engram up --fresh" in told
    assert (tmp_path / "archive" / "manifest.json").read_text() == before
    assert stack_processes(tmp_path) == []

    # Under another topic prefix, the run restored topics it never read, and its stop archived
    # its own log over the earlier one.
    monkeypatch.delenv("ENGRAM_EMBEDDER")
    monkeypatch.setenv("ENGRAM_TOPIC_PREFIX", "other.")
    told = refused_up(tmp_path)
    assert "holds the log of topic prefix ''," in told, told
    assert "Start with ENGRAM_TOPIC_PREFIX=''" in told
    assert (tmp_path / "archive" / "manifest.json").read_text() == before
    assert stack_processes(tmp_path) == []


def test_a_version_is_not_activated_in_the_embedded_stack(tmp_path: Path) -> None:
    """Activating a reprocessed version stopped the stack's processors (exit 3, as a
    worker's), and the restarted stack, its Redis empty and its archive holding the live log
    only, never served it: the version was lost with the stack's run. It is refused now, and
    the stack serves on."""
    port = free_port()
    env = {**os.environ, "ENGRAM_DATA_DIR": str(tmp_path)}
    with engram_up(tmp_path, port, 1) as (up, banner):
        bootstrap = re.search(r"kafka bootstrap\s+(\S+)", banner)
        redis = re.search(r"redis\s+(redis://\S+)", banner)
        assert bootstrap, banner
        assert redis, banner
        cli_env = {
            **env,
            "ENGRAM_KAFKA_BOOTSTRAP": bootstrap.group(1),
            "ENGRAM_REDIS_URL": redis.group(1),
        }
        done = subprocess.run(
            [*ENGRAM, "reprocess"], env=cli_env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        refused = subprocess.run(
            [*ENGRAM, "versions", "activate", "v1"],
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert refused.returncode == 2, refused.stdout + refused.stderr
        told = " ".join((refused.stdout + refused.stderr).split())
        assert "this is the embedded stack of `engram up`" in told, told
        assert up.poll() is None, "the stack serves on"
