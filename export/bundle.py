"""`ondevice export`: student + binarizer -> one self-contained bundle folder (see ondevice.runtime for loading).

The folder is assembled in a temporary sibling, checked (ONNX vs eager torch, then a full `Bundle.load`), and only
then renamed into place, so a failed export never leaves a half-written bundle behind.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from ondevice.export import golden as golden_mod
from ondevice.export.modelcard import model_card
from ondevice.export.onnx_graph import IR_VERSION, OPSET, build_graph
from ondevice.export.quantize import QUANTIZED_OPS, WEIGHT_BITS, build_int8_graph
from ondevice.export.torchscript import quantize_encoder, save_torchscript, scriptable_encoder
from safetensors.numpy import save_file

from ondevice import __version__, layouts
from ondevice._deps import require
from ondevice.bits import BIT_ORDER, code_bytes, pack, unpack
from ondevice.bundle.manifest import seal
from ondevice.errors import OndeviceError
from ondevice.io import (
    atomic_path,
    canonical_safetensors,
    check_out_dir,
    clean_stale_temps,
    read_json,
    temp_name,
    write_json,
)
from ondevice.onnxproto import external_tensors
from ondevice.ort_session import cpu_session
from ondevice.runtime import FORMAT_VERSION, Bundle, read_manifest
from ondevice.student import Student

CHOICES = (*layouts.PRECISIONS, "both")
PROJECTIONS = ("auto", "float16", "float32")
CHECK_SENTENCES = 256  # generated sentences the export-time parity checks run on


@dataclass
class ExportConfig:
    """What `export` writes; `precision="both"` writes fp32/ and int8/ bundles under the output folder."""

    precision: str = "fp32"
    golden: bool = False
    golden_extra: tuple[str, ...] = ()
    with_weights: bool = False
    torchscript: bool = True  # encoder.pt beside encoder.onnx; off for a bundle that must stay small
    golden_count: int = 1000  # generated golden sentences (the hard cases and --golden-sentences come on top)
    seed: int = 0
    # how the binarizer projection is stored (in encoder.onnx and binarizer.safetensors alike): "auto" is float16
    # for int8 bundles (half the bytes; every runtime then uses the same rounded weights) and float32 for fp32 ones
    projection: str = "auto"
    # int8 LSTM weights: 7 bits (exact and fast on x86 without VNNI too, see export/quantize.py) or the full 8
    int8_weight_bits: int = 7

    def validate(self) -> None:
        """Reject impossible values with a one-line error naming the flag."""
        if self.precision not in CHOICES:
            raise OndeviceError(f"--precision must be one of {', '.join(CHOICES)}, got {self.precision!r}")
        if self.int8_weight_bits not in WEIGHT_BITS:
            raise OndeviceError(f"--int8-weight-bits must be 7 or 8, got {self.int8_weight_bits!r}")
        if self.projection not in PROJECTIONS:
            raise OndeviceError(f"--projection must be one of {', '.join(PROJECTIONS)}, got {self.projection!r}")
        if self.golden_extra and not self.golden:
            raise OndeviceError("--golden-sentences adds sentences to the golden files: add --golden, or leave it out")

    def projection_dtype(self, precision: str) -> str:
        """float16 / float32: the stored projection of a `precision` bundle."""
        if self.projection != "auto":
            return self.projection
        return "float16" if precision == "int8" else "float32"


def _versions() -> dict[str, str]:
    out = {"ondevice": __version__, "python": platform.python_version()}
    for dist in ("numpy", "torch", "onnx", "onnxruntime", "safetensors"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def training_summary(student_dir: Path | None, student: Student) -> dict[str, Any]:
    """Distillation settings and the last epoch's held-out cosine, when the student dir has them."""
    summary: dict[str, Any] = {"parameters": student.num_parameters(),
                               "parameters_without_embeddings": student.num_parameters(embeddings=False),
                               "word_vectors": student.config.word_vectors}
    if student_dir is None:
        return summary
    if (student_dir / layouts.DISTILL_CONFIG).is_file():
        cfg = read_json(student_dir / layouts.DISTILL_CONFIG, "distill config")
        cfg = cfg if isinstance(cfg, dict) else {}
        summary.update({k: cfg.get(k) for k in ("corpus", "max_sentences", "train_splits", "train_split_repeats", "epochs",
                                                  "batch_size", "lr", "lr_schedule", "seed", "vocab_size",
                                                  "freeze_embeddings") if k in cfg})
        if cfg.get("init_from"):  # a continued run: name the student it started from (not the local path) and its hash
            summary["init_from"] = Path(str(cfg["init_from"])).name
            summary["init_sha256"] = cfg.get("init_sha256")
    log = student_dir / layouts.TRAIN_LOG
    if log.is_file():
        try:
            lines = [json.loads(x) for x in log.read_text(encoding="utf-8").splitlines() if x.strip()]
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            lines = []  # a damaged log only costs the model card its training summary
        lines = [x for x in lines if isinstance(x, dict)]
        if lines:
            summary["epochs_done"] = lines[-1].get("epoch")
            summary["held_out_cosine_to_teacher"] = lines[-1].get("held_out_cosine")
            summary["held_out_n"] = lines[-1].get("held_out_n")
    return summary


