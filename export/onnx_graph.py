"""The whole student + binarizer as one ONNX graph: ids, lengths -> float embedding, packed binary code.

Built by hand with `onnx.helper` (no tracing) so every op is a plain, widely supported one: Gather, Transpose,
LSTM (its `sequence_lens` input handles right padding in both directions), ReduceSum/masked ReduceMax pooling,
MatMul, Tanh, Add, Greater, and bit packing as a MatMul by [1, 2, ..., 128] (bit order "little").
Opset 17 (ONNX Runtime >= 1.11, including ONNX Runtime Mobile's full build) and IR version 8.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ondevice._deps import require
from ondevice.bits import code_bytes
from ondevice.errors import OndeviceError
from ondevice.student import StudentConfig

OPSET = 17
IR_VERSION = 8
PRODUCER = "ondevice"
# Node names the int8 pass keeps in float: the binarizer's threshold decides bits, so it stays exact.
BINARIZER_NODE = "binarizer_matmul"


def lstm_weights(state: Mapping[str, np.ndarray], hidden: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """torch BiLSTM tensors -> ONNX LSTM W (2, 4H, E), R (2, 4H, H), B (2, 8H).

    torch stacks gates as (input, forget, cell, output); ONNX as (input, output, forget, cell).
    """
    order = np.concatenate([np.arange(g * hidden, (g + 1) * hidden) for g in (0, 3, 1, 2)])
    W, R, B = [], [], []
    for suffix in ("l0", "l0_reverse"):
        W.append(state[f"lstm.weight_ih_{suffix}"][order])
        R.append(state[f"lstm.weight_hh_{suffix}"][order])
        B.append(np.concatenate([state[f"lstm.bias_ih_{suffix}"][order], state[f"lstm.bias_hh_{suffix}"][order]]))
    return (np.stack(W).astype(np.float32), np.stack(R).astype(np.float32), np.stack(B).astype(np.float32))


def rowwise_int8(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-row int8 quantization: (q int8 (V, E), scale float32 (V, 1)) with table ~= q * scale."""
    peak = np.abs(table).max(axis=1, keepdims=True).astype(np.float32)
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(table / scale), -127, 127).astype(np.int8)
    return q, scale


# Range anchors (int8 graph): onnxruntime's DynamicQuantizeLSTM quantizes its input and, at every step, the hidden
# state with one scale per call, from the min and max over all rows, so a sentence batched with others got other
# bits. Two constant input features (the embedding table's largest and smallest value) and two extra hidden units
# held at +1 and -1 (forget and output gates saturated, initial cell +-ANCHOR_CELL, no weights in or out) put
# those extremes into every row: each row then pins the scales by itself, so its result no longer depends on its
# neighbours and rows can share a call. Real units see only zero weights from the anchors (exact in int8 too).
ANCHOR_UNITS = 2
ANCHOR_GATE = 30.0  # sigmoid(30) == 1.0 in float32: the anchors' forget and output gates are fully open
ANCHOR_CELL = 20.0  # tanh(20) == 1.0 in float32


