"""all-MiniLM-L6-v2 in float32, run by ONNX Runtime instead of torch.

Why: on two cores of an AVX2 CPU ONNX Runtime spends less CPU a text than torch (on the ingest
workload's texts ~7% less, ~31 word pieces each; on short texts alone ~25%), and a worker
ingested 101-107 events/s with it against 81-99 with torch (``bench_ingest --events 10000
--embedder minilm``, alternated), every row within a cosine of 3e-7 of torch's. The
graph is exported from the torch model already loaded, into memory, when the embedder is made
(~1.5 s): no file is written, so none can go stale when the model package or torch changes.

Only float32: bfloat16 is torch's CPU autocast (:mod:`processors.semantic_embedding`), which is
the faster of the two where the CPU multiplies bfloat16 natively.
"""

from __future__ import annotations

import importlib.util
import io
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

DIM = 384

ONNX_MODULES = {"onnxruntime": "onnxruntime", "onnx": "onnx"}
"""What the ONNX path imports, by distribution: ONNX Runtime, and the ``onnx`` package torch's
exporter writes the graph with."""


def onnx_runtime_missing() -> list[str]:
    """The distributions the ONNX path needs that cannot be imported (empty when all are)."""
    find = importlib.util.find_spec
    return [dist for module, dist in ONNX_MODULES.items() if find(module) is None]


class OnnxMiniLM:
    """The forward pass of a loaded ``SentenceTransformer`` (transformer, mean pooling, L2
    normalisation), the transformer run by ONNX Runtime.

    Texts are cut into batches longest first, as sentence-transformers does, so a batch pads
    little; the same texts in the same call give the same rows.
    """

    def __init__(self, model: Any, threads: int) -> None:
        import onnxruntime
        import torch

        layers = [type(module).__name__ for module in model]
        pooling = model[1] if len(layers) > 1 else None
        mean = getattr(pooling, "pooling_mode", None) == "mean" or getattr(
            pooling, "pooling_mode_mean_tokens", False
        )  # the name since sentence-transformers 6, and before
        if layers != ["Transformer", "Pooling", "Normalize"] or not mean:
            raise ValueError(
                f"the ONNX runtime of MiniLM runs a transformer, mean pooling and "
                f"normalisation; this model has {layers}"
            )
        transformer = model[0]
        self._tokenizer = transformer.tokenizer
        self._max_length = int(model.max_seq_length)
        encoder = transformer.auto_model.eval()
        names = ["input_ids", "attention_mask", "token_type_ids"]
        axes = {name: {0: "batch", 1: "tokens"} for name in [*names, "last_hidden_state"]}
        # Two lengths, so the sample is padded and the trace takes the attention mask's path.
        sample = self._tokenizer(["a", "two words"], padding=True, return_tensors="pt")
        graph = io.BytesIO()
        with warnings.catch_warnings(), torch.inference_mode():
            # The tracing exporter warns of what it cannot trace generally (Python ifs on
            # shapes): the dynamic axes below cover the batch and the sequence length.
            warnings.simplefilter("ignore")
            torch.onnx.export(
                _last_hidden_state(encoder),
                tuple(sample[name] for name in names),
                graph,
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_axes=axes,
                opset_version=17,
                dynamo=False,
            )
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Idle pool threads would otherwise spin for a while after each call, on the cores
        # the worker's event loop and the broker need between batches.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = onnxruntime.InferenceSession(
            graph.getvalue(), options, providers=["CPUExecutionProvider"]
        )
        self._inputs = [i.name for i in self._session.get_inputs()]

    def encode(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        """Unit rows (float32), one per text, in order."""
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            encoded = self._tokenizer(
                [texts[i] for i in chunk],
                padding=True,
                truncation=True,
                max_length=self._max_length,
                return_tensors="np",
            )
            feed = {name: np.asarray(encoded[name], dtype=np.int64) for name in self._inputs}
            (hidden,) = self._session.run(None, feed)
            mask = feed["attention_mask"][..., None].astype(np.float32)
            pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
            norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            out[chunk] = pooled / norms
        return out


def _last_hidden_state(encoder: Any) -> Any:
    """The encoder as a module of positional tensors: the exporter passes inputs by position,
    and the model's own forward takes other arguments in those places."""
    import torch

    class LastHiddenState(torch.nn.Module):  # type: ignore[misc]  # torch is not analysed
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    return LastHiddenState()
