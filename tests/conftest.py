"""Settings every test process shares."""

import os

# pytest-xdist starts its workers with COLUMNS=80 and LINES=24 set; Rich fixes a console's
# width from COLUMNS when the console is built (at import of the CLI), so a test that asks the
# CLI for a wide table would get 80 columns in a worker and not in a plain run. Without them,
# Rich reads the width when it prints, as in a plain run and in a real terminal.
for name in ("COLUMNS", "LINES"):
    os.environ.pop(name, None)

# Registered here, where pytest finds hooks by name: see its module.
from tests.hang_report import pytest_runtest_protocol  # noqa: E402, F401
from tests.traceback_lines import pytest_runtest_makereport  # noqa: E402, F401
