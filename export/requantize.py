"""An int8 bundle with 8-bit LSTM weights -> the same bundle with 7-bit ones (`ondevice requantize`).

Bundles exported before the int8 LSTM weights were 7-bit (export/quantize.py says why: exact and ~1.5x faster on
x86 CPUs without VNNI) can be converted without their student folder, a DSE pair head included (a DiPair bundle is
exported again instead): `encoder.onnx` gets its
LSTM weights re-rounded (`quantize.requantize_7bit`) and, where the graph predates it, the bit packing of the current
export (`onnx_graph.single_product_packing`: the same codes, less time); every other file is copied byte for byte (each checked
against the source manifest's sha256), and the manifest says what changed. What depended on the old encoder is
measured again or dropped, never carried over: the export checks are recomputed against the bundle's golden fp32
vectors (the source's kept beside them), a pair head's blend with the cosine is refitted on its dev pairs (needs the
data folder), the index identity the source inherited is dropped (codes changed), and `eval` (measured on the old
encoder) is replaced by `evaluation` when given, kept under `eval_before_requantization` otherwise.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from ondevice.export.bundle import publish, stage
from ondevice.export.modelcard import model_card
from ondevice.export.onnx_graph import single_product_packing
from ondevice.export.quantize import SATURATION_FREE_PEAK, int8_weight_peak, requantize_7bit

from ondevice import __version__, layouts
from ondevice._deps import require
from ondevice.bits import unpack
from ondevice.bundle.manifest import seal
from ondevice.corpus import default_data_dir
from ondevice.errors import OndeviceError
from ondevice.eval.pair_tasks import load_pairs
from ondevice.io import sha256_file
from ondevice.runtime import Bundle


def golden_checks(bundle, golden: Path) -> dict[str, Any] | None:
    """How close a bundle's graph comes to its golden fp32 vectors and codes (None without golden files)."""
    files = [golden / "sentences.jsonl", golden / "embeddings.npy", golden / "codes.npy"]
    if not all(f.is_file() for f in files):
        return None
    texts = [json.loads(line) for line in files[0].read_text(encoding="utf-8").splitlines() if line.strip()]
    want, want_codes = np.load(files[1], allow_pickle=False), np.load(files[2], allow_pickle=False)
    emb, codes = bundle.embed(texts)
    cos = (emb * want).sum(1) / np.maximum(np.linalg.norm(emb, axis=1) * np.linalg.norm(want, axis=1), 1e-12)
    bits = (unpack(codes, bundle.bits) == unpack(want_codes, bundle.bits)).mean()
    return {"sentences": len(texts), "reference": "golden/embeddings.npy, golden/codes.npy (the fp32 graph)",
            "mean_cosine_vs_golden_fp32": round(float(cos.mean()), 6), "min_cosine_vs_golden_fp32": round(float(cos.min()), 6),
            "bit_agreement_vs_golden_fp32": round(float(bits), 6)}


def _encoder_check(block: dict, new, source, dev) -> dict:
    """A pair head's `encoder` block with its check measured again: the new encoder against the source's (which the
    head was checked against at export; that check is kept as `check_before_requantization`)."""
    # the pairs add-on: loaded only for pair models, never on import
    from ondevice.pairs.metrics import cosines

    texts = list(dict.fromkeys([*dev.a, *dev.b]))[: block["check"].get("sentences", 256)]
    cos = cosines(new.encode(texts), source.encode(texts))
    return {**block, "check": {"sentences": len(texts), "mean_cosine": round(float(cos.mean()), 6),
                               "min_cosine": round(float(cos.min()), 6),
                               "against": "the encoder this one was requantized from (see check_before_requantization)"},
            "check_before_requantization": block["check"]}


def _card(manifest: dict) -> str:
    from ondevice.pairs.export import card_section

    return model_card(manifest) + (card_section(manifest["pairs"]) if "pairs" in manifest else "")


