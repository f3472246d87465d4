"""The bundle's optional pair head: `pair_head.onnx` (fp32 or int8, the bundle's precision), its fp32 weights
`pair_head.safetensors` (for runtimes with their own forward pass, e.g. the Java core), golden pair files, and a
manifest `pairs` block. Added to a bundle that `ondevice export` wrote, as a second step, so the encoder export
stays exactly what it is; the manifest's file table is rewritten to cover the new files and the bundle is
re-verified with `Bundle.load`.

Graph: u, v float32 [batch, dim] -> logits float32 [batch, outputs] = out(ReLU(hidden([u, v, u*v, |u-v|]))).
Opset 17. int8: onnxruntime dynamic quantization of both MatMuls (weights int8 per column, activations per batch).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from ondevice import layouts
from ondevice._deps import require
from ondevice.binarize import Binarizer
from ondevice.bits import MAX_BITS
from ondevice.bundle.manifest import seal, write_manifest
from ondevice.checks import check_int
from ondevice.errors import OndeviceError
from ondevice.eval.pair_tasks import load_pairs, task_spec
from ondevice.export.bundle import ExportConfig, check_replaceable, export, publish, stage
from ondevice.export.modelcard import model_card
from ondevice.io import (
    atomic_path,
    canonical_safetensors,
    check_out_dir,
    read_json,
)
from ondevice.ort_session import cpu_session
from ondevice.pairs.augment import training_sentences
from ondevice.pairs.blend import fit_blend, minus_hamming
from ondevice.pairs.metrics import cosines
from ondevice.pairs.model import PairHeadConfig, head_forward_numpy, load_head_weights
from ondevice.pairs.train import PairStudent
from ondevice.runtime import Bundle

GOLDEN_PAIRS = 500
GOLDEN_PAIR_FILES = ("pair_a", "pair_b", "pair_logits", "pair_blend_keys")  # golden/<name>.npy of a DSE head
OPSET = 17
IR_VERSION = 8


def build_head_graph(cfg: PairHeadConfig, weights: dict[str, np.ndarray]):
    """The fp32 ModelProto of the head."""
    onnx = require("onnx", "export")
    helper, TP, numpy_helper = onnx.helper, onnx.TensorProto, onnx.numpy_helper
    inits = [numpy_helper.from_array(np.ascontiguousarray(weights["hidden.weight"].T, np.float32), "W1"),
             numpy_helper.from_array(weights["hidden.bias"].astype(np.float32), "b1"),
             numpy_helper.from_array(np.ascontiguousarray(weights["out.weight"].T, np.float32), "W2"),
             numpy_helper.from_array(weights["out.bias"].astype(np.float32), "b2")]
    nodes = [
        helper.make_node("Mul", ["u", "v"], ["uv"], name="product"),
        helper.make_node("Sub", ["u", "v"], ["diff"], name="difference"),
        helper.make_node("Abs", ["diff"], ["absdiff"], name="abs_difference"),
        helper.make_node("Concat", ["u", "v", "uv", "absdiff"], ["features"], axis=1, name="features"),
        helper.make_node("MatMul", ["features", "W1"], ["h0"], name="hidden_matmul"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="hidden_bias"),
        helper.make_node("Relu", ["h1"], ["h"], name="relu"),
        helper.make_node("MatMul", ["h", "W2"], ["o0"], name="out_matmul"),
        helper.make_node("Add", ["o0", "b2"], ["logits"], name="out_bias"),
    ]
    graph = helper.make_graph(
        nodes, "ondevice_pair_head",
        [helper.make_tensor_value_info("u", TP.FLOAT, ["batch", cfg.dim]),
         helper.make_tensor_value_info("v", TP.FLOAT, ["batch", cfg.dim])],
        [helper.make_tensor_value_info("logits", TP.FLOAT, ["batch", cfg.outputs])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="ondevice")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def build_int8_head_graph(cfg: PairHeadConfig, weights: dict[str, np.ndarray]):
    """The int8 ModelProto: both MatMuls dynamically quantized by onnxruntime."""
    return quantize_matmuls(build_head_graph(cfg, weights))


def quantize_matmuls(model, const_b_only: bool = False):
    """A head graph with its MatMuls dynamically quantized to int8 by onnxruntime (per tensor, quiet).

    `const_b_only` leaves MatMuls whose second input is computed (attention scores) in float.
    """
    onnx = require("onnx", "export")
    quantization = require("onnxruntime.quantization", "export")
    extra = {"extra_options": {"MatMulConstBOnly": True}} if const_b_only else {}
    with tempfile.TemporaryDirectory(prefix="ondevice-headq-") as tmp:
        out = Path(tmp) / "int8.onnx"
        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)
        try:
            quantization.quantize_dynamic(model, out, op_types_to_quantize=["MatMul"], per_channel=False,
                                          weight_type=quantization.QuantType.QInt8, **extra)
        finally:
            logging.disable(previous)
        return onnx.load(str(out))


def _run(model_bytes: bytes, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    sess = cpu_session(model_bytes)
    return sess.run(["logits"], {"u": np.asarray(u, np.float32), "v": np.asarray(v, np.float32)})[0]


def save_npy(path: Path, array: np.ndarray) -> None:
    """Write a golden array atomically as a plain (pickle-free) .npy."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.lib.format.write_array(fh, np.ascontiguousarray(array), version=(1, 0), allow_pickle=False)