def anchored_lstm_weights(W: np.ndarray, R: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ONNX LSTM W, R, B widened by ANCHOR_UNITS hidden units (gate rows) and input features (zero weights)."""
    dirs, four_h, E = W.shape
    H, A = four_h // 4, ANCHOR_UNITS
    W2 = np.zeros((dirs, 4 * (H + A), E + A), np.float32)
    R2 = np.zeros((dirs, 4 * (H + A), H + A), np.float32)
    B2 = np.zeros((dirs, 8 * (H + A)), np.float32)
    for g in range(4):  # gates i, o, f, c: each block gets A anchor rows after its H real rows
        rows, src = slice(g * (H + A), g * (H + A) + H), slice(g * H, (g + 1) * H)
        W2[:, rows, :E], R2[:, rows, :H] = W[:, src], R[:, src]
        B2[:, rows], B2[:, 4 * (H + A) + rows.start : 4 * (H + A) + rows.stop] = B[:, src], B[:, 4 * H + src.start : 4 * H + src.stop]
    for g in (1, 2):  # output and forget gates of the anchor units open: c stays at its initial value, h = tanh(c)
        B2[:, g * (H + A) + H : (g + 1) * (H + A)] = ANCHOR_GATE
    return W2, R2, B2


def build_graph(cfg: StudentConfig, state: Mapping[str, np.ndarray], projection: np.ndarray, offset: np.ndarray,
                int8_embedding: bool = False, range_anchors: bool = False, projection_dtype: str = "float32"):
    """The ONNX ModelProto of student `cfg` with weights `state` and binarizer (projection, offset).

    `range_anchors` widens the LSTM so int8 quantization is per row (see ANCHOR_UNITS); `projection_dtype`
    "float16" stores the binarizer projection in half precision (half the bytes) and casts it to float in the graph.
    """
    onnx = require("onnx", "export")
    helper, TP = onnx.helper, onnx.TensorProto
    H, bits = cfg.hidden_size, int(projection.shape[1])
    nbytes = code_bytes(bits)
    if projection.shape[0] != cfg.output_dim or offset.shape != (bits,):
        raise OndeviceError(
            f"binarizer takes {projection.shape[0]}-d vectors with {offset.shape} offsets, but the student gives "
            f"{cfg.output_dim}-d vectors; fit the binarizer on this student's embeddings"
        )
    inits: list = []
    nodes: list = []

    def const(name: str, value) -> str:
        inits.append(onnx.numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op: str, inputs: list[str], name: str, n_out: int = 1, **attrs) -> list[str]:
        outs = [name] if n_out == 1 else [f"{name}_{i}" for i in range(n_out)]
        nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs

    # embedding lookup on time-major ids: transposing the (batch, tokens) ids is cheaper than the embeddings
    (ids_t,) = node("Transpose", ["ids"], "ids_time_major", perm=[1, 0])
    table = np.asarray(state["embedding.weight"], dtype=np.float32)
    if int8_embedding:  # per-row scales keep rare-word rows as precise as frequent ones
        q, scale = rowwise_int8(table)
        (qe,) = node("Gather", [const("embedding_int8", q), ids_t], "embedding_lookup_q")
        (s,) = node("Gather", [const("embedding_scale", scale), ids_t], "embedding_scale_lookup")
        (qf,) = node("Cast", [qe], "embedding_dequant_cast", to=TP.FLOAT)
        (x,) = node("Mul", [qf, s], "embedding_lookup")
    else:
        (x,) = node("Gather", [const("embedding_weight", table), ids_t], "embedding_lookup")
    (seq,) = node("Cast", ["lengths"], "lengths_int32", to=TP.INT32)
    W, R, B = lstm_weights(state, H)
    if range_anchors:
        values = q.astype(np.float32) * scale if int8_embedding else table  # what the lookup can produce
        for name, value in (("anchor_high", values.max()), ("anchor_low", values.min())):
            (x,) = node("Pad", [x, const(f"{name}_pads", np.array([0, 0, 0, 0, 0, 1], np.int64)),
                                const(f"{name}_value", np.array(value, np.float32))], f"{name}_feature", mode="constant")
        W, R, B = anchored_lstm_weights(W, R, B)
        HA = H + ANCHOR_UNITS
        state0 = np.zeros((2, 1, HA), np.float32)
        cell0 = state0.copy()
        state0[:, :, H:], cell0[:, :, H:] = [1.0, -1.0], [ANCHOR_CELL, -ANCHOR_CELL]
        (ishape,) = node("Shape", ["ids"], "ids_shape_batch")
        (batch,) = node("Slice", [ishape, const("zero_1d", np.array([0], np.int64)), const("one_1d", np.array([1], np.int64))],
                        "batch_size")
        (sshape,) = node("Concat", [const("two_1d", np.array([2], np.int64)), batch, const("ha_1d", np.array([HA], np.int64))],
                         "state_shape", axis=0)
        (h0,) = node("Expand", [const("anchor_h0", state0), sshape], "initial_h")
        (c0,) = node("Expand", [const("anchor_c0", cell0), sshape], "initial_c")
        Ya, Y_ha = node("LSTM", [x, const("lstm_W", W), const("lstm_R", R), const("lstm_B", B), seq, h0, c0], "bilstm",
                        n_out=2, direction="bidirectional", hidden_size=HA)
        # the real units only, as the graph without anchors has them
        (Y,) = node("Slice", [Ya, const("zero_1d_y", np.array([0], np.int64)), const("h_1d", np.array([H], np.int64)),
                              const("axis3_1d", np.array([3], np.int64))], "bilstm_real_units")
        (Y_h,) = node("Slice", [Y_ha, const("zero_1d_h", np.array([0], np.int64)), const("h_1d_h", np.array([H], np.int64)),
                                const("axis2_1d", np.array([2], np.int64))], "bilstm_last_real_units")
    else:
        Y, Y_h = node("LSTM", [x, const("lstm_W", W), const("lstm_R", R), const("lstm_B", B), seq], "bilstm", n_out=2,
                      direction="bidirectional", hidden_size=H)

    (len2,) = node("Unsqueeze", ["lengths", const("axes_1", np.array([1], np.int64))], "lengths_col")
    pooled_parts = []
    if cfg.pooling in ("mean", "meanmax"):
        # ONNX Runtime's LSTM writes zeros past each row's length (tests check padded batches against torch), so
        # the mean is a plain sum over time: no mask, and no transpose of the whole output.
        (total,) = node("ReduceSum", [Y, const("axes_0_sum", np.array([0], np.int64))], "sum_pool", keepdims=0)
        (tb,) = node("Transpose", [total], "sum_batch_major", perm=[1, 0, 2])  # (2, B, H) -> (B, 2, H)
        (flat,) = node("Reshape", [tb, const("shape_b_any", np.array([0, -1], np.int64))], "sum_flat")
        (lf,) = node("Cast", [len2], "lengths_float", to=TP.FLOAT)
        pooled_parts.append(node("Div", [flat, lf], "mean_pool")[0])
    if cfg.pooling in ("max", "meanmax"):
        # max over the first `length` steps: Y (T, 2, B, H) -> (B, T, 2H) as [forward, backward] like torch
        (yt,) = node("Transpose", [Y], "batch_major", perm=[2, 0, 1, 3])
        (out,) = node("Reshape", [yt, const("shape_bt_any", np.array([0, 0, -1], np.int64))], "lstm_out")
        (shape,) = node("Shape", ["ids"], "ids_shape")
        (t,) = node("Gather", [shape, const("axis_1", np.array(1, np.int64))], "num_tokens", axis=0)
        (pos,) = node("Range", [const("zero_i64", np.array(0, np.int64)), t, const("one_i64", np.array(1, np.int64))],
                      "positions")
        (pos2,) = node("Unsqueeze", [pos, const("axes_0", np.array([0], np.int64))], "positions_row")
        (mask,) = node("Less", [pos2, len2], "mask")
        (mask3,) = node("Unsqueeze", [mask, const("axes_2", np.array([2], np.int64))], "mask3")
        (filled,) = node("Where", [mask3, out, const("neg_inf", np.array(-np.inf, np.float32))], "masked_fill")
        pooled_parts.append(node("ReduceMax", [filled], "max_pool", axes=[1], keepdims=0)[0])
    if cfg.pooling == "last":
        (ht,) = node("Transpose", [Y_h], "last_batch_major", perm=[1, 0, 2])
        pooled_parts.append(node("Reshape", [ht, const("shape_b_any", np.array([0, -1], np.int64))], "last_pool")[0])
    pooled = pooled_parts[0] if len(pooled_parts) == 1 else node("Concat", pooled_parts, "meanmax_pool", axis=1)[0]

    proj = np.ascontiguousarray(np.asarray(state["proj.weight"], dtype=np.float32).T)
    (z,) = node("MatMul", [pooled, const("proj_weight_t", proj)], "proj")
    nodes.append(helper.make_node("Tanh", [z], ["embedding"], name="tanh"))

    # binarizer: zero-padded columns with offset -1 give padding bits that are never set
    pad = nbytes * 8 - bits
    A = np.pad(np.asarray(projection, np.float32), ((0, 0), (0, pad)))
    c = np.concatenate([np.asarray(offset, np.float32), -np.ones(pad, np.float32)])
    if projection_dtype == "float16":  # the runtime folds the cast once at load; the weights are the rounded ones
        (A_f32,) = node("Cast", [const("binarizer_projection", A.astype(np.float16))], "binarizer_projection_float",
                        to=TP.FLOAT)
    elif projection_dtype == "float32":
        A_f32 = const("binarizer_projection", A)
    else:
        raise OndeviceError(f"projection dtype must be float16 or float32, got {projection_dtype!r}")
    (logit,) = node("MatMul", ["embedding", A_f32], BINARIZER_NODE)
    (shifted,) = node("Add", [logit, const("binarizer_offset", c)], "binarizer_add")
    (bit,) = node("Greater", [shifted, const("zero_f32", np.array(0.0, np.float32))], "bits")
    # packing as one small MatMul: bits (B * bytes, 8) times [1, 2, ..., 128] (bit order "little"), exact in float.
    # One (B * bytes, 8) x (8, 1) product: a (B, bytes, 8) x (8,) MatMul ran as `bytes` separate products in
    # onnxruntime (73 vs 22 us for 256 bytes on the Zen 3 EPYC, 2026-11-28)
    packing = _packing_constants(nbytes)
    (bitf,) = node("Cast", [bit], "bits_float", to=TP.FLOAT)
    (grouped,) = node("Reshape", [bitf, const("shape_bits_by_byte", packing["shape_bits_by_byte"])], "bits_by_byte")
    (packed,) = node("MatMul", [grouped, const("bit_values", packing["bit_values"])], "pack")
    (rows,) = node("Reshape", [packed, const("shape_bytes", packing["shape_bytes"])], "pack_rows")
    nodes.append(helper.make_node("Cast", [rows], ["code"], name="code_uint8", to=TP.UINT8))

    graph = helper.make_graph(
        nodes, "ondevice_encoder",
        inputs=[helper.make_tensor_value_info("ids", TP.INT64, ["batch", "tokens"]),
                helper.make_tensor_value_info("lengths", TP.INT64, ["batch"])],
        outputs=[helper.make_tensor_value_info("embedding", TP.FLOAT, ["batch", cfg.output_dim]),
                 helper.make_tensor_value_info("code", TP.UINT8, ["batch", nbytes])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name=PRODUCER,
                              ir_version=IR_VERSION)
    onnx.checker.check_model(model, full_check=True)
    return model


def _packing_constants(nbytes: int) -> dict[str, np.ndarray]:
    """The bit packing's initializers: (B x bytes, 8) bits times the powers of two (8, 1), back to (B, bytes)."""
    return {"shape_bits_by_byte": np.array([-1, 8], np.int64),
            "bit_values": (1 << np.arange(8)).astype(np.float32)[:, None],
            "shape_bytes": np.array([-1, nbytes], np.int64)}


def single_product_packing(model) -> bool:
    """Rewrite, in place, the bit packing of a graph exported before it was one product ((B, bytes, 8) x (8,) MatMul)
    into the form `build_graph` writes now; the codes are the same (sums of distinct powers of two are exact).
    Returns False when the graph packs that way already."""
    onnx = require("onnx", "export")
    nodes = {n.name: n for n in model.graph.node}
    inits = {t.name: t for t in model.graph.initializer}
    grouped, pack, cast = nodes.get("bits_by_byte"), nodes.get("pack"), nodes.get("code_uint8")
    if grouped is None or pack is None or cast is None or "bit_values" not in inits or "shape_bytes" not in inits:
        raise OndeviceError("the graph has no bit packing nodes of an ondevice export")
    if tuple(inits["bit_values"].dims) == (8, 1):
        return False
    packing = _packing_constants(int(onnx.numpy_helper.to_array(inits["shape_bytes"])[1]))
    model.graph.initializer.append(onnx.numpy_helper.from_array(packing["shape_bits_by_byte"], "shape_bits_by_byte"))
    grouped.input[1] = "shape_bits_by_byte"
    for name in ("bit_values", "shape_bytes"):
        inits[name].CopyFrom(onnx.numpy_helper.from_array(packing[name], name))
    at = list(model.graph.node).index(pack) + 1
    model.graph.node.insert(at, onnx.helper.make_node("Reshape", ["pack", "shape_bytes"], ["pack_rows"], name="pack_rows"))
    cast.input[0] = "pack_rows"
    stale = [v for v in model.graph.value_info if v.name in ("bits_by_byte", "pack")]  # shapes inferred for the old form
    for v in stale:
        model.graph.value_info.remove(v)
    return True