def _binarizer_config(binarizer) -> dict[str, Any]:
    config = getattr(binarizer, "config", None)
    if dataclasses.is_dataclass(config):
        return dataclasses.asdict(config)
    return {"method": binarizer.method, "bits": binarizer.bits, "dim": binarizer.dim, "bit_order": BIT_ORDER}


def stored_projection(projection: np.ndarray, dtype: str) -> np.ndarray:
    """The projection as a bundle stores it (float16 or float32)."""
    return np.ascontiguousarray(projection, np.float16 if dtype == "float16" else np.float32)


def _write_binarizer(directory: Path, binarizer, dtype: str) -> dict[str, Any]:
    """binarizer.json + binarizer.safetensors with only what inference needs: projection (`dtype`) and offset.

    A float16 projection records the affine_sha256 of the float32 binarizer it was rounded from: indexes keep
    treating its codes as the same binarizer's (close, like int8 vs fp32), not as another binarizer's.
    """
    # loaded on use: keeps the CLI's start (`ondevice --help` imports every command) light
    from ondevice.index import affine_sha256

    A, c = binarizer.affine()
    metadata = {"format": "ondevice-binarizer", "bit_order": BIT_ORDER, "projection_dtype": dtype}
    if dtype == "float16":
        metadata["affine_sha256"] = affine_sha256(A, c)
    with atomic_path(directory / layouts.BINARIZER_WEIGHTS) as tmp:
        save_file({"projection": stored_projection(A, dtype), "offset": np.ascontiguousarray(c, np.float32)},
                  str(tmp), metadata=metadata)
        canonical_safetensors(tmp)  # the same export gives the same bytes
    config = _binarizer_config(binarizer)
    write_json(directory / layouts.BINARIZER_CONFIG, config)
    return config


def _state(student: Student) -> dict[str, np.ndarray]:
    state = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in student.model.state_dict().items()}
    bad = [k for k, v in state.items() if not np.isfinite(v).all()]
    if bad:
        raise OndeviceError(f"the student has NaN or inf weights (in {bad[0]}); export a finite student "
                            "(an earlier checkpoint, or retrain with a lower --lr)")
    return state


def _checks(student: Student, binarizer, bundle: Bundle, sentences: Sequence[str], dtype: str) -> dict[str, Any]:
    """Parity of the bundle's graph with the eager student + binarizer on `sentences`; raises if fp32 drifts."""
    ref = student.encode(sentences).astype(np.float32)
    A, c = binarizer.affine()
    ref_codes = pack((ref @ A + c) > 0)
    emb, codes = bundle.embed(sentences)
    bits = lambda x, y: float((unpack(x, binarizer.bits) == unpack(y, binarizer.bits)).mean())
    cos = (emb * ref).sum(1) / np.maximum(np.linalg.norm(emb, axis=1) * np.linalg.norm(ref, axis=1), 1e-12)
    out = {"sentences": len(sentences), "max_abs_diff_vs_torch": float(np.abs(emb - ref).max()),
           "mean_cosine_vs_torch": round(float(cos.mean()), 6), "bit_agreement_vs_torch": round(bits(codes, ref_codes), 6)}
    if dtype == "float16":  # the rounding alone: torch vectors through the stored vs the float32 projection
        rounded = pack((ref @ stored_projection(A, dtype).astype(np.float32) + c) > 0)
        out["bit_agreement_float16_projection"] = round(bits(rounded, ref_codes), 6)
    if bundle.precision == "fp32" and out["max_abs_diff_vs_torch"] >= 1e-4:
        raise OndeviceError(f"exported fp32 graph differs from torch by {out['max_abs_diff_vs_torch']:.2e} "
                            "(limit 1e-4); please report this with the student config")
    return out


def _reference_runner(model: bytes):
    """run_ids(ids, lengths) of an in-memory fp32 graph, for golden values of an int8 bundle."""
    session = cpu_session(model)
    return lambda ids, lengths: tuple(session.run(["embedding", "code"], {"ids": ids, "lengths": lengths}))


