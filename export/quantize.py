"""The int8 encoder: row-wise int8 embedding table in the graph, then onnxruntime dynamic quantization.

onnxruntime's `quantize_dynamic` turns the LSTM into DynamicQuantizeLSTM (int8 weights per gate row,
activations quantized at run time), a com.microsoft contrib op that ONNX Runtime (desktop and the Mobile full
build) ships. The MatMuls (projection, binarizer) stay float: measured on a 50k-vocab student, quantizing the
projection saves 0.6 MB but drops top-10 Hamming overlap by ~0.04 (activation quantization of the pooled
vector), and the binarizer decides bits directly. Both cost ~1% of the latency, which the LSTM dominates.
The embedding table is quantized by `onnx_graph.rowwise_int8` (one scale per word): onnxruntime's own Gather
quantization uses one scale for the whole table, which costs rare words with small rows most of their precision.

LSTM weights are 7-bit by default (|q| <= 64, onnxruntime's `reduce_range`): x86 CPUs without VNNI multiply u8
activations by s8 weights into saturating 16-bit pair sums, which 255 * 64 * 2 = 32,640 cannot overflow. With
8-bit weights ondevice.ort_session's exact setting keeps those products exact by a slower u8 x u8 kernel: on an
AVX2-only AMD EPYC (Zen 3, 2026-11-28) the shipped bundle took 1.35 ms per 20-token sentence that way and 0.88 ms
with its weights re-rounded to 7 bits (`requantize_7bit`), with bit-identical results from the exact and default
sessions. The price is one bit of weight precision (shipped bundle: mean cosine to its fp32 golden vectors 0.99938
instead of 0.99953, STS-B test 78.04 either way).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from ondevice.export.onnx_graph import BINARIZER_NODE, build_graph

from ondevice._deps import require
from ondevice.errors import OndeviceError
from ondevice.student import StudentConfig

QUANTIZED_OPS = ("LSTM",)
WEIGHT_BITS = (7, 8)  # int8 LSTM weights: 7 bits (|q| <= 64, exact and fast on every CPU) or the full 8
SATURATION_FREE_PEAK = 64  # largest |int8 weight| whose u8 x s8 pair sums fit int16 (2 * 255 * 64 <= 32,767)
# DynamicQuantizeLSTM inputs: (weight, scale, zero point) of the input (W) and recurrent (R) weights
_LSTM_QUANTIZED = ((1, 8, 9), (2, 10, 11))


def build_int8_graph(cfg: StudentConfig, state: Mapping[str, np.ndarray], projection: np.ndarray,
                     offset: np.ndarray, range_anchors: bool = True, projection_dtype: str = "float32",
                     weight_bits: int = 7):
    """The int8 ModelProto: same inputs and outputs as `build_graph`; embedding and LSTM weights int8.

    With `range_anchors` (the default) a row's result does not depend on the other rows of a call (see
    onnx_graph.ANCHOR_UNITS), so the runtime may batch; without, run one sentence per call. `weight_bits` 7 keeps
    the LSTM's int8 weights within +-64 (see the module doc), 8 uses the full range.
    """
    if weight_bits not in WEIGHT_BITS:
        raise ValueError(f"weight_bits must be one of {WEIGHT_BITS}, got {weight_bits}")
    onnx = require("onnx", "export")
    quantization = require("onnxruntime.quantization", "export")
    model = build_graph(cfg, state, projection, offset, int8_embedding=True, range_anchors=range_anchors,
                        projection_dtype=projection_dtype)
    with tempfile.TemporaryDirectory(prefix="ondevice-quant-") as tmp:
        out = Path(tmp) / "int8.onnx"
        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)  # its "consider pre-processing" advice is for static, not dynamic, quantization
        try:
            quantization.quantize_dynamic(
                model, out, op_types_to_quantize=list(QUANTIZED_OPS), per_channel=True, reduce_range=weight_bits == 7,
                weight_type=quantization.QuantType.QInt8, nodes_to_exclude=[BINARIZER_NODE],
            )
        finally:
            logging.disable(previous)
        return onnx.load(str(out))


def _lstm_weights(model) -> list[tuple[str, str, str]]:
    """(weight, scale, zero point) initializer names of every DynamicQuantizeLSTM's W and R in `model`."""
    return [(node.input[w], node.input[s], node.input[z]) for node in model.graph.node
            if node.op_type == "DynamicQuantizeLSTM" for w, s, z in _LSTM_QUANTIZED]


def int8_weight_peak(model) -> int:
    """The largest |q - zero point| of the quantized LSTM weights of a ModelProto (0 without any)."""
    onnx = require("onnx", "export")
    inits = {t.name: t for t in model.graph.initializer}
    peak = 0
    for w, _, z in _lstm_weights(model):
        q = onnx.numpy_helper.to_array(inits[w]).astype(np.int32)
        zero = onnx.numpy_helper.to_array(inits[z]).astype(np.int32)
        peak = max(peak, int(np.abs(q - zero[:, None, :]).max()))
    return peak


def requantize_7bit(model) -> int:
    """Re-round the int8 LSTM weights of a ModelProto in place to 7 bits where they exceed +-64 (per output channel,
    symmetric): q' = round(q * 64 / peak), scale' = scale * peak / 64. Returns the number of channels changed.

    For int8 bundles exported with 8-bit weights: their float weights are not in the bundle, so the new weights are
    the old int8 ones re-rounded, within one 7-bit step of the float originals.
    """
    onnx = require("onnx", "export")
    inits = {t.name: t for t in model.graph.initializer}
    changed = 0
    for w, s, z in _lstm_weights(model):
        q = onnx.numpy_helper.to_array(inits[w]).astype(np.int64)  # (dirs, in, 4H): one channel per (dir, gate row)
        if onnx.numpy_helper.to_array(inits[z]).any():
            raise OndeviceError(f"{w} has nonzero int8 zero points (asymmetric weights), which ondevice export never "
                                "writes; export the bundle again from its student")
        peak = np.abs(q).max(axis=1)  # (dirs, 4H)
        factor = np.where(peak > SATURATION_FREE_PEAK, SATURATION_FREE_PEAK / np.maximum(peak, 1), 1.0)
        if (factor == 1.0).all():
            continue
        scale = onnx.numpy_helper.to_array(inits[s]).astype(np.float64)
        inits[w].CopyFrom(onnx.numpy_helper.from_array(np.rint(q * factor[:, None, :]).astype(np.int8), w))
        inits[s].CopyFrom(onnx.numpy_helper.from_array((scale / factor).astype(np.float32), s))
        changed += int((factor != 1.0).sum())
    return changed
