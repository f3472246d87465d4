"""onnxruntime sessions made one way wherever ondevice runs a graph: on the CPU, with exact int8 products."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from ondevice._deps import require
from ondevice.checks import check_int

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


# Graphs that come from elsewhere (a bundle's encoder and heads) run on one shared onnxruntime memory arena of at
# most this many bytes, so a graph that allocates without bound (ConstantOfShape of a size it computes from its
# input, 10^9 times the batch) fails with an allocation error instead of taking the machine's memory. An encoder of
# this project needs tens of MB per batch of 64 sentences; the cap also holds its weights (a parsed bundle file is
# at most 1 GB).
MAX_GRAPH_MEMORY = 4 << 30
_CAPPED: list[bool] = []  # whether the capped arena is registered (once per process)
_CAP_LOCK = threading.Lock()


def _register_capped_arena(ort: Any) -> bool:
    """Register the process's capped CPU arena for sessions that ask for it; False where onnxruntime cannot."""
    with _CAP_LOCK:
        if not _CAPPED:
            try:
                info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
                ort.create_and_register_allocator(info, ort.OrtArenaCfg(MAX_GRAPH_MEMORY, -1, -1, -1))
                _CAPPED.append(True)
            except Exception:  # noqa: BLE001 - an onnxruntime without shared allocators: sessions run uncapped
                _CAPPED.append(False)
        return _CAPPED[0]


def is_memory_error(exc: BaseException) -> bool:
    """Whether an onnxruntime error is the capped arena refusing an allocation."""
    text = str(exc)
    return "Failed to allocate memory" in text or "is smaller than requested bytes" in text


def session_options(threads: int = 0, inter_op: int = 0, quiet: bool = False, exact_int8: bool = True,
                    capped: bool = False) -> Any:
    """onnxruntime SessionOptions with `threads` intra-op threads (0: onnxruntime's default) and exact int8 products
    (exact_int8=False: onnxruntime's default kernels, for benchmarks/bundle.py's comparison only); `capped` runs the
    session on the shared arena of at most MAX_GRAPH_MEMORY bytes (for graphs made elsewhere)."""
    check_int(threads, "threads", 0, 4096)  # a negative count would silently mean onnxruntime's default
    ort = require("onnxruntime", "base")
    options = ort.SessionOptions()
    if capped and _register_capped_arena(ort):
        options.add_session_config_entry("session.use_env_allocators", "1")
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


@contextlib.contextmanager
def run_options_with_limit(limit_s: float | None) -> Iterator[Any]:
    """onnxruntime RunOptions (None without a limit) that a timer tells to terminate the run after `limit_s` seconds;
    onnxruntime stops between two operators and raises an error that names the termination."""
    if limit_s is None:
        yield None
        return
    ort = require("onnxruntime", "base")
    options = ort.RunOptions()

    def stop() -> None:
        options.terminate = True

    timer = threading.Timer(limit_s, stop)
    timer.daemon = True
    timer.start()
    try:
        yield options
    finally:
        timer.cancel()
