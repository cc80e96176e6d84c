"""The ``ENGRAM_*`` configuration as the commands need it: validated into one readable error,
and the servers it names (broker, Redis, keyring) checked before any work starts."""

from __future__ import annotations

import re
import tempfile
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from pydantic_settings import SettingsError

from streams.cli import deferred
from streams.cli.console import fail, validation_lines
from streams.runtime.logs import configure_logging
from streams.settings import EngramSettings

if TYPE_CHECKING:
    from projections.versions import ProjectionVersion
    from schemas.topics import Topics
    from streams.privacy.keyring import Keyring
    from streams.runtime.node import Endpoints


def load_settings(**overrides: Any) -> EngramSettings:
    """The configuration, with the options given on the command line (None: not given)."""
    try:
        return EngramSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        fail(f"invalid configuration:\n{validation_lines(exc)}")
    except SettingsError as exc:
        fail(unparsable(exc))


def unparsable(exc: SettingsError) -> str:
    """The line for a setting whose value could not even be parsed (``ENGRAM_LIFECYCLE='{bad'``:
    JSON that is not), which pydantic-settings raises before any validation, naming the field
    and not the variable, with the parser's message only as its cause."""
    found = re.search(r'field "(\w+)"', str(exc))
    name = f"ENGRAM_{found.group(1).upper()}" if found else "a setting"
    cause = f": {exc.__cause__}" if exc.__cause__ is not None else ""
    return f"invalid configuration: {name} could not be parsed (JSON is expected){cause}"


def configure(settings: EngramSettings) -> None:
    """Logging, and how this process's Kafka clients connect (PLAINTEXT needs nothing, so a
    command that never reaches Kafka does not load its client for it)."""
    configure_logging(settings.log_level, settings.log_format)
    if settings.kafka_security_protocol != "PLAINTEXT":
        deferred.kafka_clients.use_security(settings)


def bootstrap_of(settings: EngramSettings) -> str:
    """The configured broker, or the one-line error of commands that read or write the log."""
    if not settings.kafka_bootstrap:
        fail("set ENGRAM_KAFKA_BOOTSTRAP (engram up prints it)")
    return settings.kafka_bootstrap


def cluster_endpoints(settings: EngramSettings, *, kafka: bool = True) -> Endpoints:
    """The broker and Redis of a cluster role, or the one-line error naming what is unset."""
    if (kafka and not settings.kafka_bootstrap) or not settings.redis_url:
        needed = "ENGRAM_KAFKA_BOOTSTRAP and ENGRAM_REDIS_URL" if kafka else "ENGRAM_REDIS_URL"
        fail(
            f"cluster mode needs {needed} (and ENGRAM_QDRANT_URL or ENGRAM_QDRANT_PATH); "
            "for a local try, use `engram up`"
        )
    return deferred.node.Endpoints(
        kafka_bootstrap=settings.kafka_bootstrap or "", redis_url=settings.redis_url
    )


def writable_data_dir(settings: EngramSettings) -> None:
    """Fail in one line naming ``ENGRAM_DATA_DIR`` when it cannot be written, before any work:
    a process that keeps files there (Faust's, a Qdrant Edge shard, a keyring directory) would
    otherwise die later with a bare ``PermissionError``, as an image's non-root user does in a
    working directory owned by root."""
    directory = settings.data_dir
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        fail(
            f"ENGRAM_DATA_DIR={directory} ({directory.absolute()}) is not writable "
            f"({exc.strerror or exc}): set ENGRAM_DATA_DIR to a writable directory "
            "(the image uses /var/lib/engram, a mounted volume)"
        )


async def open_keyring(settings: EngramSettings, redis_url: str | None = None) -> Keyring | None:
    """The deployment's keyring (``ENGRAM_KEYRING``; see
    :func:`streams.privacy.keyring.open_keyring`); None when sealing is off."""
    return await deferred.keyring.open_keyring(
        settings.keyring,
        redis_url=redis_url or settings.redis_url,
        namespace=settings.redis_namespace,
        default_dir=settings.keyring_dir(),
    )


async def record_dev_keyring(settings: EngramSettings, redis_url: str) -> str:
    """The dev stack's keyring is a directory that outlives its Redis (the log is restored on
    the next ``engram up``, its keys must be there too); its Redis records where it is, so
    every process pointed at that Redis opens the same one."""
    location = settings.keyring or f"file:{settings.keyring_dir().resolve()}"
    await deferred.keyring.record_location(redis_url, settings.redis_namespace, location)
    versions = deferred.projection_versions.ProjectionVersions.from_url(
        redis_url, settings.redis_namespace, settings.qdrant_collection
    )
    try:
        await versions.mark_embedded(str(settings.data_dir.resolve()))
    finally:
        await versions.close()
    return location


async def active_topics(settings: EngramSettings, redis_url: str) -> Topics:
    """The topics, with the derived log the active projection version continues."""
    return (await active_version(settings, redis_url))[1]


async def active_version(
    settings: EngramSettings, redis_url: str
) -> tuple[ProjectionVersion, Topics]:
    """The active projection version (its Redis namespace holds its agent index), and the
    topics with the derived log it continues."""
    versions = deferred.projection_versions.ProjectionVersions.from_url(
        redis_url, settings.redis_namespace, settings.qdrant_collection
    )
    try:
        active = await versions.active()
        derived = await versions.derived_log(active.name)
    finally:
        await versions.close()
    prefix = None if derived is None else derived.topic_prefix
    return active, deferred.topics.Topics(settings.topic_prefix, prefix)