def _manifest(student: Student, binarizer_cfg: dict, precision: str, dtype: str, training: dict,
              evaluation: dict | None, checks: dict, golden: dict | None, weight_bits: int = 7) -> dict[str, Any]:
    cfg = student.config
    manifest: dict[str, Any] = {
        "format": layouts.BUNDLE_FORMAT, "format_version": FORMAT_VERSION, "files": {},
        "dim": cfg.output_dim, "bits": int(binarizer_cfg["bits"]), "code_bytes": code_bytes(int(binarizer_cfg["bits"])),
        "bit_order": BIT_ORDER, "precision": precision,
        "inputs": {"ids": "int64 [batch, tokens]", "lengths": "int64 [batch]"},
        "outputs": {"embedding": f"float32 [batch, {cfg.output_dim}]",
                    "code": f"uint8 [batch, {code_bytes(int(binarizer_cfg['bits']))}]"},
        "tokenizer": dataclasses.asdict(student.tokenizer.spec),
        "student": dataclasses.asdict(cfg), "binarizer": binarizer_cfg,
        "teacher": dict(cfg.teacher), "training": training,
        "onnx": {"opset": OPSET, "ir_version": IR_VERSION,
                 "quantized": list(QUANTIZED_OPS) + ["embedding (row-wise int8)"] if precision == "int8" else []},
        "checks": checks, "versions": _versions(), "projection_dtype": dtype,
    }
    if precision == "int8":
        manifest["onnx"]["int8_weight_bits"] = weight_bits
        # the graph's range anchors make each row's result independent of the other rows of a call (older int8
        # bundles said "int8_rows_per_run": 1 instead: their LSTM quantized activations over the whole call)
        manifest["int8_rows_independent"] = True
    if evaluation:
        manifest["eval"] = evaluation
    if golden:
        manifest["golden"] = golden
    return manifest


def write_bundle(directory: Path, student: Student, binarizer, precision: str, config: ExportConfig,
                 training: dict, evaluation: dict | None = None) -> Path:
    """Write one bundle of `precision` into the empty folder `directory`."""
    state = _state(student)
    dtype = config.projection_dtype(precision)
    A, c = binarizer.affine()
    A = stored_projection(A, dtype).astype(np.float32)  # every runtime (ONNX, TorchScript, Java) uses these weights
    reference = build_graph(student.config, state, A, c, projection_dtype=dtype).SerializeToString()
    graph = (build_int8_graph(student.config, state, A, c, projection_dtype=dtype,
                              weight_bits=config.int8_weight_bits).SerializeToString()
             if precision == "int8" else reference)
    if external_tensors(graph):  # Bundle.load refuses these; fail here with the cause rather than there
        raise OndeviceError("the exported graph refers to external data files; please report this with the student config")
    with atomic_path(directory / layouts.ENCODER_ONNX) as tmp:
        tmp.write_bytes(graph)
    if config.torchscript:
        module = scriptable_encoder(student.model, A, c)
        save_torchscript(quantize_encoder(module) if precision == "int8" else module, directory / layouts.ENCODER_TORCHSCRIPT)
    student.tokenizer.save(directory)
    binarizer_cfg = _write_binarizer(directory, binarizer, dtype)
    # Weights ship once: with --precision both only the fp32 folder gets them (the Java forward pass is fp32 anyway).
    weights_here = config.with_weights and not (config.precision == "both" and precision == "int8")
    if weights_here:
        with atomic_path(directory / "student.safetensors") as tmp:
            save_file(state, str(tmp), metadata={"format": "ondevice-student", "precision": "fp32"})
            canonical_safetensors(tmp)

    # a provisional manifest lets the runtime load the graph for the checks and the golden files
    provisional = _manifest(student, binarizer_cfg, precision, dtype, training, evaluation, {}, None, config.int8_weight_bits)
    seal(directory, provisional)
    bundle = Bundle.load(directory, threads=1)
    sentences = golden_mod.golden_sentences(student.tokenizer, n=CHECK_SENTENCES, seed=config.seed + 7)
    checks = _checks(student, binarizer, bundle, sentences, dtype)
    golden = None
    if config.golden:
        texts = golden_mod.golden_sentences(student.tokenizer, n=config.golden_count, seed=config.seed,
                                                extra=config.golden_extra)
        # golden values are the fp32 model's, so fp32 runtimes (ONNX, TorchScript, a Java forward pass on
        # student.safetensors) check tightly against any bundle; int8 runtimes within the tolerances in `checks`
        run_ids = bundle.run_ids if precision == "fp32" else _reference_runner(reference)
        golden = golden_mod.write_golden(directory, texts, student.tokenizer, run_ids, seed=config.seed)

    manifest = _manifest(student, binarizer_cfg, precision, dtype, training, evaluation, checks, golden, config.int8_weight_bits)
    if config.with_weights:
        manifest["weights"] = ("student.safetensors: fp32 student weights for runtimes with their own forward pass"
                               if weights_here else "not in this folder: the fp32 weights are in ../fp32/student.safetensors")
    seal(directory, manifest, card=model_card)  # the card lists every file but itself
    Bundle.load(directory)  # the finished bundle must pass the same verification an app's load does
    return directory