def seal_bundle(path: Path, manifest: dict, card: Callable[[dict], str] | None = None) -> None:
    """Re-list every file of a bundle folder with its sha256, write the manifest, re-verify.

    `card(manifest)`, given, writes a new README.md from the manifest with its new file table (the README is listed
    last). The last step loads the folder as an app would: a head added to a bundle must leave it passing that check.
    """
    seal(path, manifest, card=card)
    Bundle.load(path)


def add_pair_head(bundle_dir: str | Path, cfg: PairHeadConfig, weights: dict[str, np.ndarray], info: dict[str, Any],
                  seed: int = 0) -> dict:
    """Write the head into an exported bundle folder and extend its manifest; returns the `pairs` block."""
    path = Path(bundle_dir)
    manifest = read_json(path / layouts.MANIFEST, "bundle manifest")
    if manifest.get("dim") != cfg.dim:
        raise OndeviceError(f"the pair head takes {cfg.dim}-d vectors but the bundle makes {manifest.get('dim')}-d; "
                            "export the encoder of the same pair student")
    precision = manifest["precision"]
    fp32 = build_head_graph(cfg, weights)
    graph = build_int8_head_graph(cfg, weights) if precision == "int8" else fp32
    with atomic_path(path / layouts.PAIR_HEAD_ONNX) as tmp:
        tmp.write_bytes(graph.SerializeToString())
    with atomic_path(path / layouts.PAIR_HEAD_WEIGHTS) as tmp:
        save_file(weights, str(tmp), metadata={"format": "ondevice-pair-head", "precision": "fp32"})
        canonical_safetensors(tmp)  # the same head gives the same bytes (bundles are compared by checksum)

    # checks on generated vectors in the encoder's range (tanh outputs)
    rng = np.random.default_rng(seed + 11)
    u = np.tanh(rng.normal(0, 0.6, (256, cfg.dim))).astype(np.float32)
    v = np.tanh(u + rng.normal(0, 0.4, u.shape)).astype(np.float32)
    ref = head_forward_numpy(weights, u, v)
    got = _run(graph.SerializeToString(), u, v)
    checks = {"vectors": len(u), "max_abs_diff_vs_reference": float(np.abs(got - ref).max()),
              "reference_logit_std": float(ref.std())}
    if not (np.isfinite(got).all() and np.isfinite(ref).all()):
        raise OndeviceError("the pair head gives non-finite logits (NaN or inf weights); retrain the pair student")
    if precision == "fp32" and checks["max_abs_diff_vs_reference"] > 1e-4:
        raise OndeviceError(f"pair head graph differs from the reference by {checks['max_abs_diff_vs_reference']:.2e}")
    if cfg.kind == "binary":
        t = cfg.threshold or 0.0
        checks["decision_agreement"] = float(((got[:, 0] > t) == (ref[:, 0] > t)).mean())
    elif cfg.kind == "classes":
        checks["decision_agreement"] = float((got.argmax(1) == ref.argmax(1)).mean())

    golden = None
    emb_path = path / layouts.GOLDEN / "embeddings.npy"
    if emb_path.is_file():  # golden pairs over the golden sentences' fp32 embeddings
        try:
            emb = np.load(emb_path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise OndeviceError(f"{emb_path} cannot be read ({str(exc)[:120]}); re-export the bundle") from None
        if emb.ndim != 2 or emb.shape[1] != cfg.dim or emb.dtype.kind != "f" or not len(emb) or not np.isfinite(emb).all():
            raise OndeviceError(f"{emb_path} holds {emb.dtype} {emb.shape}, not finite {cfg.dim}-d float vectors; "
                                "re-export the bundle")
        emb = emb.astype(np.float32, copy=False)
        grng = np.random.default_rng(seed + 5)
        n = min(GOLDEN_PAIRS, len(emb) * len(emb))
        ia = grng.integers(0, len(emb), n).astype("<i8")
        ib = grng.integers(0, len(emb), n).astype("<i8")
        ib[: min(50, n)] = ia[: min(50, n)]  # identical sentences: the top of every regression scale
        logits = _run(fp32.SerializeToString(), emb[ia], emb[ib]).astype("<f4")
        for name, arr in (("pair_a", ia), ("pair_b", ib), ("pair_logits", logits)):
            save_npy(path / layouts.GOLDEN / f"{name}.npy", arr)
        golden = {"pairs": int(n), "vectors": "golden/embeddings.npy rows pair_a[i], pair_b[i]",
                  "computed_by": "fp32 pair_head graph in onnxruntime", "outputs": "golden/pair_logits.npy"}

    block = {
        "method": info.get("method", "dse"), "task": cfg.task, "task_type": cfg.kind, "labels": list(cfg.labels),
        "file": layouts.PAIR_HEAD_ONNX, "weights": layouts.PAIR_HEAD_WEIGHTS, "precision": precision,
        "inputs": {"u": f"float32 [batch, {cfg.dim}]", "v": f"float32 [batch, {cfg.dim}]"},
        "outputs": {"logits": f"float32 [batch, {cfg.outputs}]"},
        "head": {"dim": cfg.dim, "hidden": cfg.hidden, "outputs": cfg.outputs, "features": cfg.features,
                 "formula": "logits = W2 relu(W1 [u, v, u*v, |u-v|] + b1) + b2"},
        "output_transform": cfg.output_transform(), "threshold": cfg.threshold,
        "rank_by": "score" if cfg.kind != "classes" else f"probability of {cfg.labels[1] if len(cfg.labels) > 1 else 'class 0'}",
        "checks": checks, **({"golden": golden} if golden else {}),
        **{k: v for k, v in info.items() if k != "method"},
    }
    manifest["pairs"] = block
    seal_bundle(path, manifest, card=lambda m: model_card(m) + card_section(block))
    return block


def card_section(block: dict) -> str:
    lines = ["", "## Pair head", "",
             f"`{block['file']}` scores a pair of this bundle's embeddings for **{block['task']}** ({block['task_type']}):",
             (f"`{block['head']['formula']}`; output transform `{json.dumps(block['output_transform'])}`, "
              f"threshold `{block['threshold']}`."), "",
             "```python", "bundle.pair_scores([\"a sentence\"], [\"another sentence\"])",
             "bundle.rerank(\"a query\", candidate_texts_or_vectors, k=10)", "```", ""]
    encoder = block.get("encoder") or {}
    if encoder.get("frozen"):
        check = encoder["check"]
        lines += [(f"The head was trained on this bundle's own encoder, frozen (`ondevice pairs export --bundle`): the "
                   f"training encoder gives this bundle's vectors at cosine {check['mean_cosine']:.5f} on average "
                   f"({check['min_cosine']:.5f} at worst) over {check['sentences']} {block['task']} dev sentences."), ""]
    blend = block.get("blend")
    if blend:
        dev = blend["dev"]
        metric = next(k for k in dev if k not in ("head_alone", "similarity_alone", "n", "weights_tried"))
        lines += [(f"`rerank`, `search_rerank` and `pair_keys` rank by the head blended with the embeddings' cosine: "
                  f"`{blend['key']}`, weight {blend['weight']:.2f} chosen on {blend['fitted_on']['pairs']:,} "
                  f"{blend['fitted_on']['task']} dev pairs ({metric} x100 there: head {dev['head_alone']:.2f}, "
                  f"cosine {dev['similarity_alone']:.2f}, blend {dev[metric]:.2f}); `blend=False` ranks by the head alone."), ""]
    return "\n".join(lines)


def blend_dev_pairs(task: str, data: str | Path, split_seed: int = 0):
    """The dev pairs a blend is fitted on (None for a 3-class task, which has no blend); missing data is a one-line error."""
    if task_spec(task).kind == "classes":
        return None
    try:
        return load_pairs(task, "dev", data, split_seed)
    except OndeviceError as exc:
        raise OndeviceError(f"the blend is fitted on {task} dev pairs: {exc} (pass --data DIR, or --no-blend)") from None


def add_blend(bundle_dir: str | Path, dev) -> dict:
    """Fit `ondevice.pairs.blend` on `dev` pairs (`blend_dev_pairs`) through this bundle folder's own graphs and store it
    as its head block's `blend`: a DSE/DvBERT head (`pairs`) with the cosine of the two embeddings (the vectors its
    rerank holds), a DiPair head (`dipair`) with minus the Hamming distance of the two codes (what a Hamming shortlist
    has). Golden blended keys are written when the folder has golden pairs."""
    spec = task_spec(dev.task)
    path = Path(bundle_dir)
    bundle = Bundle.load(path)
    manifest = read_json(path / layouts.MANIFEST, "bundle manifest")
    key = "dipair" if "dipair" in manifest else "pairs"
    scorer = bundle.pair_scorer()
    logits, sim = scorer.logits_and_similarity(dev.a, dev.b, similarity=True)
    blend, dev_metrics = fit_blend(spec, logits[:, 0], sim, dev.gold, scorer.similarity)
    g = path / layouts.GOLDEN
    if key == "dipair":
        extra = {"bits": bundle.bits}
        golden_files = ("dipair_logits.npy", "codes.npy", "dipair_pair_a.npy", "dipair_pair_b.npy")
        similarity = lambda rows, ia, ib: minus_hamming(rows[ia], rows[ib])
        keys_name, what = "dipair_blend_keys.npy", "minus the Hamming distance of golden/codes.npy rows"
    else:
        extra = {"dim": bundle.dim}
        golden_files = ("pair_logits.npy", "embeddings.npy", "pair_a.npy", "pair_b.npy")
        similarity = lambda rows, ia, ib: cosines(rows[ia], rows[ib])
        keys_name, what = "pair_blend_keys.npy", "the cosine of golden/embeddings.npy rows"
    golden = None
    if all((g / f).is_file() for f in golden_files):
        logits_g, rows, ia, ib = (np.load(g / f, allow_pickle=False) for f in golden_files)
        save_npy(g / keys_name, blend.keys(logits_g[:, 0], similarity(rows, ia, ib)).astype("<f4"))
        golden = f"golden/{keys_name}: the blend of golden/{golden_files[0]} and {what} {golden_files[2][:-4]}, {golden_files[3][:-4]}"
    sim = "minus the Hamming distance of the two codes" if key == "dipair" else "the cosine of the two embeddings"
    manifest[key]["blend"] = {
        **blend.to_dict(), **extra,
        "key": f"(logit - head_mean) / head_std + weight * (sim - sim_mean) / sim_std, sim = {sim}; higher ranks first"
               + ("; binary decision: key > threshold" if spec.kind == "binary" else ""),
        "fitted_on": {"task": dev.task, "split": "dev", "pairs": len(dev.gold), "graphs": "this folder's encoder and head"},
        "dev": dev_metrics, **({"golden": golden} if golden else {})}
    card = None
    if key == "pairs":
        card = lambda m: model_card(m) + card_section(m["pairs"])
    seal_bundle(path, manifest, card=card)
    return manifest[key]["blend"]


def export_pair_bundle(run_dir: str | Path, out: str | Path, binarizer=None, bits: int = 256, precision: str = "both",
                       golden: bool = False, with_weights: bool = False, seed: int = 0, extra_info: dict | None = None,
                       sentences: list[str] | None = None, blend: bool = True, data: str | Path | None = None) -> list[Path]:
    """Export a DSE run's fine-tuned encoder as a bundle (`ondevice export`) and add its pair head to each folder;
    with `blend`, the head + cosine blend fitted on the task's dev split (`data`: default the run's data folder).

    Without `binarizer`, a `bits`-bit random projection is fitted (seeded) on the encoder's vectors of
    `sentences` (the task's training sentences by default).
    """
    if binarizer is None:  # before the run is loaded and its sentences encoded
        check_int(bits, "--bits", 1, MAX_BITS)
    check_replaceable(check_out_dir(out))  # before the work, as publish will
    run = Path(run_dir)
    pair = PairStudent.load(run)
    run_cfg = read_json(_config_path(run), "pair run config")
    # before any file is written: a blend without its dev pairs would stop a half-made bundle
    dev = blend_dev_pairs(run_cfg["task"], data if data is not None else run_cfg["data"], run_cfg.get("split_seed", 0)) \
        if blend else None
    if binarizer is None:
        if sentences is None:
            sentences = training_sentences(load_pairs(run_cfg["task"], "train", run_cfg["data"], run_cfg.get("split_seed", 0)))
        binarizer = Binarizer.fit(pair.vectors(sentences[:20000]), method="random", bits=bits, seed=seed)
    folders = export(pair.student, binarizer, out, ExportConfig(precision=precision, golden=golden,
                                                                 with_weights=with_weights, seed=seed),
                     student_dir=run / layouts.RUN_STUDENT)
    head_cfg, weights = load_head_weights(run)
    info = {"method": _method(run), "run": _run_summary(run), **(extra_info or {})}
    if info["method"] == "dvbert" and read_json(run / layouts.RUN_DATA, "data summary").get("head") == "linear":
        info["dvbert_head"] = ("logits = W [u, v, |u-v|] + b, stored exactly in the formula above: W1 = [W; -W] "
                               "(zero u*v block), b1 = [b; -b], W2 = [I, -I], b2 = 0, since x = relu(x) - relu(-x)")
    for folder in folders:
        add_pair_head(folder, head_cfg, weights, info, seed=seed)
        if dev is not None:
            add_blend(folder, dev)
    return folders


ENCODER_MATCH = (0.999, 0.99)  # mean, min cosine of the run's encoder to the bundle's on the dev sentences (int8: ~0.9999)


def add_head_to_bundle(run_dir: str | Path, bundle: str | Path, out: str | Path, blend: bool = True,
                       data: str | Path | None = None, precision: str | None = None, seed: int = 0) -> Path:
    """Copy an exported bundle (e.g. 'pretrained') to `out` with the head of a DSE run trained with its encoder frozen
    at that bundle's encoder (`ondevice unpack`, then `pairs train --freeze-encoder`), so one encoder serves search
    and pairs and the head adds a few hundred KB instead of a second encoder. The encoder files are copied byte for
    byte from their verified bytes; the run's encoder must give the bundle's vectors on the task's dev sentences.
    A DSE head the bundle already has is replaced (its files are left out of the copy)."""
    # looked up on each call, so a patched attribute is seen
    from ondevice.runtime import Bundle, verify_files

    run, out = Path(run_dir), Path(out)
    run_cfg = read_json(_config_path(run), "pair run config")
    if _method(run) != "dse" or not run_cfg.get("freeze_encoder"):
        raise OndeviceError(f"{run} fine-tuned its encoder, so its head fits that encoder and not the bundle's; train "
                            "with `ondevice pairs train --freeze-encoder --student <the bundle, unpacked>`, or export "
                            "the run without --bundle")
    check_replaceable(check_out_dir(out))  # before the work, as publish will
    source = Bundle.load(bundle, precision=precision)
    if "dipair" in source.manifest:
        raise OndeviceError(f"bundle {source.path} has a DiPair head; add the head to a bundle without one")
    old = source.manifest.get("pairs")  # a DSE head there (the shipped QQP head, say) is replaced: not copied
    if old is not None and not isinstance(old, dict):
        raise OndeviceError(f"bundle {source.path}: its manifest's pairs block is not an object; re-export the bundle")
    if old and not all(isinstance(old.get(k), str) and old[k] in source.manifest["files"] for k in ("file", "weights")):
        raise OndeviceError(f"bundle {source.path}: its pairs block's file and weights are not files it lists; "
                            "re-export the bundle")
    drop = {old["file"], old["weights"], *(f"golden/{n}.npy" for n in GOLDEN_PAIR_FILES)} if old else set()
    data = data if data is not None else run_cfg["data"]
    try:
        dev = load_pairs(run_cfg["task"], "dev", data, run_cfg.get("split_seed", 0))
    except OndeviceError as exc:
        raise OndeviceError(f"the encoder check and the blend use {run_cfg['task']} dev pairs: {exc} (pass --data DIR)") from None
    texts = list(dict.fromkeys([*dev.a, *dev.b]))[:256]
    pair = PairStudent.load(run)
    cos = cosines(pair.vectors(texts), source.encode(texts))
    if cos.mean() < ENCODER_MATCH[0] or cos.min() < ENCODER_MATCH[1]:
        raise OndeviceError(f"the run's encoder is not the bundle's: cosine {cos.mean():.4f} mean, {cos.min():.4f} min on "
                            f"{len(texts)} dev sentences (needs >= {ENCODER_MATCH[0]} / {ENCODER_MATCH[1]}); train the "
                            f"head on `ondevice unpack --bundle {bundle}` with --freeze-encoder")

    manifest_bytes = (source.path / layouts.MANIFEST).read_bytes()
    files = verify_files(source.path, source.manifest, keep=tuple(n for n in source.manifest["files"] if n not in drop))
    manifest = json.loads(manifest_bytes)
    if manifest != source.manifest:  # the copy must be the bundle that was loaded and checked
        raise OndeviceError(f"bundle {source.path} changed while it was being read; try again")
    manifest["encoder_identity"] = source.encoder_id.encoder_sha256  # same encoder bytes: indexes of either match
    if old:
        del manifest["pairs"]
        manifest["files"] = {n: e for n, e in manifest["files"].items() if n not in drop}
    tmp = stage(out)
    try:
        for name, content in files.items():
            target = tmp.joinpath(*name.split("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        write_manifest(tmp, manifest)
        head_cfg, weights = load_head_weights(run)
        encoder = {"frozen": True, "bundle_manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest(),
                   **({"replaced_head": {"task": old.get("task"), "method": old.get("method")}} if old else {}),
                   "check": {"sentences": len(texts), "mean_cosine": round(float(cos.mean()), 6),
                             "min_cosine": round(float(cos.min()), 6)}}
        add_pair_head(tmp, head_cfg, weights, {"method": "dse", "run": _run_summary(run), "encoder": encoder}, seed=seed)
        if blend and task_spec(run_cfg["task"]).kind != "classes":
            add_blend(tmp, dev)
        publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _config_path(run: Path) -> Path:
    """The run's settings file: dse_config.json, or dvbert_config.json for a DvBERT run."""
    return run / layouts.DVBERT_CONFIG if (run / layouts.DVBERT_CONFIG).is_file() else run / layouts.DSE_CONFIG


def _method(run: Path) -> str:
    return "dvbert" if (run / layouts.DVBERT_CONFIG).is_file() else "dse"


def _run_summary(run: Path) -> dict:
    out: dict[str, Any] = {}
    if _config_path(run).is_file():
        cfg = read_json(_config_path(run), "pair run config")
        out["config"] = {k: cfg[k] for k in ("task", "alpha", "head_hidden", "epochs", "batch_size", "lr", "seed",
                                             "augment_random", "augment_neighbors", "augment_edits", "freeze_encoder",
                                             "teachers", "anneal", "head")
                         if k in cfg}
    if (run / layouts.RUN_DEV).is_file():
        out["student_dev"] = read_json(run / layouts.RUN_DEV, "dev metrics")
    if (run / layouts.RUN_DATA).is_file():
        data = read_json(run / layouts.RUN_DATA, "data summary")
        out["teacher"] = data.get("teacher")
        out["train_pairs"], out["augment_pairs"] = data.get("train_pairs"), data.get("augment_pairs")
        if "teachers" in data:  # DvBERT: every teacher view
            out["teachers"] = [{"order": t["order"], "identity": t["identity"]} for t in data["teachers"]]
    return out
