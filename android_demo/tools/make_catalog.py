"""Fill the Android app's assets: the bundle files the app reads, and a catalog of packed codes to search.

    .venv/bin/python android_demo/tools/make_catalog.py --bundle my-bundle --sentences catalog.txt \\
        [--assets android_demo/app/src/main/assets]

Writes
    ASSETS/bundle/   manifest.json, encoder.onnx, tokenizer.json, vocab.txt, binarizer.json,
                     binarizer.safetensors (+ student.safetensors when the bundle has it: the pure-Java encoder)
    ASSETS/catalog/  sentences.jsonl  one JSON string per line (row i)
                     codes.npy        uint8 (n, code_bytes): row i = the code of sentence i, from the bundle's encoder
                     catalog.json     count, code_bytes, bits, and the sha256 of the encoder.onnx that made the codes

--sentences is a UTF-8 text file with one sentence per line (blank lines skipped) or a .jsonl file with one JSON
string per line. The app verifies every bundle file it reads against manifest.json (size and SHA-256), so the
golden/ files and encoder.pt are left out to keep the APK small.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

APP_FILES = ("manifest.json", "encoder.onnx", "tokenizer.json", "vocab.txt", "binarizer.json", "binarizer.safetensors",
             "README.md")
OPTIONAL = ("student.safetensors",)
DEFAULT_ASSETS = Path(__file__).resolve().parents[1] / "app" / "src" / "main" / "assets"


def read_sentences(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        out = [json.loads(line) for line in text.split("\n") if line.strip()]
        if not all(isinstance(s, str) for s in out):
            raise SystemExit(f"{path}: every line must be a JSON string")
        return out
    return [line for line in text.splitlines() if line.strip()]


def build(bundle_dir: Path, sentences: list[str], assets: Path, precision: str | None = None) -> dict:
    from ondevice.runtime import Bundle

    bundle = Bundle.load(bundle_dir, precision=precision)  # verifies every checksum
    if not sentences:
        raise SystemExit("no sentences: the catalog needs at least one")
    codes = bundle.codes(sentences)
    out_bundle, out_catalog = assets / "bundle", assets / "catalog"
    for folder in (out_bundle, out_catalog):
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
    for name in APP_FILES + OPTIONAL:
        src = bundle.path / name
        if src.is_file():
            shutil.copyfile(src, out_bundle / name)
        elif name not in OPTIONAL and name != "README.md":
            raise SystemExit(f"{bundle.path} has no {name}; re-export it with `ondevice export`")
    (out_catalog / "sentences.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sentences), encoding="utf-8")
    with open(out_catalog / "codes.npy", "wb") as fh:
        np.lib.format.write_array(fh, np.ascontiguousarray(codes, dtype=np.uint8), version=(1, 0), allow_pickle=False)
    info = {"count": len(sentences), "code_bytes": bundle.code_bytes, "bits": bundle.bits,
            "encoder_sha256": bundle.manifest["files"]["encoder.onnx"]["sha256"], "precision": bundle.precision}
    (out_catalog / "catalog.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return info


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bundle", required=True, type=Path, help="folder written by `ondevice export`")
    p.add_argument("--sentences", required=True, type=Path, help="catalog text: one sentence per line, or .jsonl")
    p.add_argument("--assets", type=Path, default=DEFAULT_ASSETS, help="the app's assets folder")
    p.add_argument("--precision", choices=("fp32", "int8"), default=None,
                   help="which bundle of an `--precision both` export to ship")
    a = p.parse_args(argv)
    info = build(a.bundle, read_sentences(a.sentences), a.assets, a.precision)
    print(f"wrote {a.assets}/bundle and {a.assets}/catalog ({info['count']} sentences, {info['bits']}-bit codes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