def _bundle_entries(folder: Path) -> set[str] | None:
    """The top-level names a valid bundle in `folder` owns (its manifest and the first part of every listed file),
    or None when `folder` holds no valid bundle manifest."""
    try:
        manifest = read_manifest(folder)
    except OndeviceError:
        return None
    return {layouts.MANIFEST, *(name.split("/")[0] for name in manifest["files"])}


def _only_bundle(folder: Path, prefix: str = "") -> str | None:
    """None when `folder` holds an earlier export and nothing else; otherwise what else it holds, for the error."""
    entries = sorted(p.name for p in folder.iterdir())
    if not entries:
        return None
    owned = _bundle_entries(folder)
    if owned is None:  # the `--precision both` layout: one bundle per precision folder, nothing beside them
        subfolders = [n for n in entries if n in layouts.PRECISIONS and (folder / n).is_dir() and not (folder / n).is_symlink()]
        if not subfolders:
            return f"no valid bundle manifest{f' in {prefix}' if prefix else ''}"
        inner = next((m for n in subfolders if (m := _only_bundle(folder / n, f"{prefix}{n}/")) is not None), None)
        if inner is not None:
            return inner
        owned = set(subfolders)
    extra = [prefix + n for n in entries if n not in owned]
    return f"files that are not part of the bundle ({', '.join(extra[:3])}{', ...' if len(extra) > 3 else ''})" if extra else None


def check_replaceable(out: Path) -> None:
    """Refuse an `out` that is a link, or a folder holding anything but an earlier export (which is replaced)."""
    if out.is_symlink():
        raise OndeviceError(f"{out} is a symbolic link; give the real folder as --out")
    if out.is_dir():
        other = _only_bundle(out)
        if other is not None:
            raise OndeviceError(f"{out} exists and is not a bundle: it holds {other}; choose an empty or new --out "
                                "(an earlier export there is replaced, nothing else is)")


def stage(out: Path) -> Path:
    """A private staging folder beside `out` for `publish` (stale ones of killed exports are cleared first)."""
    check_replaceable(check_out_dir(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temps(out.parent, out.name)
    staging = out.parent / temp_name(out.name)
    staging.mkdir(mode=0o700)
    return staging


def publish(staging: Path, out: Path) -> None:
    """Move `staging` to `out`, replacing an earlier export there but never an unrelated folder."""
    for p in [staging, *staging.rglob("*")]:  # temp files and dirs are private (0600/0700); a bundle is shared
        p.chmod(0o755 if p.is_dir() else 0o644)
    check_replaceable(out)  # again: the folder may have changed while the export ran
    if out.exists():
        old = out.parent / temp_name(out.name)  # a fresh name: never a folder of the user's (a kill leaves it stale)
        out.rename(old)
        staging.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        staging.rename(out)


def export(student: Student, binarizer, out: str | Path, config: ExportConfig | None = None,
           student_dir: str | Path | None = None, evaluation: dict | None = None) -> list[Path]:
    """Export `student` + `binarizer` to `out`; returns the bundle folder(s) written."""
    require("onnx", "export")
    config = config or ExportConfig()
    config.validate()
    if binarizer.dim != student.config.output_dim:
        raise OndeviceError(f"binarizer expects {binarizer.dim}-d vectors but the student gives "
                            f"{student.config.output_dim}-d; fit the binarizer on this student's embeddings")
    out = Path(out)
    training = training_summary(Path(student_dir) if student_dir else None, student)
    staging = stage(out)
    try:
        precisions = list(layouts.PRECISIONS) if config.precision == "both" else [config.precision]
        for p in precisions:
            folder = staging / p if config.precision == "both" else staging
            folder.mkdir(parents=True, exist_ok=True)
            write_bundle(folder, student, binarizer, p, config, training, evaluation)
        publish(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return [out / p for p in precisions] if config.precision == "both" else [out]
