"""onnxruntime sessions made one way wherever ondevice runs a graph: on the CPU, with exact int8 products."""

from __future__ import annotations

from typing import Any

from ondevice._deps import require

# x86 CPUs without VNNI (AVX2, or AVX-512 without VNNI: Intel before Cascade Lake, AMD before Zen 4) multiply
# onnxruntime's u8 activations by s8 weights with vpmaddubsw, which adds each pair of products into a saturating
# 16-bit sum. On such a CPU (an AMD EPYC Zen 3, 2026-11-28) an int8 bundle's vectors kept a mean cosine of 0.993 to
# fp32 and 94.4% of its code bits, where VNNI CPUs keep > 0.9999 and > 99.5%, and the shipped pair head lost 0.2
# points. This entry makes onnxruntime multiply u8 by u8 on those CPUs (weights shifted at load time), which cannot
# saturate; with VNNI, on ARM and for float graphs it changes nothing. The files stay as they are. Bundles exported
# with 7-bit LSTM weights (the default since 2026-11-28, export/quantize.py) cannot saturate in the first place: with
# them this entry cost nothing on that Zen 3 (shipped bundle 0.88 ms per sentence with it and without), with 8-bit
# weights 1.5x.
EXACT_INT8 = ("session.x64quantprecision", "1")


def session_options(threads: int = 0, inter_op: int = 0, quiet: bool = False, exact_int8: bool = True) -> Any:
    """onnxruntime SessionOptions with `threads` intra-op threads (0: onnxruntime's default) and exact int8 products
    (exact_int8=False: onnxruntime's default kernels, for benchmarks/bundle.py's comparison only)."""
    from ondevice.checks import check_int

    check_int(threads, "threads", 0, 4096)  # a negative count would silently mean onnxruntime's default
    ort = require("onnxruntime", "base")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = inter_op
    if quiet:
        options.log_severity_level = 3  # errors only: warnings would be noise in an app's log
    if exact_int8:
        options.add_session_config_entry(*EXACT_INT8)
    return options


def cpu_session(model: bytes | str, options: Any = None) -> Any:
    """An onnxruntime CPU session over a graph (serialized bytes or a path), with `session_options()` by default."""
    ort = require("onnxruntime", "base")
    return ort.InferenceSession(model, options if options is not None else session_options(),
                                providers=["CPUExecutionProvider"])
