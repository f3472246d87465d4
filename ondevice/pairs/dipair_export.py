"""DiPair on device: token-state outputs added to the bundle's `encoder.onnx`, `dipair_head.onnx`, golden pairs.

`encoder.onnx` gains outputs `token_states_a` (float32 [batch, N, D]) and `token_states_b` ([batch, M, D]): the
BiLSTM's outputs at the kept positions (`dipair.select_positions`), projected, tanh, zero rows for padding (a head
with a pooled slot: slot 0 is tanh(V embedding + c), the tokens fill the rest); with
`int8_states`, also `token_states_a_int8` / `token_states_b_int8` = round(127 x) as int8 (what a catalog caches:
M x D bytes per item). The nodes are appended to the exported graph (fp32 LSTM or int8 DynamicQuantizeLSTM), so
`embedding` and `code` are computed exactly as before. `dipair_head.onnx` runs the head on states (no tokenizer):
states_a, states_b -> logits; fp32 in an fp32 bundle, MatMuls with constant weights dynamically quantized to int8
in an int8 bundle. Opset 17.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from ondevice import layouts
from ondevice._deps import require
from ondevice.binarize import Binarizer
from ondevice.bits import MAX_BITS
from ondevice.checks import check_int
from ondevice.errors import OndeviceError
from ondevice.eval.pair_tasks import load_pairs
from ondevice.export.bundle import ExportConfig, check_replaceable, export
from ondevice.export.onnx_graph import ANCHOR_UNITS
from ondevice.io import atomic_path, check_out_dir, read_json
from ondevice.ort_session import cpu_session
from ondevice.pairs.augment import training_sentences
from ondevice.pairs.dipair import (
    LN_EPS,
    MASK_NEG,
    DiPairHeadConfig,
    head_forward_numpy,
    head_weights,
    load_head_weights,
    segment_ids,
)
from ondevice.pairs.dipair_train import DiPairStudent
from ondevice.pairs.export import add_blend, blend_dev_pairs, quantize_matmuls, save_npy, seal_bundle
from ondevice.tokenizer import pad_ids

GOLDEN_SENTENCES = 200
GOLDEN_PAIRS = 300
OPSET = 17
IR_VERSION = 8
LSTM_OPS = ("LSTM", "DynamicQuantizeLSTM")


class _Builder:
    def __init__(self, prefix: str):
        self.onnx = require("onnx", "export")
        self.prefix, self.nodes, self.inits = prefix, [], []

    def const(self, name: str, value) -> str:
        full = f"{self.prefix}{name}"
        self.inits.append(self.onnx.numpy_helper.from_array(np.asarray(value), full))
        return full

    def node(self, op: str, inputs: list[str], name: str, out: str | None = None, **attrs) -> str:
        full = out or f"{self.prefix}{name}"
        self.nodes.append(self.onnx.helper.make_node(op, inputs, [full], name=f"{self.prefix}{name}", **attrs))
        return full


def _selected(b: _Builder, out: str, lengths2: str, n: int, mode: str, tag: str) -> tuple[str, str]:
    """(picked token outputs (B, n, 2H), valid mask float (B, n, 1)) per `dipair.select_positions`."""
    j = b.const(f"{tag}_slots", np.arange(n, dtype=np.int64)[None, :])
    zero = b.const(f"{tag}_zero", np.array(0, np.int64))
    valid = b.node("Less", [j, lengths2], f"{tag}_valid")
    idx = j
    if mode == "firstlast":
        longer = b.node("Greater", [lengths2, b.const(f"{tag}_n", np.array(n, np.int64))], f"{tag}_longer")
        tail = b.node("GreaterOrEqual", [j, b.const(f"{tag}_half", np.array(n // 2, np.int64))], f"{tag}_tail")
        cond = b.node("And", [longer, tail], f"{tag}_from_end")
        shifted = b.node("Add", [b.node("Sub", [lengths2, b.const(f"{tag}_n2", np.array(n, np.int64))], f"{tag}_len_minus_n"), j],
                         f"{tag}_end_positions")
        idx = b.node("Where", [cond, shifted, j], f"{tag}_positions")
    idx = b.node("Where", [valid, idx, zero], f"{tag}_positions_clamped")
    idx3 = b.node("Unsqueeze", [idx, b.const(f"{tag}_axes2", np.array([2], np.int64))], f"{tag}_index")
    picked = b.node("GatherND", [out, idx3], f"{tag}_picked", batch_dims=1)
    validf = b.node("Cast", [valid], f"{tag}_valid_float", to=b.onnx.TensorProto.FLOAT)
    return picked, b.node("Unsqueeze", [validf, b.const(f"{tag}_axes2b", np.array([2], np.int64))], f"{tag}_valid3")


def _real_units(graph, lstm) -> str:
    """The LSTM's per-token output without the range-anchor units of int8 exports (their Slice), else the raw output."""
    for n in graph.node:
        if n.op_type == "Slice" and n.input and n.input[0] == lstm.output[0]:
            return n.output[0]
    return lstm.output[0]


