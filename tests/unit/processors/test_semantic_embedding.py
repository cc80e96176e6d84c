"""The MiniLM embedder of the optional ``semantic`` extra.

The tests that need the model are skipped, with the install command as the reason, when the
extra is not installed; the test of the error a missing extra gives always runs.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import numpy as np
import pytest

from processors import semantic_embedding
from processors.embedding import HashingEmbedder, embedder_dim, embedder_from_name
from processors.minilm_onnx import onnx_runtime_missing
from processors.semantic_embedding import (
    INSTALL_HINT,
    MiniLMEmbedder,
    SemanticExtraMissingError,
    semantic_extra_missing,
)

needs_extra = pytest.mark.skipif(
    bool(semantic_extra_missing()),
    reason=f"the 'semantic' extra is not installed ({INSTALL_HINT})",
)
needs_onnx = pytest.mark.skipif(
    bool(semantic_extra_missing() or onnx_runtime_missing()),
    reason=f"the 'semantic' extra with ONNX Runtime is not installed ({INSTALL_HINT})",
)

# A question and the memory that answers it share no keyword; the distractor shares none either.
# General, everyday pairs (not the flood demo's texts).
PARAPHRASES = [
    (
        "What pet does she have?",
        "We brought home a beagle puppy from the shelter on Saturday.",
        "The quarterly tax report is due at the end of the month.",
    ),
    (
        "Where did he go on holiday?",
        "I just got back from ten days in Lisbon and Porto.",
        "My landlord finally fixed the leaking kitchen faucet.",
    ),
    (
        "How is her health after the operation?",
        "The surgeon says my knee is healing well and I can walk without crutches.",
        "I bought a secondhand drawing tablet to make comics.",
    ),
    (
        "What does he do for a living?",
        "I've taught algebra at the high school for six years.",
        "It rained every single day of our camping trip.",
    ),
]


@pytest.fixture(
    scope="module",
    params=[
        ("float32", "torch"),
        ("bfloat16", "torch"),
        pytest.param(("float32", "onnx"), marks=needs_onnx),
    ],
    ids=lambda p: "-".join(p),
)
def minilm(request: pytest.FixtureRequest) -> MiniLMEmbedder:
    """Both precisions and both runtimes: ``auto`` takes bfloat16 on a CPU that computes it
    natively and ONNX Runtime for float32 elsewhere, and every promise below holds in each."""
    precision, runtime = request.param
    return MiniLMEmbedder(precision, runtime)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b) / float(np.linalg.norm(a) * np.linalg.norm(b))


@needs_extra
def test_vectors_are_384_float32_of_unit_length(minilm: MiniLMEmbedder) -> None:
    vector = minilm.embed("I started a pottery class on Thursday nights.")
    assert minilm.dim == 384
    assert minilm.id == "minilm-l6-v2-384"
    assert vector.shape == (384,)
    assert vector.dtype == np.float32
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)


@needs_extra
def test_the_same_text_always_gives_the_same_vector(minilm: MiniLMEmbedder) -> None:
    """Vectors are written to the log and compared across replays: a replay must derive the
    same vector the live run did."""
    texts = [
        "My sister got engaged on a hike in Utah.",
        "Short one.",
        "A much longer turn about training for a half marathon, eight miles on long runs.",
    ]
    first = minilm.embed(texts[0])
    assert np.array_equal(first, minilm.embed(texts[0]))
    batch = minilm.embed_many(texts)
    assert batch.shape == (3, 384)
    assert np.array_equal(batch, minilm.embed_many(texts))  # what a reprocess relies on
    # Padded beside other texts, a row moves a little: 1e-7 in float32, 1e-3 in bfloat16.
    atol = 1e-5 if minilm.precision == "float32" else 2e-3
    for row, text in zip(batch, texts, strict=True):
        single = minilm.embed(text)
        np.testing.assert_allclose(row, single, atol=atol)
        assert cosine(row, single) > 1 - 1e-4


@needs_extra
def test_bfloat16_gives_the_vectors_of_float32() -> None:
    """bfloat16 is a speed choice, not another model: a projection built in one precision is
    read with query vectors of the other (a worker and a query service on different CPUs)."""
    texts = [
        "Year 3: A minor flood left 40 cm of water in the basement after the storm",
        "We brought home a beagle puppy from the shelter on Saturday.",
        "How is her health after the operation?",
        "I've taught algebra at the high school for six years, mostly ninth grade, and I coach "
        "the chess club on Thursdays after the last bell.",
    ]
    exact = MiniLMEmbedder("float32", "torch").embed_many(texts)
    fast = MiniLMEmbedder("bfloat16")
    assert fast.precision == "bfloat16"
    rows = fast.embed_many(texts)
    assert rows.dtype == np.float32
    for row, reference in zip(rows, exact, strict=True):
        assert np.linalg.norm(row) == pytest.approx(1.0, abs=1e-5)
        assert cosine(row, reference) > 0.9999
    assert not np.array_equal(rows, exact)  # the switch did change the arithmetic


@needs_extra
def test_auto_takes_bfloat16_only_where_the_cpu_computes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(semantic_embedding, "native_bfloat16", lambda: True)
    assert MiniLMEmbedder().precision == "bfloat16"
    monkeypatch.setattr(semantic_embedding, "native_bfloat16", lambda: False)
    assert MiniLMEmbedder("auto").precision == "float32"
    assert MiniLMEmbedder("bfloat16").precision == "bfloat16"


def test_bfloat16_asked_for_where_it_is_emulated_is_warned_of(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger=semantic_embedding.__name__):
        assert semantic_embedding.resolved_precision("auto", native=False) == "float32"
        assert semantic_embedding.resolved_precision("float32", native=False) == "float32"
        assert semantic_embedding.resolved_precision("auto", native=True) == "bfloat16"
        assert semantic_embedding.resolved_precision("bfloat16", native=True) == "bfloat16"
        assert not caplog.records
        assert semantic_embedding.resolved_precision("bfloat16", native=False) == "bfloat16"
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "MiniLM runs in bfloat16 on a CPU that does not compute it natively"
    ]


@needs_onnx
def test_onnx_runtime_gives_the_vectors_of_torch() -> None:
    """ONNX Runtime is a speed choice, not another model: a worker on one runtime and a query
    service on the other must place the same text at the same point."""
    texts = [
        "Year 3: A minor flood left 40 cm of water in the basement after the storm",
        "We brought home a beagle puppy from the shelter on Saturday.",
        "How is her health after the operation?",
        # Past 256 word pieces, and never the same sentence twice, so a cut elsewhere shows.
        " ".join(f"On day {d} I walked {d * 7 % 13} miles to lock {d % 5}." for d in range(60)),
        "what did I do?",
    ]
    reference = MiniLMEmbedder("float32", "torch").embed_many(texts)
    onnx = MiniLMEmbedder("float32", "onnx")
    assert onnx.runtime == "onnx"
    for batch_size in (32, 2):  # one batch, and batches cut longest first
        rows = onnx.embed_many(texts, batch_size=batch_size)
        assert rows.dtype == np.float32
        for row, expected in zip(rows[:-1], reference[:-1], strict=True):
            assert np.linalg.norm(row) == pytest.approx(1.0, abs=1e-5)
            assert cosine(row, expected) > 1 - 1e-5
        assert not rows[-1].any()  # no keyword: zeros, as on torch
        assert not reference[-1].any()


@needs_onnx
def test_auto_takes_onnx_runtime_for_float32_only() -> None:
    assert MiniLMEmbedder("float32").runtime == "onnx"
    assert MiniLMEmbedder("float32", "torch").runtime == "torch"
    assert MiniLMEmbedder("bfloat16").runtime == "torch"


def test_the_runtime_resolves_without_loading_a_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(semantic_embedding, "onnx_runtime_missing", lambda: [])
    assert semantic_embedding.resolved_runtime("auto", precision="float32") == "onnx"
    assert semantic_embedding.resolved_runtime("auto", precision="bfloat16") == "torch"
    assert semantic_embedding.resolved_runtime("torch", precision="float32") == "torch"
    monkeypatch.setattr(semantic_embedding, "onnx_runtime_missing", lambda: ["onnxruntime"])
    assert semantic_embedding.resolved_runtime("auto", precision="float32") == "torch"
    with pytest.raises(SemanticExtraMissingError) as raised:
        semantic_embedding.resolved_runtime("onnx", precision="float32")
    assert "onnxruntime" in str(raised.value)
    assert INSTALL_HINT in str(raised.value)
    with pytest.raises(ValueError, match="bfloat16 on torch only"):
        semantic_embedding.resolved_runtime("onnx", precision="bfloat16")


@needs_onnx
def test_onnx_asked_by_name_computes_float32_where_auto_would_take_bfloat16(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(semantic_embedding, "native_bfloat16", lambda: True)
    embedder = MiniLMEmbedder(runtime="onnx")
    assert (embedder.precision, embedder.runtime) == ("float32", "onnx")


@needs_onnx
def test_onnx_runtime_that_cannot_be_set_up_falls_back_to_torch_unless_asked_by_name(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An export an older torch cannot make, or a broken install: auto keeps working."""

    def broken(*_args: object, **_kwargs: object) -> None:
        raise TypeError("export() got an unexpected keyword argument 'dynamo'")

    monkeypatch.setattr(semantic_embedding, "OnnxMiniLM", broken)
    with caplog.at_level(logging.WARNING, logger=semantic_embedding.__name__):
        embedder = MiniLMEmbedder("float32")
    assert embedder.runtime == "torch"
    assert embedder.embed("I adopted a cat.").any()
    assert [r.getMessage() for r in caplog.records] == [
        "MiniLM runs on torch: ONNX Runtime could not be set up"
    ]
    with pytest.raises(SemanticExtraMissingError, match="ENGRAM_MINILM_RUNTIME=torch"):
        MiniLMEmbedder("float32", "onnx")


