"""A student folder from an exported bundle, so a bundle (the shipped pretrained one included) can be trained on.

`ondevice distill --init-from` and `ondevice pairs train/dvbert/dipair --student` take a student folder (config.json,
model.safetensors, vocab.txt, tokenizer.json). A bundle carries the same network as an ONNX graph: `unpack_bundle`
reads its weights back out of the verified `encoder.onnx` (or takes `student.safetensors` where an export with
`--with-weights` left the fp32 weights), undoing what export did: ONNX gate order back to torch's, the int8 range
anchors (export/onnx_graph.py) removed, int8 weights (embedding rows, LSTM channels) dequantized. An int8 bundle
therefore gives the fp32 network up to int8 rounding of its weights; `unpacked.json` beside the weights says which
it was and how close the unpacked network comes to the bundle's golden fp32 embeddings.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ondevice import layouts
from ondevice._deps import require
from ondevice.errors import OndeviceError
from ondevice.io import atomic_path, check_out_kind, dataclass_from_dict, write_json
from ondevice.student import Student, StudentConfig
from ondevice.tokenizer import Tokenizer

GOLDEN_TEXTS, GOLDEN_VECTORS = "golden/sentences.jsonl", "golden/embeddings.npy"
_KEPT = ("student.safetensors", GOLDEN_TEXTS, GOLDEN_VECTORS)  # read besides what the runtime parses
_TORCH_GATES = (0, 2, 3, 1)  # torch gate k (input, forget, cell, output) is ONNX gate _TORCH_GATES[k] (i, o, f, c)


def _student_config(manifest: dict, where: str) -> StudentConfig:
    raw = manifest.get("student")
    if not isinstance(raw, dict):
        raise OndeviceError(f"{where}: its manifest has no student config (not an encoder bundle); unpack a bundle "
                            "written by `ondevice export` or `ondevice pairs export`")
    config = dataclass_from_dict(StudentConfig, raw, f"{where} manifest student config")
    config.validate(f"{where} manifest student config")
    return config


def _initializers(model_bytes: bytes) -> dict[str, np.ndarray]:
    onnx = require("onnx", "export")
    model = onnx.load_model_from_string(model_bytes)
    return {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}


def _dequantized(inits: dict[str, np.ndarray], name: str) -> np.ndarray:
    """An LSTM weight in ONNX layout (dirs, 4H, in): float as stored, or onnxruntime's int8 (dirs, in, 4H) dequantized."""
    if name in inits:
        return inits[name].astype(np.float32)
    q = inits.get(f"{name}_quantized")
    if q is None:
        raise KeyError(f"{name}")
    dirs = q.shape[0]
    scale = inits[f"{name}_scale"].astype(np.float32).reshape(dirs, 1, -1)
    zero = inits[f"{name}_zero_point"].astype(np.float32).reshape(dirs, 1, -1)
    return np.ascontiguousarray(((q.astype(np.float32) - zero) * scale).transpose(0, 2, 1))


def state_from_graph(model_bytes: bytes, config: StudentConfig) -> dict[str, np.ndarray]:
    """The torch state dict of `config`'s student from the weights of an encoder graph (fp32 or int8, anchored or not)."""
    inits = _initializers(model_bytes)
    E, H = config.embedding_dim, config.hidden_size
    if "embedding_int8" in inits:
        table = inits["embedding_int8"].astype(np.float32) * inits["embedding_scale"].astype(np.float32)
    elif "embedding_weight" in inits:
        table = inits["embedding_weight"].astype(np.float32)
    else:
        raise OndeviceError("encoder.onnx has no embedding table (embedding_weight or embedding_int8)")
    W, R = _dequantized(inits, "lstm_W"), _dequantized(inits, "lstm_R")
    B = inits["lstm_B"].astype(np.float32)
    HA = R.shape[2]  # hidden units in the graph: H, or H plus the range anchors
    proj = inits["proj_weight_t"].astype(np.float32).T
    # the LSTM's layout before it is sliced (slicing would hide a wider input or a missing anchor); the tensors the
    # student gets are checked against its config by _check_state
    got = {"lstm_W": W.shape, "lstm_R": R.shape, "lstm_B": B.shape}
    if got != {"lstm_W": (2, 4 * HA, E + HA - H), "lstm_R": (2, 4 * HA, HA), "lstm_B": (2, 8 * HA)} or HA < H:
        raise OndeviceError(f"encoder.onnx LSTM weights {got} do not fit the manifest's student {asdict(config)}; "
                            "re-export the bundle")
    state = {"embedding.weight": table, "proj.weight": np.ascontiguousarray(proj)}
    for d, suffix in enumerate(("l0", "l0_reverse")):
        rows = np.concatenate([np.arange(g * HA, g * HA + H) for g in _TORCH_GATES])  # real units, torch gate order
        state[f"lstm.weight_ih_{suffix}"] = np.ascontiguousarray(W[d][rows, :E])
        state[f"lstm.weight_hh_{suffix}"] = np.ascontiguousarray(R[d][rows][:, :H])
        state[f"lstm.bias_ih_{suffix}"] = np.ascontiguousarray(B[d, :4 * HA][rows])
        state[f"lstm.bias_hh_{suffix}"] = np.ascontiguousarray(B[d, 4 * HA:][rows])
    return state


