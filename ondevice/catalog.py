"""A demo app's catalog: sentences, their packed codes from a bundle, and the bundle files the app reads.

Shared by `android_demo/tools/make_catalog.py` and `web_demo/tools/make_catalog.py`. A catalog folder holds

    sentences.jsonl  one JSON string per line (row i), ASCII-escaped so no line reader splits inside one
    codes.npy        uint8 (n, code_bytes): row i = the code of sentence i, from the bundle's encoder
    catalog.json     count, code_bytes, bits, precision, the sha256 of the encoder.onnx that made the codes,
                     and the size + sha256 of sentences.jsonl and codes.npy (and dipair_states.npy)
    dipair_states.npy  with `dipair_states`: int8 (n, M, D), row i = sentence i's side-b token states from a DiPair
                     bundle's encoder (q = round(127 x)), what a DiPair head reranks a Hamming shortlist with
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ondevice.errors import OndeviceError
from ondevice.io import atomic_path, sha256_file, write_json, write_text
from ondevice.runtime import Bundle


def read_sentences(path: str | Path) -> list[str]:
    """Catalog text: one sentence per line (blank lines skipped), or .jsonl with one JSON string per line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise OndeviceError(f"{path} not found; pass a text file with one sentence per line") from None
    except UnicodeDecodeError:
        raise OndeviceError(f"{path} is not UTF-8 text; convert it to UTF-8") from None
    if path.suffix == ".jsonl":
        out = []
        for number, line in enumerate(text.split("\n"), 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    raise OndeviceError(f"{path}: line {number} is not JSON; write one JSON string per line") from None
        if not all(isinstance(s, str) for s in out):
            raise OndeviceError(f"{path}: every line must be a JSON string")
        return out
    return [line for line in text.splitlines() if line.strip()]


def copy_bundle_files(bundle: Bundle, out: str | Path, names: Sequence[str], optional: Sequence[str] = ()) -> list[str]:
    """Copy `names` (required) and `optional` (when present) from a loaded bundle into a fresh folder `out`."""
    out = Path(out)
    missing = [n for n in names if not (bundle.path / n).is_file()]
    if missing:
        raise OndeviceError(f"{bundle.path} has no {', '.join(missing)}; re-export it with `ondevice export`")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise OndeviceError(f"{out} is a link or a file; give a folder for the bundle copy")
    if out.exists():  # an earlier copy is replaced; a folder holding anything else is not ours to delete
        other = sorted(p.name for p in out.iterdir() if p.name not in {*names, *optional} or not p.is_file())
        if other:
            raise OndeviceError(f"{out} holds {', '.join(other[:3])}, which are not bundle files; choose an empty or "
                                "new folder")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    copied = []
    for name in [*names, *optional]:
        if (bundle.path / name).is_file():
            shutil.copyfile(bundle.path / name, out / name)
            copied.append(name)
    return copied


def _write_npy(path: Path, array: np.ndarray) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.lib.format.write_array(fh, array, version=(1, 0), allow_pickle=False)


def caches_dipair_states(bundle: Bundle) -> bool:
    """The apps' default for `write_catalog(dipair_states=...)`: a DiPair bundle with int8 state outputs (one exported
    without them has nothing compact to cache)."""
    return "dipair" in bundle.manifest and bundle.dipair().int8_outputs


def write_catalog(bundle: Bundle, sentences: Sequence[str], out: str | Path, dipair_states: bool = False) -> dict[str, Any]:
    """Encode `sentences` with `bundle` and write the catalog folder `out`; returns catalog.json's content.

    `dipair_states`: also cache every sentence's int8 side-b token states (a DiPair bundle's; M x D bytes each), from
    the same encoder pass as its code."""
    if not sentences:
        raise OndeviceError("no sentences: the catalog needs at least one")
    states = None
    if dipair_states:
        # (a bundle without int8 state outputs is refused there, with the fix)
        states, codes = bundle.dipair().states_and_codes(list(sentences), role="b", int8=True)
    else:
        codes = bundle.codes(list(sentences))
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "sentences.jsonl", "".join(json.dumps(s) + "\n" for s in sentences))
    _write_npy(out / "codes.npy", codes)
    names = ["sentences.jsonl", "codes.npy"]
    if states is not None:
        _write_npy(out / "dipair_states.npy", np.ascontiguousarray(states, dtype=np.int8))
        names.append("dipair_states.npy")
    elif (out / "dipair_states.npy").exists():  # an earlier catalog's states would not match these sentences
        (out / "dipair_states.npy").unlink()
    files = {name: {"sha256": sha256_file(out / name), "bytes": (out / name).stat().st_size} for name in names}
    info = {"count": len(sentences), "code_bytes": bundle.code_bytes, "bits": bundle.bits,
            "encoder_sha256": bundle.manifest["files"]["encoder.onnx"]["sha256"], "precision": bundle.precision,
            "files": files}
    if states is not None:
        info["dipair_states"] = {"file": "dipair_states.npy", "shape": list(states.shape), "dtype": "int8",
                                 "role": "b", "dequantize": "x = q / 127"}
    write_json(out / "catalog.json", info)
    return info