def _hidden_size(graph, lstm) -> int:
    """Real hidden units per direction: the LSTM's hidden_size less the range anchors when the graph slices them off."""
    size = next(a.i for a in lstm.attribute if a.name == "hidden_size")
    return size - ANCHOR_UNITS if _real_units(graph, lstm) != lstm.output[0] else size


def add_token_outputs(model, cfg: DiPairHeadConfig, proj_weight: np.ndarray, proj_bias: np.ndarray, int8_states: bool = False,
                      vproj: tuple[np.ndarray, np.ndarray] | None = None):
    """A copy of encoder ModelProto `model` with the token-state outputs appended (see the module docstring);
    `vproj` (weight, bias) is the pooled slot's projection of the `embedding` output (heads with `cfg.pooled`)."""
    onnx = require("onnx", "export")
    TP = onnx.TensorProto
    model = onnx.ModelProto.FromString(model.SerializeToString())
    g = model.graph
    lstm = [n for n in g.node if n.op_type in LSTM_OPS]
    if len(lstm) != 1:
        raise OndeviceError(f"encoder.onnx has {len(lstm)} LSTM nodes, expected 1; export the bundle with `ondevice export`")
    b = _Builder("dipair_")
    yt = b.node("Transpose", [_real_units(g, lstm[0])], "batch_major", perm=[2, 0, 1, 3])  # (T, 2, B, H) -> (B, T, 2, H)
    out = b.node("Reshape", [yt, b.const("shape_bt_any", np.array([0, 0, -1], np.int64))], "token_outputs")
    lengths2 = b.node("Unsqueeze", ["lengths", b.const("axes1", np.array([1], np.int64))], "lengths_col")
    wt = b.const("proj_weight_t", np.ascontiguousarray(proj_weight.T, np.float32))
    bias = b.const("proj_bias", proj_bias.astype(np.float32))
    outputs = []
    if cfg.pooled != (vproj is not None):
        raise OndeviceError("the DiPair head's pooled slot and the projection passed for it disagree; re-export the run")
    pooled = None
    if vproj is not None:
        vz = b.node("Add", [b.node("MatMul", ["embedding", b.const("vproj_weight_t", np.ascontiguousarray(vproj[0].T, np.float32))],
                                   "pooled_proj"), b.const("vproj_bias", vproj[1].astype(np.float32))], "pooled_proj_bias")
        pooled = b.node("Unsqueeze", [b.node("Tanh", [vz], "pooled_tanh"), b.const("axes1b", np.array([1], np.int64))], "pooled_slot")
    for role, n in (("a", cfg.n), ("b", cfg.m)):
        tokens = n - 1 if pooled else n
        picked, valid3 = _selected(b, out, lengths2, tokens, cfg.mode, role)
        z = b.node("Add", [b.node("MatMul", [picked, wt], f"{role}_proj"), bias], f"{role}_proj_bias")
        name = f"token_states_{role}"
        if pooled:
            tok = b.node("Mul", [b.node("Tanh", [z], f"{role}_tanh"), valid3], f"{role}_token_states")
            b.node("Concat", [pooled, tok], f"{role}_states", out=name, axis=1)
        else:
            b.node("Mul", [b.node("Tanh", [z], f"{role}_tanh"), valid3], f"{role}_states", out=name)
        outputs.append(onnx.helper.make_tensor_value_info(name, TP.FLOAT, ["batch", n, cfg.d]))
        if int8_states:
            r = b.node("Round", [b.node("Mul", [name, b.const(f"{role}_scale", np.array(127.0, np.float32))], f"{role}_scaled")],
                       f"{role}_round")
            c = b.node("Clip", [r, b.const(f"{role}_lo", np.array(-127.0, np.float32)), b.const(f"{role}_hi", np.array(127.0, np.float32))],
                       f"{role}_clip")
            b.node("Cast", [c], f"{role}_int8", out=f"{name}_int8", to=TP.INT8)
            outputs.append(onnx.helper.make_tensor_value_info(f"{name}_int8", TP.INT8, ["batch", n, cfg.d]))
    g.node.extend(b.nodes)
    g.initializer.extend(b.inits)
    g.output.extend(outputs)
    onnx.checker.check_model(model)
    return model


