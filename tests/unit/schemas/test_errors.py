"""One root for Engram's exceptions, found by walking every module rather than by a list, so a
new exception class that forgets :class:`EngramError` fails here."""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

from schemas.errors import BackendUnavailableError, EngramError

PACKAGES = ("schemas", "processors", "projections", "streams")


def every_module() -> list[ModuleType]:
    found = []
    for name in PACKAGES:
        package = importlib.import_module(name)
        found.append(package)
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            found.append(importlib.import_module(info.name))
    return found


@functools.cache
def defined_exceptions() -> tuple[type[BaseException], ...]:
    """Every exception class defined (not merely imported) at the top of a module."""
    classes = {
        obj
        for module in every_module()
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and issubclass(obj, BaseException)
        and obj.__module__ == module.__name__
    }
    return tuple(sorted(classes, key=lambda c: f"{c.__module__}.{c.__qualname__}"))


def test_the_walk_finds_the_exceptions_of_every_package() -> None:
    """Guards the walk itself: were it to find nothing, the test below would prove nothing."""
    modules = {c.__module__.split(".")[0] for c in defined_exceptions()}
    assert modules == set(PACKAGES)
    assert len(defined_exceptions()) >= 20


@pytest.mark.parametrize("error", defined_exceptions(), ids=lambda c: c.__qualname__)
def test_every_exception_derives_from_engram_error(error: type[BaseException]) -> None:
    assert issubclass(error, EngramError), (
        f"{error.__module__}.{error.__qualname__} must derive from schemas.errors.EngramError "
        "(keep a builtin base beside it if callers catch one)"
    )


def by_name(name: str) -> type[BaseException]:
    """Found by name, wherever it is defined: the test holds when a class moves."""
    found = [c for c in defined_exceptions() if c.__name__ == name]
    assert len(found) == 1, f"{name}: {found}"
    return found[0]


@pytest.mark.parametrize(
    ("name", "builtin"),
    [
        ("DecodeError", ValueError),
        ("SealError", ValueError),
        ("UnknownTopicError", ValueError),
        ("PositionsNotAppliedError", TimeoutError),
        ("ForgetTimeoutError", TimeoutError),
        ("SemanticExtraMissingError", RuntimeError),
        ("QueryError", RuntimeError),
        ("WaitTimeoutError", RuntimeError),
        ("ArchiveError", RuntimeError),
        ("TopicLayoutError", RuntimeError),
        ("WrongConfigurationError", RuntimeError),
        ("SwitchError", RuntimeError),
        ("ReprocessError", RuntimeError),
        ("BrokerStartError", RuntimeError),
        ("RedisServerError", RuntimeError),
    ],
)
def test_a_builtin_base_is_kept_beside_the_root(name: str, builtin: type[BaseException]) -> None:
    """An ``except ValueError`` (or ``TimeoutError``, ``RuntimeError``) around a call still
    catches what it caught."""
    error = by_name(name)
    assert issubclass(error, builtin)
    assert issubclass(error, EngramError)


@pytest.mark.parametrize(
    "name",
    ["ProjectionError", "LogUnavailableError", "KeyringError", "PublishError", "DeliveryError"],
)
def test_a_backend_failure_is_a_backend_unavailable_error(name: str) -> None:
    """One ``except BackendUnavailableError`` catches every backend failure, and the
    ``except RuntimeError`` that caught them still does."""
    error = by_name(name)
    assert issubclass(error, BackendUnavailableError)
    assert issubclass(error, RuntimeError)
