"""Settings read from the environment: a value the store cannot honour is refused up front."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from projections.episodic.edge_segments import VECTOR_DATATYPE
from streams.settings import EngramSettings


def test_edge_vectors_default_to_float16_and_accept_float32(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ENGRAM_EDGE_VECTORS", raising=False)
    assert EngramSettings().edge_vectors == VECTOR_DATATYPE == "float16"
    monkeypatch.setenv("ENGRAM_EDGE_VECTORS", "float32")
    assert EngramSettings().edge_vectors == "float32"


def test_unknown_edge_vectors_are_refused_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ENGRAM_EDGE_VECTORS", "float64")
    with pytest.raises(ValidationError, match="edge_vectors"):
        EngramSettings()


def test_minilm_precision_defaults_to_auto_and_refuses_what_it_does_not_know(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ENGRAM_MINILM_PRECISION", raising=False)
    assert EngramSettings().minilm_precision == "auto"
    for precision in ("bfloat16", "float32"):
        monkeypatch.setenv("ENGRAM_MINILM_PRECISION", precision)
        assert EngramSettings().minilm_precision == precision
    monkeypatch.setenv("ENGRAM_MINILM_PRECISION", "half")
    with pytest.raises(ValidationError, match="minilm_precision"):
        EngramSettings()


def test_minilm_runtime_defaults_to_auto_and_refuses_what_it_does_not_know(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ENGRAM_MINILM_RUNTIME", raising=False)
    assert EngramSettings().minilm_runtime == "auto"
    for runtime in ("onnx", "torch"):
        monkeypatch.setenv("ENGRAM_MINILM_RUNTIME", runtime)
        assert EngramSettings().minilm_runtime == runtime
    monkeypatch.setenv("ENGRAM_MINILM_RUNTIME", "tvm")
    with pytest.raises(ValidationError, match="minilm_runtime"):
        EngramSettings()


def test_relevance_has_its_own_candidate_bound_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ENGRAM_RELEVANCE_CANDIDATES", raising=False)
    monkeypatch.delenv("ENGRAM_RETRIEVAL_CANDIDATES", raising=False)
    defaults = EngramSettings()
    assert (defaults.retrieval_candidates, defaults.relevance_candidates) == (100, 50)
    monkeypatch.setenv("ENGRAM_RELEVANCE_CANDIDATES", "100")
    assert EngramSettings().relevance_candidates == 100
    monkeypatch.setenv("ENGRAM_RELEVANCE_CANDIDATES", "0")
    with pytest.raises(ValidationError, match="relevance_candidates"):
        EngramSettings()


def test_a_renamed_variable_is_refused_naming_its_successor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ENGRAM_SNAPSHOT_EVERY_BATCHES", "100")
    with pytest.raises(ValueError, match="set ENGRAM_SNAPSHOT_EVERY_RECORDS instead"):
        EngramSettings()
    monkeypatch.delenv("ENGRAM_SNAPSHOT_EVERY_BATCHES")
    monkeypatch.setenv("ENGRAM_SNAPSHOT_EVERY_RECORDS", "2000")
    assert EngramSettings().snapshot_every_records == 2000


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ENGRAM_TOPIC_PREFIX", "tenant/a."),
        ("ENGRAM_TOPIC_PREFIX", "tenant a."),
        ("ENGRAM_APP_ID", "../engram"),
        ("ENGRAM_APP_ID", ""),
    ],
)
def test_names_that_become_topics_and_paths_are_refused_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    """A prefix with a slash reached the worker as a FileNotFoundError under its data
    directory (Faust's directory carries the topic names) instead of a configuration error."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError, match=variable.removeprefix("ENGRAM_").lower()):
        EngramSettings()


def test_a_prefix_of_kafka_name_characters_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_TOPIC_PREFIX", "tenant-A_1.")
    monkeypatch.setenv("ENGRAM_APP_ID", "engram.tenant-A_1")
    settings = EngramSettings()
    assert (settings.topic_prefix, settings.app_id) == ("tenant-A_1.", "engram.tenant-A_1")


@pytest.mark.parametrize(
    "bootstrap",
    [
        ("kafka-0:9092", "kafka-0:9092"),
        ("kafka-0:9092, kafka-1:9093", "kafka-0:9092,kafka-1:9093"),
        ("10.0.0.7", "10.0.0.7"),
        ("[::1]:9092", "[::1]:9092"),
        ("a:1,", "a:1"),  # aiokafka read the empty entry as localhost:9092
    ],
)
def test_a_broker_list_stands(bootstrap: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    given, kept = bootstrap
    monkeypatch.setenv("ENGRAM_KAFKA_BOOTSTRAP", given)
    assert EngramSettings().kafka_bootstrap == kept


@pytest.mark.parametrize("bootstrap", ["::::", "h:99999", "http://h:9092", "h:x", "a b:1", "::1"])
def test_a_malformed_broker_list_is_refused_naming_the_entry(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiokafka's own parse ended in "invalid literal for int() with base 10: ''"."""
    monkeypatch.setenv("ENGRAM_KAFKA_BOOTSTRAP", bootstrap)
    with pytest.raises(ValidationError, match=r"is not host:port|in brackets"):
        EngramSettings()


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://user:s3cret@redis:6379/0", "the scheme must be one of"),
        ("localhost:6379", "the scheme must be one of"),
        ("redis://:s3cret@redis:abc/0", "its host:port does not parse"),
        ("redis://:s3/cret@redis:6379/0", "must be percent-encoded"),
    ],
)
def test_a_redis_url_of_another_kind_is_refused_without_its_password(
    url: str, why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py raised a traceback for these; the refusal must not print the password."""
    monkeypatch.setenv("ENGRAM_REDIS_URL", url)
    with pytest.raises(ValidationError, match=why) as refused:
        EngramSettings()
    messages = " ".join(e["msg"] for e in refused.value.errors())
    assert "s3cret" not in messages


@pytest.mark.parametrize("url", ["redis://r:6379/0", "rediss://:pw@r:6380/1", "unix:///r.sock"])
def test_a_redis_url_stands(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_REDIS_URL", url)
    assert EngramSettings().redis_url == url


def test_a_variable_exported_empty_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_KAFKA_BOOTSTRAP", "")
    monkeypatch.setenv("ENGRAM_REDIS_URL", " ")
    settings = EngramSettings()
    assert (settings.kafka_bootstrap, settings.redis_url) == (None, None)


def test_a_stop_outlasts_the_session_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop waits for the batch in flight up to the session timeout: a limit below it would
    end a healthy stop with exit 75. Unset, the limit follows the session timeout."""
    monkeypatch.delenv("ENGRAM_STOP_TIMEOUT", raising=False)
    monkeypatch.setenv("ENGRAM_SESSION_TIMEOUT", "30")
    assert EngramSettings().stop_limit == 65
    monkeypatch.setenv("ENGRAM_STOP_TIMEOUT", "50")
    assert EngramSettings().stop_limit == 50
    monkeypatch.setenv("ENGRAM_STOP_TIMEOUT", "20")
    with pytest.raises(ValidationError, match="ENGRAM_STOP_TIMEOUT=20 must exceed"):
        EngramSettings()