def build_head_graph(cfg: DiPairHeadConfig, weights: dict[str, np.ndarray]):
    """The fp32 ModelProto of the head: states_a [batch, N, D], states_b [batch, M, D] -> logits [batch, outputs]."""
    onnx = require("onnx", "export")
    TP = onnx.TensorProto
    w = {k: np.asarray(v, np.float32) for k, v in head_weights(weights).items()}
    b = _Builder("")
    D, h = cfg.d, cfg.heads
    dh = D // h
    parts = ["states_a", "states_b"]
    if cfg.pooled:
        slot0 = b.const("slot0_in", np.array(0, np.int64))
        pa = b.node("Gather", ["states_a", slot0], "pooled_a", axis=1)
        pb = b.node("Gather", ["states_b", slot0], "pooled_b", axis=1)
        feats = b.node("Concat", [pa, pb, b.node("Mul", [pa, pb], "pooled_product"),
                                  b.node("Abs", [b.node("Sub", [pa, pb], "pooled_difference")], "pooled_abs_difference")],
                       "compare_features", axis=-1)
        cmp = b.node("Add", [b.node("MatMul", [feats, b.const("compare_wt", np.ascontiguousarray(w["compare.weight"].T))], "compare_matmul"),
                             b.const("compare_b", w["compare.bias"])], "compare_bias")
        parts.insert(0, b.node("Unsqueeze", [cmp, b.const("axes_1c", np.array([1], np.int64))], "compare_slot"))
    s = b.node("Concat", parts, "states", axis=1)
    keep = b.node("Greater", [b.node("ReduceSum", [b.node("Abs", [s], "abs"), b.const("axes_last", np.array([-1], np.int64))],
                                     "row_sum", keepdims=0), b.const("zero_f", np.array(0.0, np.float32))], "keep")
    if cfg.pooled:  # the comparison slot is always attended to
        keep = b.node("Or", [keep, b.const("always_keep", (np.arange(cfg.slots) == 0)[None, :])], "keep_compare")
    add = b.node("Where", [keep, b.const("mask_keep", np.array(0.0, np.float32)), b.const("mask_pad", np.array(MASK_NEG, np.float32))],
                 "mask_add")
    # one head (the default) needs no head axis: 3-D attention, no Reshape/Transpose (a quarter of the int8 time)
    add = b.node("Unsqueeze", [add, b.const("axes_12", np.array([1] if h == 1 else [1, 2], np.int64))], "mask_add_b")
    x = b.node("Add", [s, b.const("embed_add", (w["position"] + w["segment"][segment_ids(cfg)]).astype(np.float32))], "embedded")
    if h > 1:
        split = b.const("shape_heads", np.array([0, 0, h, dh], np.int64))
        merge = b.const("shape_merge", np.array([0, 0, D], np.int64))

    def linear(inp: str, name: str, scale: float = 1.0) -> str:
        wt, bias = w[f"{name}.weight"].T * np.float32(scale), w[f"{name}.bias"] * np.float32(scale)
        mm = b.node("MatMul", [inp, b.const(f"{name}_wt", np.ascontiguousarray(wt, np.float32))], f"{name}_matmul")
        return b.node("Add", [mm, b.const(f"{name}_b", bias.astype(np.float32))], f"{name}_bias")

    def heads(t: str, name: str, perm: list[int]) -> str:
        return t if h == 1 else b.node("Transpose", [b.node("Reshape", [t, split], f"{name}_heads")], f"{name}_t", perm=perm)

    for i in range(cfg.layers):
        p = f"layers.{i}."
        k = linear(x, p + "k")  # keys go in transposed: (B, S, D) -> (B, D, S), per head when there are several
        k = b.node("Transpose", [k], f"{p}k_t", perm=[0, 2, 1]) if h == 1 else heads(k, p + "k", [0, 2, 3, 1])
        v = heads(linear(x, p + "v"), p + "v", [0, 2, 1, 3])
        if i == cfg.layers - 1:  # only slot 0 reaches the logits: the last layer's queries, outputs and FFN need no other slot
            x = b.node("Slice", [x, b.const(f"{p}first_start", np.array([0], np.int64)), b.const(f"{p}first_end", np.array([1], np.int64)),
                                 b.const(f"{p}first_axis", np.array([1], np.int64))], f"{p}first_slot_only")
        q = heads(linear(x, p + "q", scale=1.0 / np.sqrt(dh)), p + "q", [0, 2, 1, 3])  # the 1/sqrt(dh) folded into q
        pr = b.node("Softmax", [b.node("Add", [b.node("MatMul", [q, k], f"{p}scores"), add], f"{p}scores_masked")],
                    f"{p}attention", axis=-1)
        ctx = b.node("MatMul", [pr, v], f"{p}context")
        if h > 1:
            ctx = b.node("Reshape", [b.node("Transpose", [ctx], f"{p}context_t", perm=[0, 2, 1, 3]), merge], f"{p}context_merged")
        x = b.node("Add", [x, linear(ctx, p + "o")], f"{p}residual1")
        x = b.node("LayerNormalization", [x, b.const(f"{p}ln1_g", w[p + "ln1.weight"]), b.const(f"{p}ln1_b", w[p + "ln1.bias"])],
                   f"{p}ln1", axis=-1, epsilon=LN_EPS)
        ff = linear(b.node("Relu", [linear(x, p + "ff1")], f"{p}relu"), p + "ff2")
        x = b.node("LayerNormalization", [b.node("Add", [x, ff], f"{p}residual2"), b.const(f"{p}ln2_g", w[p + "ln2.weight"]),
                                          b.const(f"{p}ln2_b", w[p + "ln2.bias"])], f"{p}ln2", axis=-1, epsilon=LN_EPS)
    first = b.node("Gather", [x, b.const("slot0", np.array(0, np.int64))], "first_slot", axis=1)
    b.node("Add", [b.node("MatMul", [first, b.const("out_wt", np.ascontiguousarray(w["out.weight"].T))], "out_matmul"),
                   b.const("out_b", w["out.bias"])], "out_bias", out="logits")
    graph = onnx.helper.make_graph(
        b.nodes, "ondevice_dipair_head",
        [onnx.helper.make_tensor_value_info("states_a", TP.FLOAT, ["batch", cfg.n, cfg.d]),
         onnx.helper.make_tensor_value_info("states_b", TP.FLOAT, ["batch", cfg.m, cfg.d])],
        [onnx.helper.make_tensor_value_info("logits", TP.FLOAT, ["batch", cfg.outputs])], initializer=b.inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", OPSET)], producer_name="ondevice")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def build_int8_head_graph(cfg: DiPairHeadConfig, weights: dict[str, np.ndarray]):
    """The int8 head: MatMuls with a constant weight dynamically quantized (attention's MatMuls stay float)."""
    return quantize_matmuls(build_head_graph(cfg, weights), const_b_only=True)


def run_head(model_bytes: bytes, sa: np.ndarray, sb: np.ndarray) -> np.ndarray:
    """Logits of a head graph in onnxruntime."""
    sess = cpu_session(model_bytes)
    return sess.run(["logits"], {"states_a": np.asarray(sa, np.float32), "states_b": np.asarray(sb, np.float32)})[0]


def _states_of_graph(model_bytes: bytes, rows: list[list[int]], names: list[str]) -> list[np.ndarray]:
    sess = cpu_session(model_bytes)
    ids, lengths = pad_ids(rows)
    return sess.run(names, {"ids": ids, "lengths": lengths})


def add_dipair(bundle_dir: str | Path, cfg: DiPairHeadConfig, weights: dict[str, np.ndarray], info: dict[str, Any],
               int8_states: bool = True, seed: int = 0) -> dict:
    """Add token-state outputs to the bundle's encoder, write the head, golden pairs, and a manifest `dipair` block."""
    onnx = require("onnx", "export")

    path = Path(bundle_dir)
    manifest = read_json(path / layouts.MANIFEST, "bundle manifest")
    precision = manifest["precision"]
    encoder = onnx.load(str(path / layouts.ENCODER_ONNX))
    hidden = [n for n in encoder.graph.node if n.op_type in LSTM_OPS]
    if not hidden or 2 * _hidden_size(encoder.graph, hidden[0]) != cfg.in_dim:
        raise OndeviceError(f"the DiPair head takes {cfg.in_dim}-wide token outputs, which this bundle's encoder does not "
                            "make; export the encoder of the same DiPair run")
    vproj = (weights["vproj.weight"], weights["vproj.bias"]) if cfg.pooled else None
    extended = add_token_outputs(encoder, cfg, weights["proj.weight"], weights["proj.bias"], int8_states, vproj)
    with atomic_path(path / layouts.ENCODER_ONNX) as tmp:
        tmp.write_bytes(extended.SerializeToString())
    fp32_head = build_head_graph(cfg, weights)
    head = build_int8_head_graph(cfg, weights) if precision == "int8" else fp32_head
    with atomic_path(path / layouts.DIPAIR_HEAD_ONNX) as tmp:
        tmp.write_bytes(head.SerializeToString())
    with atomic_path(path / layouts.DIPAIR_HEAD_WEIGHTS) as tmp:
        save_file({k: np.ascontiguousarray(v, np.float32) for k, v in weights.items()}, str(tmp),
                  metadata={"format": "ondevice-dipair-head", "precision": "fp32"})

    rng = np.random.default_rng(seed + 13)  # checks on generated states: tanh range, random padding
    sa = np.tanh(rng.normal(0, 0.8, (128, cfg.n, cfg.d))).astype(np.float32)
    sb = np.tanh(rng.normal(0, 0.8, (128, cfg.m, cfg.d))).astype(np.float32)
    for i, keep in enumerate(rng.integers(1, cfg.n + 1, 128)):
        sa[i, keep:] = 0
    for i, keep in enumerate(rng.integers(1, cfg.m + 1, 128)):
        sb[i, keep:] = 0
    ref = head_forward_numpy(cfg, weights, sa, sb)
    got = run_head(head.SerializeToString(), sa, sb)
    checks = {"states": 128, "max_abs_diff_vs_reference": float(np.abs(got - ref).max()), "reference_logit_std": float(ref.std())}
    if precision == "fp32" and checks["max_abs_diff_vs_reference"] > 1e-4:
        raise OndeviceError(f"DiPair head graph differs from the reference by {checks['max_abs_diff_vs_reference']:.2e}")

    golden = None
    ids_path = path / layouts.GOLDEN / "token_ids.txt"
    if ids_path.is_file():
        rows = [[int(t) for t in line.split()] for line in ids_path.read_text().splitlines()[:GOLDEN_SENTENCES]]
        # golden states come from the fp32 encoder graph, as the encoder's own golden files do (an int8 folder
        # takes them from the fp32 folder of the same export)
        states = _states_of_graph(extended.SerializeToString(), rows, ["token_states_a", "token_states_b"]) \
            if precision == "fp32" else info.get("_fp32_states")
        if states is not None:
            grng = np.random.default_rng(seed + 7)
            ia = grng.integers(0, len(rows), GOLDEN_PAIRS).astype("<i8")
            ib = grng.integers(0, len(rows), GOLDEN_PAIRS).astype("<i8")
            ib[:30] = ia[:30]
            logits = run_head(fp32_head.SerializeToString(), states[0][ia], states[1][ib]).astype("<f4")
            for name, arr in (("dipair_states_a", states[0].astype("<f4")), ("dipair_states_b", states[1].astype("<f4")),
                              ("dipair_pair_a", ia), ("dipair_pair_b", ib), ("dipair_logits", logits)):
                save_npy(path / layouts.GOLDEN / f"{name}.npy", arr)
            golden = {"sentences": len(rows), "pairs": GOLDEN_PAIRS,
                      "states": "golden/dipair_states_{a,b}.npy: fp32 encoder graph on the first golden sentences' token ids",
                      "logits": "golden/dipair_logits.npy: fp32 head graph on states_a[dipair_pair_a], states_b[dipair_pair_b]"}

    outputs = {"token_states_a": f"float32 [batch, {cfg.n}, {cfg.d}]", "token_states_b": f"float32 [batch, {cfg.m}, {cfg.d}]"}
    if int8_states:
        outputs.update({"token_states_a_int8": f"int8 [batch, {cfg.n}, {cfg.d}]", "token_states_b_int8": f"int8 [batch, {cfg.m}, {cfg.d}]"})
    block = {
        "method": "dipair", "task": cfg.task, "task_type": cfg.kind, "labels": list(cfg.labels),
        "file": layouts.DIPAIR_HEAD_ONNX, "weights": layouts.DIPAIR_HEAD_WEIGHTS, "precision": precision,
        "head": {"n": cfg.n, "m": cfg.m, "d": cfg.d, "layers": cfg.layers, "heads": cfg.heads, "ffn": cfg.ffn,
                 "outputs": cfg.outputs, "in_dim": cfg.in_dim, "select": cfg.mode, "activation": "relu",
                 "vec_dim": cfg.vec_dim, "pooled_slot": cfg.pooled,
                 "layer_norm": "post-LN, eps 1e-5", "mask": "slots whose state row is all zero are padding (keys masked)"},
        "encoder_outputs": outputs, "inputs": {"states_a": outputs["token_states_a"], "states_b": outputs["token_states_b"]},
        "cache": {"per_item_bytes_int8": cfg.cache_bytes(True), "per_item_bytes_fp32": cfg.cache_bytes(False),
                  "dequantize": "x = q / 127 (states are tanh outputs in (-1, 1))", "role": "catalog items are side b (M slots)"},
        "output_transform": _output_transform(cfg), "threshold": cfg.threshold,
        "checks": checks, **({"golden": golden} if golden else {}), **{k: v for k, v in info.items() if not k.startswith("_")},
    }
    manifest["dipair"] = block
    seal_bundle(path, manifest)
    return block


def _output_transform(cfg: DiPairHeadConfig) -> dict:
    if cfg.kind == "regression":
        return {"type": "affine", "scale": cfg.gold_high - cfg.gold_low, "offset": cfg.gold_low}
    if cfg.kind == "binary":
        return {"type": "sigmoid", "decision": "logit > threshold"}
    return {"type": "softmax", "decision": "argmax"}


def export_dipair_bundle(run_dir: str | Path, out: str | Path, binarizer=None, bits: int = 256, precision: str = "both",
                         golden: bool = False, with_weights: bool = False, int8_states: bool = True, seed: int = 0,
                         blend: bool = True, data: str | Path | None = None) -> list[Path]:
    """Export a DiPair run's fine-tuned encoder as a bundle (`ondevice export`) and add the DiPair pieces to each folder;
    with `blend`, the head + Hamming blend fitted on the task's dev split (`data`: default the run's data folder)."""
    if binarizer is None:  # before the run is loaded and its sentences encoded
        check_int(bits, "--bits", 1, MAX_BITS)
    check_replaceable(check_out_dir(out))  # before the work, as publish will
    run = Path(run_dir)
    ds = DiPairStudent.load(run)
    run_cfg = read_json(run / layouts.DIPAIR_CONFIG, "DiPair config")
    # before any file is written: a blend without its dev pairs would stop a half-made bundle
    dev = blend_dev_pairs(run_cfg["task"], data if data is not None else run_cfg["data"], run_cfg.get("split_seed", 0)) \
        if blend else None
    if binarizer is None:
        sentences = training_sentences(load_pairs(run_cfg["task"], "train", run_cfg["data"], run_cfg.get("split_seed", 0)))
        binarizer = Binarizer.fit(ds.vectors(sentences[:20000]), method="random", bits=bits, seed=seed)
    folders = export(ds.student, binarizer, out, ExportConfig(precision=precision, golden=golden,
                                                             with_weights=with_weights, seed=seed), student_dir=run / layouts.RUN_STUDENT)
    cfg, weights = load_head_weights(run)
    info: dict[str, Any] = {"run": {"config": {k: run_cfg.get(k) for k in ("task", "n", "m", "d", "select", "stage1_epochs",
                                                                          "stage2_epochs", "sra_weight", "seed")},
                                    "dev": read_json(run / layouts.RUN_DEV, "dev metrics") if (run / layouts.RUN_DEV).is_file() else None,
                                    "sra_cosine": read_json(run / layouts.SRA_COSINE, "SRA cosine")
                                    if (run / layouts.SRA_COSINE).is_file() else None}}
    # fp32 folder first: its golden states are reused by the int8 folder (golden files always come from fp32 graphs)
    order = sorted(folders, key=lambda f: read_json(Path(f) / layouts.MANIFEST, "bundle manifest")["precision"] != "fp32")
    fp32_states = None
    for folder in order:
        block = add_dipair(folder, cfg, weights, {**info, "_fp32_states": fp32_states}, int8_states=int8_states, seed=seed)
        if block.get("golden") and fp32_states is None:
            g = Path(folder) / layouts.GOLDEN
            fp32_states = [np.load(g / "dipair_states_a.npy"), np.load(g / "dipair_states_b.npy")]
        if dev is not None:
            add_blend(folder, dev)
    return folders


def describe(block: dict) -> str:
    """One line about a bundle's DiPair block (for the CLI)."""
    return json.dumps({k: block[k] for k in ("task", "file", "precision", "head", "cache")})
