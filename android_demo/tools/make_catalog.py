"""Fill the Android app's assets: the bundle files the app reads, and a catalog of packed codes to search.

    .venv/bin/python android_demo/tools/make_catalog.py --bundle my-bundle --sentences catalog.txt \\
        [--assets android_demo/app/src/main/assets]

Writes
    ASSETS/bundle/   manifest.json, encoder.onnx, tokenizer.json, vocab.txt, binarizer.json,
                     binarizer.safetensors (+ student.safetensors when the bundle has it: the pure-Java encoder)
    ASSETS/catalog/  sentences.jsonl  one JSON string per line (row i)
                     codes.npy        uint8 (n, code_bytes): row i = the code of sentence i, from the bundle's encoder
                     dipair_states.npy  a DiPair bundle's int8 side-b token states (M x D bytes per sentence), with
                                      which the app reranks its Hamming top 100 by the DiPair head
                                      (--no-dipair-states: without)
                     catalog.json     count, code_bytes, bits, the sha256 of the encoder.onnx that made the codes, and the
                                      size and sha256 of every file above, which the app checks as it reads them
                                      (shared with web_demo: ondevice/catalog.py)

--sentences is a UTF-8 text file with one sentence per line (blank lines skipped) or a .jsonl file with one JSON
string per line. The app verifies every bundle file it reads against manifest.json (size and SHA-256), so the
golden/ files and encoder.pt are left out to keep the APK small.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ondevice.catalog import caches_dipair_states, copy_bundle_files, read_sentences, write_catalog
from ondevice.errors import OndeviceError

APP_FILES = ("manifest.json", "encoder.onnx", "tokenizer.json", "vocab.txt", "binarizer.json", "binarizer.safetensors")
# the last two: the app's pair head or DiPair head (Java core)
OPTIONAL = ("student.safetensors", "README.md", "pair_head.safetensors", "dipair_head.safetensors")
DEFAULT_ASSETS = Path(__file__).resolve().parents[1] / "app" / "src" / "main" / "assets"

__all__ = ["build", "main", "read_sentences"]


def build(bundle_dir: Path, sentences: list[str], assets: Path, precision: str | None = None,
          dipair_states: bool | None = None) -> dict:
    """Write ASSETS/bundle and ASSETS/catalog; returns catalog.json's content. `dipair_states` (default: whether the
    bundle has a DiPair head with int8 state outputs) caches every sentence's side-b token states."""
    from ondevice.runtime import Bundle

    bundle = Bundle.load(bundle_dir, precision=precision)  # verifies every checksum
    if not sentences:
        raise OndeviceError("no sentences: the catalog needs at least one")
    if dipair_states is None:
        dipair_states = caches_dipair_states(bundle)
    copy_bundle_files(bundle, Path(assets) / "bundle", APP_FILES, OPTIONAL)
    return write_catalog(bundle, sentences, Path(assets) / "catalog", dipair_states=dipair_states)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bundle", required=True, type=Path, help="folder written by `ondevice export`")
    p.add_argument("--sentences", required=True, type=Path, help="catalog text: one sentence per line, or .jsonl")
    p.add_argument("--assets", type=Path, default=DEFAULT_ASSETS, help="the app's assets folder")
    p.add_argument("--precision", choices=("fp32", "int8"), default=None,
                   help="which bundle of an `--precision both` export to ship")
    p.add_argument("--no-dipair-states", action="store_true",
                   help="a DiPair bundle's catalog without its token states (M x D bytes per sentence): the app then "
                        "ranks by Hamming distance alone")
    a = p.parse_args(argv)
    try:
        info = build(a.bundle, read_sentences(a.sentences), a.assets, a.precision,
                     dipair_states=False if a.no_dipair_states else None)
    except OndeviceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {a.assets}/bundle and {a.assets}/catalog ({info['count']} sentences, {info['bits']}-bit codes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