def unpack_bundle(bundle: str | Path, out: str | Path, precision: str | None = None) -> dict:
    """Write a student folder at `out` from a bundle folder, or 'pretrained' for the shipped model; returns the
    provenance record it writes as unpacked.json."""
    # looked up on each call, so a patched attribute is seen
    from ondevice.runtime import PARSED, check_precision, read_manifest, resolve_bundle, verify_files

    _check_unpack_out(out)  # before any work
    path = resolve_bundle(bundle, precision)
    manifest = read_manifest(path)
    check_precision(path, manifest, precision)  # never quietly the other precision
    files = verify_files(path, manifest, (*PARSED, *_KEPT))  # every byte checked before any is parsed
    config = _student_config(manifest, f"bundle {path}")
    tokenizer = Tokenizer.from_bytes(files[layouts.VOCAB], files[layouts.TOKENIZER_JSON], str(path))
    if len(tokenizer) != config.vocab_size:
        raise OndeviceError(f"bundle {path}: vocab.txt has {len(tokenizer)} tokens, its student config {config.vocab_size}")
    st = require("safetensors.numpy", "train")
    if "student.safetensors" in files:  # an export with --with-weights: the exact fp32 weights
        try:
            state = dict(st.load(files["student.safetensors"]))
        except Exception as exc:  # noqa: BLE001 -- safetensors raises its own error types for corrupt headers
            raise OndeviceError(f"bundle {path}: cannot read student.safetensors ({type(exc).__name__}); re-export it") from None
        source = "student.safetensors (fp32, exact)"
    else:
        try:
            state = state_from_graph(files[layouts.ENCODER_ONNX], config)
        except (KeyError, ValueError) as exc:  # a graph not written by ondevice's export: a weight missing or malformed
            raise OndeviceError(f"bundle {path}: encoder.onnx is not an ondevice encoder graph ({type(exc).__name__}: "
                                f"{str(exc)[:80]}); re-export it with `ondevice export`") from None
        source = f"encoder.onnx ({manifest['precision']}{', weights dequantized' if manifest['precision'] == 'int8' else ''})"
    _check_state(state, config, path)  # nothing is written from weights that do not fit the student
    out = _check_unpack_out(out)
    fresh = not out.exists() or not any(out.iterdir())
    out.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_path(out / layouts.STUDENT_WEIGHTS) as tmp:
            st.save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in state.items()}, str(tmp))
        tokenizer.save(out)
        write_json(out / layouts.STUDENT_CONFIG, config)
        record = {"bundle": str(path), "precision": manifest["precision"], "weights_from": source,
                  "manifest_sha256": hashlib.sha256((path / layouts.MANIFEST).read_bytes()).hexdigest(),
                  "golden": _golden_check(path, files, out)}
        write_json(out / layouts.UNPACKED, record)
    except BaseException:
        if fresh:  # a failed unpack leaves no half-written student (which a rerun would refuse as someone's)
            for name in layouts.STUDENT_FILES:
                (out / name).unlink(missing_ok=True)
        raise
    return record


def _check_unpack_out(out: str | Path) -> Path:
    """`out` as the folder of an unpacked student: new, empty or an earlier unpack, never a trained student."""
    out = check_out_kind(out, "student")
    if layouts.identify(out) == "student" and not (out / layouts.UNPACKED).is_file():
        raise OndeviceError(f"--out {out} holds a trained student (not an earlier unpack); choose an empty or new --out")
    return out


def _check_state(state: dict[str, np.ndarray], config: StudentConfig, path: Path) -> None:
    """The weights are exactly the student's tensors, in its shapes, all finite."""
    E, H = config.embedding_dim, config.hidden_size
    expected = {"embedding.weight": (config.vocab_size, E), "proj.weight": (config.output_dim, config.pooled_dim)}
    for suffix in ("l0", "l0_reverse"):
        expected.update({f"lstm.weight_ih_{suffix}": (4 * H, E), f"lstm.weight_hh_{suffix}": (4 * H, H),
                         f"lstm.bias_ih_{suffix}": (4 * H,), f"lstm.bias_hh_{suffix}": (4 * H,)})
    got = {k: tuple(np.shape(v)) for k, v in state.items()}
    if got != expected:
        wrong = sorted(set(got) ^ set(expected)) or sorted(k for k in got if got[k] != expected[k])
        raise OndeviceError(f"bundle {path}: its weights do not fit its student config (first: {wrong[0]}); re-export it")
    bad = [k for k, v in state.items() if not np.isfinite(v).all()]
    if bad:
        raise OndeviceError(f"bundle {path}: NaN or inf weights (in {bad[0]}); re-export it")


def _golden_check(path: Path, files: dict[str, bytes], out: Path) -> dict | None:
    """The unpacked network against the bundle's golden fp32 embeddings (if it carries them): mean and min cosine."""

    if not {GOLDEN_TEXTS, GOLDEN_VECTORS} <= set(files):
        return None
    student = Student.load(out)
    try:  # the bundle's own files: a hand-made one may hold anything its manifest vouches for
        lines = files[GOLDEN_TEXTS].decode("utf-8").splitlines()
        texts = [json.loads(line) for line in lines if line.strip()]
        expected = np.load(io.BytesIO(files[GOLDEN_VECTORS]), allow_pickle=False)
    except (ValueError, RecursionError, UnicodeDecodeError, OSError) as exc:
        raise OndeviceError(f"bundle {path}: cannot read its golden files ({type(exc).__name__}); re-export it") from None
    if (not all(isinstance(x, str) for x in texts) or expected.shape != (len(texts), student.config.output_dim)
            or not np.issubdtype(expected.dtype, np.floating)):
        raise OndeviceError(f"bundle {path}: golden/sentences.jsonl and golden/embeddings.npy do not match its "
                            "student; re-export it")
    got = student.encode(texts, batch_size=64)
    cos = (got * expected).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1) + 1e-12)
    return {"sentences": len(texts), "mean_cosine": round(float(cos.mean()), 6), "min_cosine": round(float(cos.min()), 6)}
