"""Tests left out of the default run for their length, run when an environment variable asks."""

from __future__ import annotations

import os

import pytest

__all__ = ["opt_in"]


def opt_in(variable: str, reason: str) -> pytest.MarkDecorator:
    """Skip unless ``variable`` is ``1``; ``reason`` says what the test costs and how to run it."""
    return pytest.mark.skipif(os.environ.get(variable) != "1", reason=reason)
