"""The teacher as an ONNX Runtime graph (fp32 or dynamic int8): the same pooled vectors, faster on a CPU.

The graph is exported once per teacher content (weights + tokenizer + config hash), pooling and normalization,
checked against torch before it is kept, and cached in `cache_dir()/teacher_onnx/`. fp32 vectors match torch
to 1e-4 cosine, so they share the teacher-vector cache key; int8 vectors are another teacher and get their own.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ondevice._deps import require
from ondevice.errors import OndeviceError
from ondevice.io import atomic_path, cache_dir, write_json
from ondevice.ort_session import cpu_session, session_options

if TYPE_CHECKING:
    from ondevice.teacher import Teacher

OPSET = 17
PARITY_MIN_COSINE = 0.9999  # fp32 export must agree with torch this closely on the check sentences
_CHECK = ["A man is playing a guitar.", "The quick brown fox jumps over the lazy dog near the river bank.",
          "x", "Ondevice turns a big sentence encoder into a tiny one that runs on a phone, and searches codes."]


def graph_dir(teacher: Teacher) -> Path:
    """Cache folder of this teacher's exported graphs (by content, pooling and normalization)."""
    info = teacher.info
    return cache_dir() / "teacher_onnx" / f"{info.weights_sha256[:24]}-{info.pooling}-{int(info.normalize)}"


def _wrapper(teacher: Teacher):
    """torch module: tokenizer tensors -> pooled (and normalized) sentence vectors, for export."""
    torch = require("torch", "train")
    model = teacher.model

    class Pooled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
            if token_type_ids is not None:
                kwargs["token_type_ids"] = token_type_ids
            return teacher.pool(self.model(**kwargs).last_hidden_state, attention_mask)

    return Pooled().eval()


def export_fp32(teacher: Teacher, path: Path) -> None:
    """Export the pooled teacher to `path` (dynamic batch and length) with the legacy TorchScript exporter."""
    torch = require("torch", "train")
    names = teacher.input_names
    enc = teacher.tokenizer(_CHECK[:2], padding=True, return_tensors="pt")
    args = tuple(enc[n] for n in names)
    axes = {n: {0: "batch", 1: "tokens"} for n in names} | {"sentence_embedding": {0: "batch"}}
    # the tracer warns about every Python-level branch of the Hugging Face model (constant for an export with dynamic
    # axes); the export is checked against torch to 1e-4 cosine afterwards, which is the warning that matters
    with atomic_path(path) as tmp, torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)  # TracerWarning is a UserWarning
        torch.onnx.export(_wrapper(teacher), args, str(tmp), input_names=list(names),
                          output_names=["sentence_embedding"], dynamic_axes=axes, opset_version=OPSET,
                          do_constant_folding=True, dynamo=False)


def quantize_int8(src: Path, dst: Path) -> None:
    """Dynamic int8 quantization of the fp32 graph's MatMuls (weights int8, activations quantized per call)."""
    q = require("onnxruntime.quantization", "train")
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # its advice to pre-process is for static quantization; the int8 vectors are measured
    try:
        with atomic_path(dst) as tmp:
            q.quantize_dynamic(str(src), str(tmp), weight_type=q.QuantType.QInt8, per_channel=True)
    finally:
        root.setLevel(level)


class OnnxSession:
    """An onnxruntime session over one exported teacher graph; `run` takes the tokenizer's numpy tensors."""

    def __init__(self, path: Path | bytes, input_names: tuple[str, ...], threads: int = 0):
        ort = require("onnxruntime", "base")
        opts = session_options(threads or (os.cpu_count() or 1), inter_op=1)
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            # bytes: a graph shipped to a Ray actor through the object store (no teacher files on that node)
            self.session = cpu_session(path if isinstance(path, bytes) else str(path), opts)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own, unexported error types
            if isinstance(path, bytes):
                raise OndeviceError(f"cannot load the shipped teacher graph: {str(exc).splitlines()[0]}") from None
            raise OndeviceError(f"cannot load teacher graph {path}: {str(exc).splitlines()[0]}; delete {path.parent} to re-export") from None
        self.input_names = input_names

    def run(self, enc) -> np.ndarray:
        feed = {n: np.asarray(enc[n], dtype=np.int64) for n in self.input_names}
        return self.session.run(["sentence_embedding"], feed)[0]


def load_session(teacher: Teacher, precision: str, threads: int = 0) -> OnnxSession:
    """The cached graph for `teacher` at `precision` ('fp32' or 'int8'), exported and checked on first use."""
    return OnnxSession(graph_path(teacher, precision, threads), teacher.input_names, threads)


def graph_path(teacher: Teacher, precision: str, threads: int = 0) -> Path:
    """Path of the cached graph for `teacher` at `precision`, exported, checked and quantized on first use."""
    folder = graph_dir(teacher)
    fp32, int8 = folder / "teacher.onnx", folder / "teacher.int8.onnx"
    if not fp32.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        export_fp32(teacher, fp32)
        check = OnnxSession(fp32, teacher.input_names, threads)
        cos = _agreement(teacher, check)
        if cos < PARITY_MIN_COSINE:
            fp32.unlink()
            raise OndeviceError(f"ONNX export of teacher {teacher.info.path} disagrees with torch (cosine {cos:.6f}); "
                                "use --teacher-backend torch")
        write_json(folder / "export.json", {"teacher": teacher.info, "opset": OPSET, "parity_min_cosine": cos})
    if precision == "fp32":
        return fp32
    if precision != "int8":
        raise OndeviceError(f"unknown teacher precision {precision!r}; choose fp32 or int8")
    if not int8.is_file():
        quantize_int8(fp32, int8)
    return int8


def _agreement(teacher: Teacher, session: OnnxSession) -> float:
    """Smallest cosine between torch and ONNX vectors on the check sentences."""
    enc = teacher.tokenizer(_CHECK, padding=True, truncation=True, max_length=teacher.info.max_length, return_tensors="np")
    a = session.run(enc)
    b = teacher.encode_torch(_CHECK)
    num = (a * b).sum(1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-12
    return float((num / den).min())
