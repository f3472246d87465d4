"""The int8 encoder: row-wise int8 embedding table in the graph, then onnxruntime dynamic quantization.

onnxruntime's `quantize_dynamic` turns the LSTM into DynamicQuantizeLSTM (int8 weights per gate row,
activations quantized at run time), a com.microsoft contrib op that ONNX Runtime (desktop and the Mobile full
build) ships. The MatMuls (projection, binarizer) stay float: measured on a 50k-vocab student, quantizing the
projection saves 0.6 MB but drops top-10 Hamming overlap by ~0.04 (activation quantization of the pooled
vector), and the binarizer decides bits directly. Both cost ~1% of the latency, which the LSTM dominates.
The embedding table is quantized by `onnx_graph.rowwise_int8` (one scale per word): onnxruntime's own Gather
quantization uses one scale for the whole table, which costs rare words with small rows most of their precision.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from ondevice.export.onnx_graph import BINARIZER_NODE, build_graph

from ondevice._deps import require
from ondevice.student import StudentConfig

QUANTIZED_OPS = ("LSTM",)


def build_int8_graph(cfg: StudentConfig, state: Mapping[str, np.ndarray], projection: np.ndarray,
                     offset: np.ndarray, range_anchors: bool = True, projection_dtype: str = "float32"):
    """The int8 ModelProto: same inputs and outputs as `build_graph`; embedding and LSTM weights int8.

    With `range_anchors` (the default) a row's result does not depend on the other rows of a call (see
    onnx_graph.ANCHOR_UNITS), so the runtime may batch; without, run one sentence per call.
    """
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
                model, out, op_types_to_quantize=list(QUANTIZED_OPS), per_channel=True,
                weight_type=quantization.QuantType.QInt8, nodes_to_exclude=[BINARIZER_NODE],
            )
        finally:
            logging.disable(previous)
        return onnx.load(str(out))
