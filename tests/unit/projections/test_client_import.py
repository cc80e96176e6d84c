"""The Python client loads what reading the service needs, not the service's own framework."""

from __future__ import annotations

import subprocess
import sys


def test_the_client_loads_without_the_server_s_framework() -> None:
    """The surprise answer lived beside its route, so importing the client loaded FastAPI."""
    probe = "import sys, projections.service.client; print('fastapi' in sys.modules)"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert loaded.stdout.strip() == "False", loaded.stderr