def requantize_bundle(src: str | Path, out: str | Path, evaluation: dict | None = None,
                      data: str | Path | None = None) -> dict[str, Any]:
    """Write `src` (an int8 bundle, or 'pretrained') to `out` with 7-bit LSTM weights; returns the manifest's record."""
    onnx = require("onnx", "export")
    from ondevice.pairs.export import add_blend

    # looked up on each call, so a patched attribute is seen
    from ondevice.runtime import Bundle, resolve_bundle, verify_files

    path = resolve_bundle(src)
    source = Bundle.load(path, threads=1)
    if source.precision != "int8":
        raise OndeviceError(f"{path} is a {source.precision} bundle; only int8 bundles have int8 weights to requantize")
    if "dipair" in source.manifest:  # its token-state checks were measured through the int8 encoder: export it again
        raise OndeviceError(f"{path} carries a DiPair head, whose int8 token-state checks depend on the encoder; export "
                            "it again with `ondevice pairs dipair-export` (new exports have 7-bit weights)")
    manifest = copy.deepcopy(source.manifest)
    encoder = verify_files(path, manifest, keep=(layouts.ENCODER_ONNX,))[layouts.ENCODER_ONNX]
    model = onnx.load_model_from_string(encoder)
    peak = int8_weight_peak(model)
    if peak <= SATURATION_FREE_PEAK:
        raise OndeviceError(f"{path}: its int8 LSTM weights are within +-{SATURATION_FREE_PEAK} already (7-bit); "
                            "nothing to requantize")
    channels = requantize_7bit(model)
    repacked = single_product_packing(model)  # same codes, ~0.08 ms less per sentence (export/onnx_graph.py)
    head = "pairs" if "pairs" in manifest else None
    dev = head_dev = None
    data = data if data is not None else _default_data()
    # before anything is written: a missing data folder stops it here
    split_seed = int(((manifest[head].get("run") or {}).get("config") or {}).get("split_seed", 0)) if head else 0
    if head and manifest[head].get("blend"):
        dev = _dev_pairs(manifest[head]["blend"]["fitted_on"]["task"], data, split_seed, "blend is refitted")
    if head and manifest[head].get("encoder", {}).get("check"):
        head_dev = _dev_pairs(manifest[head]["task"], data, split_seed, "encoder check runs")
    out = Path(out)
    staging = stage(out)
    try:
        for name, entry in manifest["files"].items():
            if name in (layouts.ENCODER_ONNX, layouts.MODEL_CARD):
                continue
            target = staging / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path / name, target)
            if sha256_file(target) != entry["sha256"]:
                raise OndeviceError(f"{path / name} changed while it was copied; run again on an unchanging bundle")
        (staging / layouts.ENCODER_ONNX).write_bytes(model.SerializeToString())
        record = {"from_manifest_sha256": hashlib.sha256((path / layouts.MANIFEST).read_bytes()).hexdigest(),
                  "from_encoder_sha256": hashlib.sha256(encoder).hexdigest(), "weight_bits": 7,
                  "channels_rerounded": channels, "largest_weight_before": peak, "ondevice": __version__,
                  "bit_packing": ("rewritten as one (B x bytes, 8) x (8, 1) product, as export writes it now (the "
                                  "same codes)" if repacked else "unchanged"),
                  "how": "int8 LSTM weights re-rounded per output channel: q' = round(q * 64 / max|q|), "
                         "scale' = scale * max|q| / 64 (the float weights were not in the bundle)",
                  "source_checks": manifest.get("checks")}
        manifest.pop("encoder_identity", None)  # inherited from the source encoder: the codes are not its codes now
        manifest["onnx"] = {**manifest.get("onnx", {}), "int8_weight_bits": 7}
        manifest["requantized"] = record
        if "eval" in manifest and evaluation is None:
            manifest["eval_before_requantization"] = manifest.pop("eval")
        if evaluation is not None:
            manifest.pop("eval", None)
            manifest["eval"] = evaluation
        _seal(staging, manifest)  # provisional: the checks below run through the new graph
        new = Bundle.load(staging, threads=1)
        checks = golden_checks(new, staging / layouts.GOLDEN)
        if checks is not None:
            record["source_checks_vs_golden_fp32"] = golden_checks(source, path / layouts.GOLDEN)
            manifest["checks"] = checks
        if head_dev is not None:
            manifest[head]["encoder"] = _encoder_check(manifest[head]["encoder"], new, source, head_dev)
        _seal(staging, manifest, card=_card)
        if dev is not None:
            add_blend(staging, dev)  # refit on the new encoder; rewrites the golden blend keys and reseals
            _seal(staging, json.loads((staging / layouts.MANIFEST).read_text(encoding="utf-8")), card=_card)
        publish(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return json.loads((out / layouts.MANIFEST).read_text(encoding="utf-8"))["requantized"]


def _seal(folder: Path, manifest: dict, card=None) -> None:
    """Seal the rewritten bundle through the format's owner, then load it as an app would."""
    seal(folder, manifest, card=card)
    Bundle.load(folder)


def _dev_pairs(task: str, data: str | Path, split_seed: int, what: str):
    """The dev pairs of `task` (as the head's run split them); missing data is a one-line error naming --data."""
    try:
        return load_pairs(task, "dev", data, split_seed)
    except OndeviceError as exc:
        raise OndeviceError(f"the pair head's {what} on {task} dev pairs: {exc} (pass --data DIR)") from None


def _default_data() -> Path:
    return default_data_dir()