def test_a_runtime_that_cannot_run_the_precision_is_refused_before_anything_loads() -> None:
    with pytest.raises(ValueError, match="bfloat16 on torch only"):
        embedder_from_name("minilm", minilm_precision="bfloat16", minilm_runtime="onnx")
    with pytest.raises(ValueError, match=r"unknown MiniLM runtime 'tvm'.*auto, onnx, torch"):
        embedder_from_name("minilm", minilm_runtime="tvm")


@needs_extra
def test_bfloat16_is_what_the_model_computes_in(minilm: MiniLMEmbedder) -> None:
    """The layers that run under the precision: a Linear's output is bfloat16 in bfloat16 (not
    float16, not float32), float32 in float32; on ONNX Runtime the torch model never runs."""
    import torch

    seen: list[torch.dtype] = []
    linear = next(m for m in minilm._model.modules() if isinstance(m, torch.nn.Linear))
    hook = linear.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    try:
        minilm.embed("I started a pottery class on Thursday nights.")
    finally:
        hook.remove()
    if minilm.runtime == "onnx":
        assert not seen
        return
    expected = torch.bfloat16 if minilm.precision == "bfloat16" else torch.float32
    assert seen, "the hook saw no forward pass"
    assert set(seen) == {expected}


def _cpu_flags() -> set[str] | None:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return None


