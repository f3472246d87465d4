"""Build the web demo as a static site: the page, ONNX Runtime Web, a bundle and a catalog of packed codes.

    .venv/bin/python web_demo/tools/make_catalog.py --bundle my-bundle --sentences catalog.txt [--out web_demo/site]
    .venv/bin/python web_demo/tools/serve.py web_demo/site          # then open http://127.0.0.1:8000/

Writes OUT/ (any static file server can serve it; nothing runs on the server):
    index.html, app.js, ondevice.js, style.css      the page (copied from web_demo/)
    vendor/onnxruntime-web/                          ort.wasm.bundle.min.mjs + ort-wasm-simd-threaded.wasm
                                                     (from web_demo/node_modules: run `npm ci` in web_demo first)
    vendor/sql.js/                                   sql-wasm-browser.js + .wasm (sql.js: SQLite in the browser, for
                                                     ondevice.js's SqliteCatalog; the demo page does not load it)
    assets/bundle/   manifest.json, encoder.onnx, tokenizer.json, vocab.txt (+ binarizer files, README.md, and
                     pair_head.safetensors / dipair_head.safetensors + dipair_head.onnx where the bundle has a
                     pair / DiPair head)
    assets/catalog/  sentences.jsonl, codes.npy, catalog.json (ondevice/catalog.py, shared with android_demo); with a
                     DiPair bundle also dipair_states.npy (int8 side-b token states, M x D bytes per sentence), with
                     which the page reranks its Hamming top-100 by the DiPair head (--no-dipair-states: without)

The page verifies each bundle file it reads against manifest.json (size and SHA-256, Web Crypto) and the catalog
files against catalog.json before using them.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from ondevice.catalog import caches_dipair_states, copy_bundle_files, read_sentences, write_catalog
from ondevice.errors import OndeviceError

WEB = Path(__file__).resolve().parents[1]
PAGE_FILES = ("index.html", "app.js", "ondevice.js", "style.css")
ORT_DIST = WEB / "node_modules" / "onnxruntime-web" / "dist"
ORT_FILES = ("ort.wasm.bundle.min.mjs", "ort-wasm-simd-threaded.wasm")
SQLJS_DIST = WEB / "node_modules" / "sql.js" / "dist"
SQLJS_FILES = ("sql-wasm-browser.js", "sql-wasm-browser.wasm")
BUNDLE_FILES = ("manifest.json", "encoder.onnx", "tokenizer.json", "vocab.txt")
# the page's pair heads read the last three (the DiPair graph scores a search's shortlist)
OPTIONAL = ("binarizer.json", "binarizer.safetensors", "README.md",
            "pair_head.safetensors", "dipair_head.safetensors", "dipair_head.onnx")
DEFAULT_OUT = WEB / "site"

__all__ = ["build", "copy_page", "main", "read_sentences"]


def copy_page(out: Path) -> None:
    """The page and the ONNX Runtime Web and sql.js files it loads, into `out`."""
    missing = [d / n for d, names in ((ORT_DIST, ORT_FILES), (SQLJS_DIST, SQLJS_FILES)) for n in names
               if not (d / n).is_file()]
    if missing:
        raise OndeviceError(f"the web demo's npm packages are not installed ({missing[0]} missing); "
                            f"run `npm ci` in {WEB}")
    out.mkdir(parents=True, exist_ok=True)
    for name in PAGE_FILES:
        shutil.copyfile(WEB / name, out / name)
    vendor = out / "vendor" / "onnxruntime-web"
    vendor.mkdir(parents=True, exist_ok=True)
    for name in ORT_FILES:
        shutil.copyfile(ORT_DIST / name, vendor / name)
    sqljs = out / "vendor" / "sql.js"
    sqljs.mkdir(parents=True, exist_ok=True)
    for name in SQLJS_FILES:
        shutil.copyfile(SQLJS_DIST / name, sqljs / name)


def build(bundle_dir: Path, sentences: list[str], out: Path = DEFAULT_OUT, precision: str | None = None,
          dipair_states: bool | None = None) -> dict:
    """Write the site to `out`; returns catalog.json's content. `dipair_states` (default: whether the bundle has a
    DiPair head with int8 state outputs) caches the catalog's token states, with which the page reranks its Hamming
    shortlist."""
    from ondevice.runtime import Bundle

    bundle = Bundle.load(bundle_dir, precision=precision)  # verifies every checksum before anything is copied
    if not sentences:
        raise OndeviceError("no sentences: the catalog needs at least one")
    if dipair_states is None:
        dipair_states = caches_dipair_states(bundle)
    out = Path(out)
    copy_page(out)
    copy_bundle_files(bundle, out / "assets" / "bundle", BUNDLE_FILES, OPTIONAL)
    return write_catalog(bundle, sentences, out / "assets" / "catalog", dipair_states=dipair_states)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bundle", required=True, type=Path, help="folder written by `ondevice export`")
    p.add_argument("--sentences", required=True, type=Path, help="catalog text: one sentence per line, or .jsonl")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="site folder to write")
    p.add_argument("--precision", choices=("fp32", "int8"), default=None,
                   help="which bundle of an `--precision both` export to use (default: int8)")
    p.add_argument("--no-dipair-states", action="store_true",
                   help="a DiPair bundle's catalog without its token states (M x D bytes per sentence): the page then "
                        "ranks by Hamming distance alone")
    a = p.parse_args(argv)
    try:
        info = build(a.bundle, read_sentences(a.sentences), a.out, a.precision,
                     dipair_states=False if a.no_dipair_states else None)
    except OndeviceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {a.out} ({info['count']} sentences, {info['bits']}-bit {info['precision']} codes); "
          f"serve it with: .venv/bin/python web_demo/tools/serve.py {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
