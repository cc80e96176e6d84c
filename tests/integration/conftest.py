"""Real servers for integration tests, started once per session.

The fixtures live in ``tests/integration/fixtures/`` (one module per server). Set
``ENGRAM_TEST_BACKEND=containers`` to run the same tests on testcontainers where Docker exists;
the default, ``local``, starts the real servers from binaries on this machine.
"""

pytest_plugins = [
    "tests.integration.fixtures.redis_server",
    "tests.integration.fixtures.qdrant",
    "tests.integration.fixtures.broker",
]