@needs_extra
def test_native_bfloat16_reads_the_cpu_flags() -> None:
    flags = _cpu_flags()
    if flags is None:
        pytest.skip("no /proc/cpuinfo flags to compare with")
    native = "avx512_bf16" in flags or "amx_bf16" in flags
    assert semantic_embedding.native_bfloat16() is native


@needs_extra
def test_a_probe_that_fails_reads_as_no_native_bfloat16(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    def broken() -> bool:
        raise RuntimeError("probe gone")

    for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.setattr(torch.cpu, name, broken, raising=False)
    assert semantic_embedding.native_bfloat16() is False
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert semantic_embedding.native_bfloat16() is True


def test_an_unknown_precision_is_refused_before_anything_loads() -> None:
    with pytest.raises(
        ValueError, match=r"unknown MiniLM precision 'half'.*auto, bfloat16, float32"
    ):
        embedder_from_name("minilm", minilm_precision="half")


@needs_extra
@pytest.mark.parametrize(("question", "answer", "unrelated"), PARAPHRASES)
def test_a_paraphrase_is_nearer_than_an_unrelated_text(
    minilm: MiniLMEmbedder, question: str, answer: str, unrelated: str
) -> None:
    """What the extra is for: the answer shares no keyword with the question, so the hashing
    embedder cannot tell it from the unrelated text; the model must."""
    q = minilm.embed(question)
    assert cosine(q, minilm.embed(answer)) > cosine(q, minilm.embed(unrelated)) + 0.05
    hashing = HashingEmbedder()
    assert cosine(hashing.embed(question), hashing.embed(answer)) == pytest.approx(0.0, abs=1e-6)


@needs_extra
def test_a_text_without_keywords_embeds_to_zeros(minilm: MiniLMEmbedder) -> None:
    """The retrieval engine reads a zero query vector as "nothing to search by" and lists
    memories instead, as it does with the hashing embedder."""
    assert not minilm.embed("what did I do?").any()
    assert not minilm.embed("").any()
    rows = minilm.embed_many(["", "I adopted a cat."])
    assert not rows[0].any()
    assert rows[1].any()


@needs_extra
def test_the_configuration_name_selects_it() -> None:
    embedder = embedder_from_name("minilm")
    assert isinstance(embedder, MiniLMEmbedder)
    assert embedder.id == "minilm-l6-v2-384"


def test_a_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without torch and sentence-transformers, ``ENGRAM_EMBEDDER=minilm`` must fail at start
    with the command that fixes it, not with an ImportError from deep inside."""
    real = importlib.util.find_spec

    def without_torch(name: str, package: str | None = None) -> object:
        return None if name == "torch" else real(name, package)

    monkeypatch.setattr(semantic_embedding.importlib.util, "find_spec", without_torch)
    with pytest.raises(SemanticExtraMissingError) as raised:
        embedder_from_name("minilm")
    assert "torch" in str(raised.value)
    assert INSTALL_HINT in str(raised.value)


def test_an_embedders_dimensions_are_known_without_making_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Opening a version's stores needs the dimensions only: no model is loaded for them."""

    def no_model(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a model was made")

    monkeypatch.setattr(MiniLMEmbedder, "__init__", no_model)
    assert embedder_dim("minilm") == 384
    assert embedder_dim("minilm-l6-v2-384") == 384
    assert embedder_dim("hashing") == 384
    assert embedder_dim("hashing-64") == 64 == embedder_from_name("hashing-64").dim
    with pytest.raises(ValueError, match="unknown embedder 'bert'"):
        embedder_dim("bert")
