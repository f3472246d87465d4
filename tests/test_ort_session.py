"""onnxruntime sessions (ondevice.ort_session): every session ondevice opens asks for exact int8 products, and an int8
product that saturates on x86 CPUs without VNNI (u8 x s8 pairs summed in 16 bits) comes out exact."""

from __future__ import annotations

import numpy as np
import pytest

import ondevice
from ondevice.ort_session import EXACT_INT8, cpu_session, session_options

ort = pytest.importorskip("onnxruntime")
KEY, VALUE = EXACT_INT8


def _entry(session) -> str:
    return session.get_session_options().get_session_config_entry(KEY)


def test_options_carry_threads_and_exact_int8():
    opts = session_options(3, inter_op=1, quiet=True)
    assert (opts.intra_op_num_threads, opts.inter_op_num_threads, opts.log_severity_level) == (3, 1, 3)
    assert opts.get_session_config_entry(KEY) == VALUE


def test_shipped_bundle_and_pair_head_sessions_ask_for_exact_int8():
    bundle = ondevice.load()
    assert _entry(bundle.session) == VALUE
    assert _entry(bundle.pair_head().session) == VALUE


def _int8_matmul(x_cols: int, w: np.ndarray):
    """A graph y = x @ W with W int8 (per tensor, symmetric) and x quantized to u8 at run time, as onnxruntime's
    dynamic quantization writes it (DynamicQuantizeLinear -> MatMulInteger)."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
        helper.make_node("MatMulInteger", ["xq", "wq", "xz", "wz"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["xs", "ws"], ["s"]),
        helper.make_node("Mul", ["accf", "s"], ["y"]),
    ]
    inits = [numpy_helper.from_array(w.astype(np.int8), "wq"), numpy_helper.from_array(np.array(0, np.int8), "wz"),
             numpy_helper.from_array(np.array(1.0, np.float32), "ws")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, x_cols])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8).SerializeToString()


def test_int8_product_that_saturates_16_bits_is_exact():
    """Activations near the top of u8 against weights of +-127: each pair of products sums to ~64,000, past a 16-bit
    accumulator. With EXACT_INT8 onnxruntime's result equals the integer reference on every CPU."""
    rng = np.random.default_rng(0)
    k = 64
    w = np.where(rng.random((k, 16)) < 0.5, 127, -127).astype(np.int8)
    x = rng.uniform(0.9, 1.0, (32, k)).astype(np.float32)
    x[:, 0] = -0.01  # a negative value puts the zero point near 0 and the rest near 255
    y = cpu_session(_int8_matmul(k, w)).run(["y"], {"x": x})[0]
    scale = (x.max() - min(0.0, x.min())) / 255.0
    zp = np.clip(np.round(-min(0.0, x.min()) / scale), 0, 255)
    xq = np.clip(np.round(x / scale) + zp, 0, 255)
    want = ((xq - zp) @ w.astype(np.float64)) * scale
    assert xq[:, 1:].min() >= 220  # the case that saturates: u8 near 255 against |w| = 127
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-3)


def test_a_negative_thread_count_is_refused():
    """onnxruntime would take -1 as its default without a word (`pairs score --threads -1` ran)."""
    from ondevice.errors import OndeviceError

    with pytest.raises(OndeviceError, match="threads must be between 0 and"):
        session_options(threads=-1)
