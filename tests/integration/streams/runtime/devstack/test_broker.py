import logging

import pytest

from streams.runtime.devstack.broker import TansuBroker

pytestmark = pytest.mark.integration


def test_a_stopped_broker_leaves_no_output_file_behind() -> None:
    broker = TansuBroker().start()
    path = broker.log_path
    assert path is not None
    assert path.exists()
    assert "tansu" in broker.log_tail().lower()
    broker.stop()
    assert broker.log_path is None
    assert not path.exists()


def test_a_killed_broker_leaves_no_output_file_behind() -> None:
    broker = TansuBroker().start()
    path = broker.log_path
    assert path is not None
    broker.kill()
    assert not path.exists()


def test_the_output_of_a_broker_that_exited_by_itself_is_kept_and_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker = TansuBroker().start()
    path = broker.log_path
    assert path is not None
    assert broker.process is not None
    broker.process.kill()
    broker.process.wait(5)
    try:
        with caplog.at_level(logging.WARNING, logger="engram.devstack"):
            broker.stop()
        assert path.exists()
        assert [r.getMessage() for r in caplog.records] == [
            f"the Tansu broker had exited by itself with code -9; its output is kept in {path}"
        ]
    finally:
        path.unlink(missing_ok=True)
