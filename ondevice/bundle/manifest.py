"""The bundle format's one owner: manifest.json (format, version, file table with sizes and sha256), how a folder's
files are listed and sealed, and how a reader validates all of it before trusting any file.

A bundle is a folder whose manifest.json lists every other file with its size and sha256. Writers (export, pair-head
export, DiPair export, migrations) finish a bundle with `seal`; readers (the runtimes) call `read_manifest` and
`verify_files`. The format is specified in docs/reference/bundle-format.md; Java (android_demo/core) and JS
(web_demo/ondevice.js) read the same files and are kept in step by golden files.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from ondevice import layouts
from ondevice.bits import BIT_ORDER, MAX_BITS, code_bytes
from ondevice.errors import OndeviceError
from ondevice.io import artifact_file, sha256_file, write_json, write_text
from ondevice.onnxproto import external_tensors
from ondevice.pretrained import parse_spec

FORMAT_VERSION = 1
# Files every bundle has (besides manifest.json); the runtime reads the first three, other runtimes the rest.
REQUIRED = (layouts.ENCODER_ONNX, layouts.VOCAB, layouts.TOKENIZER_JSON, layouts.BINARIZER_CONFIG, layouts.BINARIZER_WEIGHTS)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_CONTROL = ("Cc", "Cs", "Zl", "Zp")  # control characters, lone surrogates and line breaks are never in our file names
MAX_NAME = 1024  # characters in a listed file name (each part at most 255 bytes, like most file systems)
MAX_DIM = 65_536
MAX_K = 1 << 20  # neighbours per query in `search`
MAX_FILES = 4096  # files a manifest lists: an export writes about a dozen (golden files included)
# files the runtime parses: their bytes are hashed and then parsed from memory, never read a second time
MAX_MANIFEST_BYTES = 16 << 20  # a manifest lists a dozen files: anything this large is not one
MAX_PARSED_BYTES = 1 << 30  # a file read whole to be parsed (an ONNX graph is at most 2 GB; a phone bundle ~10 MB)
MAX_FILE_BYTES = 1 << 32  # any listed file (hashed in blocks): a bundle for a device is far smaller
PARSED = (layouts.ENCODER_ONNX, layouts.VOCAB, layouts.TOKENIZER_JSON, layouts.BINARIZER_WEIGHTS)


def _bundle_error(path: Path, what: str) -> OndeviceError:
    return OndeviceError(f"bundle {path}: {what}")


def resolve_bundle(path: str | Path, precision: str | None = None) -> Path:
    """The bundle folder: `path` itself, its `precision` sub-folder (`ondevice export --precision both`), or the
    pretrained model shipped in the package for 'pretrained' / 'pretrained:NAME'."""
    path = parse_spec(path) or Path(path)
    if precision is not None and precision not in layouts.PRECISIONS:
        raise OndeviceError(f"unknown precision {precision!r}; choose one of {', '.join(layouts.PRECISIONS)}")
    if (path / layouts.MANIFEST).is_file():
        return path
    for candidate in ([precision] if precision else list(reversed(layouts.PRECISIONS))):  # int8 first: what apps ship
        if (path / candidate / layouts.MANIFEST).is_file():
            return artifact_file(path, candidate, "bundle")  # the bundle's own files are checked for links; so is its folder
    available = [p for p in layouts.PRECISIONS if (path / p / layouts.MANIFEST).is_file()]
    if available:  # a two-precision folder without the one asked for
        raise _bundle_error(path, f"holds no {precision} bundle, only {', '.join(available)}; pick that with --precision "
                                  "(precision= in Python)")
    if not path.exists():
        raise _bundle_error(path, "not found; export one with `ondevice export`")
    raise _bundle_error(path, f"{layouts.MANIFEST} is missing; {layouts.what_it_is(path)}, not a bundle (`ondevice "
                              "export` makes one)")


def check_precision(path: Path, manifest: dict, precision: str | None) -> None:
    """A `precision` asked of a one-precision bundle must be the one it holds: one line naming what it has."""
    if precision is not None and manifest["precision"] != precision:
        raise _bundle_error(path, f"holds only the {manifest['precision']} precision, not {precision}; leave out "
                                  "--precision (precision= in Python), or export the model with --precision "
                                  f"{precision} (or both)")


def _safe_name(path: Path, name: Any) -> Path:
    """The file `name` inside bundle `path`, refusing anything that could point outside it."""
    if not isinstance(name, str) or not name or "\\" in name or any(unicodedata.category(c) in _CONTROL for c in name):
        raise _bundle_error(path, f"manifest lists an invalid file name {name[:80] if isinstance(name, str) else name!r}; "
                                  "the manifest is corrupt")
    parts = PurePosixPath(name).parts
    if len(name) > MAX_NAME or any(len(p.encode("utf-8", "surrogatepass")) > 255 for p in parts):
        raise _bundle_error(path, f"manifest lists a file name of {len(name):,} characters ({name[:40]!r}...); "
                                  "the manifest is corrupt")
    # ':' too: on Windows "C:x" joined to a folder is a path on drive C, outside the bundle
    if PurePosixPath(name).is_absolute() or any(p in ("..", ".", "") for p in parts) or ":" in name or name == layouts.MANIFEST:
        raise _bundle_error(path, f"manifest lists an unsafe file name {name!r}; refusing to load it")
    if "/".join(parts) != name:  # "./x", "x/", "a//b": one file under many spellings, each hashed again
        raise _bundle_error(path, f"manifest lists {name!r}, not in canonical form ({'/'.join(parts)!r}); the manifest "
                                  "is corrupt")
    return path.joinpath(*parts)


class _DuplicateKey(Exception):
    """A JSON object naming one key twice (json.loads would silently keep the last)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    """json object_pairs_hook: the object, or _DuplicateKey when a key repeats."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def read_manifest(path: Path) -> dict:
    """Parse and validate manifest.json (format, version, file table) without trusting any other file."""
    file = path / layouts.MANIFEST
    artifact_file(path, layouts.MANIFEST, "bundle")  # refused before reading: a link could name any file, however large
    if file.exists() and not file.is_file():
        raise _bundle_error(path, f"{layouts.MANIFEST} is not a regular file; re-export the bundle")
    try:
        with open(file, "rb") as fh:
            raw = fh.read(MAX_MANIFEST_BYTES + 1)
        if len(raw) > MAX_MANIFEST_BYTES:
            raise _bundle_error(path, f"{layouts.MANIFEST} is over {MAX_MANIFEST_BYTES >> 20} MB, far more than any manifest; "
                                      "re-export the bundle")
        manifest = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
    except FileNotFoundError:
        raise _bundle_error(path, f"{layouts.MANIFEST} is missing; re-export the bundle") from None
    except _DuplicateKey as exc:
        raise _bundle_error(path, f"{layouts.MANIFEST} says {str(exc)[:80]!r} twice in one object; re-export the bundle") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # ValueError: bad JSON, or an over-long integer
        raise _bundle_error(path, f"{layouts.MANIFEST} is not valid JSON ({type(exc).__name__}); re-export the bundle") from None
    if not isinstance(manifest, dict) or manifest.get("format") != layouts.BUNDLE_FORMAT:
        raise _bundle_error(path, f"{layouts.MANIFEST} is not an {layouts.BUNDLE_FORMAT} manifest; re-export the bundle")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise _bundle_error(path, f"format version {version!r} is not supported (this ondevice reads version "
                                  f"{FORMAT_VERSION}); upgrade ondevice or re-export the bundle with this version")
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise _bundle_error(path, f"{layouts.MANIFEST} has no 'files' table; re-export the bundle")
    if len(files) > MAX_FILES:
        raise _bundle_error(path, f"{layouts.MANIFEST} lists {len(files):,} files, more than the {MAX_FILES:,} a bundle may "
                                  "have; re-export the bundle")
    seen: dict[str, str] = {}
    for name, entry in files.items():
        _safe_name(path, name)
        # the same file on a case-insensitive or normalizing file system (macOS, Windows): listed twice
        folded = unicodedata.normalize("NFC", name).casefold()
        if folded in seen:
            raise _bundle_error(path, f"{layouts.MANIFEST} lists {seen[folded]!r} and {name!r}, the same file on many "
                                      "file systems; re-export the bundle")
        seen[folded] = name
        ok = (isinstance(entry, dict) and isinstance(entry.get("sha256"), str) and _SHA256.match(entry["sha256"])
              and isinstance(entry.get("bytes"), int) and entry["bytes"] >= 0)
        if not ok:
            raise _bundle_error(path, f"{layouts.MANIFEST} entry for {name!r} needs a sha256 and a byte count; re-export the bundle")
    missing = [n for n in REQUIRED if n not in files]
    if missing:
        raise _bundle_error(path, f"{layouts.MANIFEST} does not list {', '.join(missing)}; re-export the bundle")
    for key, top in (("dim", MAX_DIM), ("bits", MAX_BITS), ("code_bytes", code_bytes(MAX_BITS))):
        value = manifest.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            raise _bundle_error(path, f"{layouts.MANIFEST} has no valid {key!r} (an integer in 1..{top}); re-export the bundle")
    if manifest["code_bytes"] != code_bytes(manifest["bits"]) or manifest.get("bit_order") != BIT_ORDER:
        raise _bundle_error(path, f"{layouts.MANIFEST} describes codes this ondevice cannot read "
                                  f"(bits {manifest['bits']}, code_bytes {manifest['code_bytes']}, "
                                  f"bit order {manifest.get('bit_order')!r}); re-export the bundle")
    if manifest.get("precision") not in layouts.PRECISIONS:
        raise _bundle_error(path, f"{layouts.MANIFEST} has unknown precision {manifest.get('precision')!r}; re-export the bundle")
    return manifest


def _read_hashed(file: Path, size: int, keep: bool) -> tuple[bytes, str | None]:
    """(the bytes when `keep`, else b"", sha256) of `file`, read in blocks so that a file nobody parses never sits in
    memory whole; the digest is None when the file does not hold exactly `size` bytes (it changed while read)."""
    h, parts, seen = hashlib.sha256(), [], 0
    with open(file, "rb") as fh:
        while seen <= size and (block := fh.read(min(1 << 20, size + 1 - seen))):
            h.update(block)
            seen += len(block)
            if keep:
                parts.append(block)
    return b"".join(parts), (h.hexdigest() if seen == size else None)


def verify_files(path: Path, manifest: dict, keep: tuple[str, ...] = PARSED) -> dict[str, bytes]:
    """Check the size and sha256 of every listed file; returns the verified bytes of those in `keep` (by default the
    files the runtime parses), so a caller parses exactly the bytes that were checked."""
    kept: dict[str, bytes] = {}
    artifact_file(path, layouts.MANIFEST, "bundle")
    for name, entry in sorted(manifest["files"].items()):
        file = _safe_name(path, name)
        try:
            artifact_file(path, name, "bundle")
            if not file.is_file():
                raise _bundle_error(path, f"{name} is missing; re-export the bundle or copy it completely")
            size = file.stat().st_size
            if size != entry["bytes"]:
                state = "truncated" if size < entry["bytes"] else "longer than expected"
                raise _bundle_error(path, f"{name} is {state} ({size} bytes, manifest says {entry['bytes']}); "
                                          "copy the bundle again")
            cap = MAX_PARSED_BYTES if name in keep else MAX_FILE_BYTES
            if size > cap:
                raise _bundle_error(path, f"{name} is {size:,} bytes, over the {cap:,} bytes a bundle file "
                                          f"{'the runtime parses ' if name in keep else ''}may have; re-export the bundle")
            data, digest = _read_hashed(file, entry["bytes"], keep=name in keep)
        except OSError as exc:
            raise _bundle_error(path, f"cannot read {name} ({exc.strerror or type(exc).__name__}); "
                                      "copy the bundle again") from None
        if digest != entry["sha256"]:
            raise _bundle_error(path, f"{name} fails its sha256 check (modified or corrupted); copy the bundle again")
        if name in keep:
            kept[name] = data
    try:
        external = external_tensors(kept[layouts.ENCODER_ONNX]) if layouts.ENCODER_ONNX in kept else []
    except OndeviceError as exc:
        raise _bundle_error(path, f"{layouts.ENCODER_ONNX} is not a valid ONNX model ({exc}); re-export the bundle") from None
    if external:
        raise _bundle_error(path, f"{layouts.ENCODER_ONNX} keeps tensor {external[0]!r} in an external data file, which no checksum "
                                  "covers; re-export the bundle with `ondevice export` (weights inside the graph)")
    return kept


def file_table(folder: Path, skip: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """Every file of `folder` but manifest.json (and `skip`) with its size and sha256; symbolic links are refused,
    since the runtimes refuse them (they can point anywhere)."""
    links = sorted(p for p in folder.rglob("*") if p.is_symlink())
    if links:
        raise OndeviceError(f"{links[0]} is a symbolic link; a bundle must hold its files itself")
    left_out = {layouts.MANIFEST, *skip}
    return {p.relative_to(folder).as_posix(): {"sha256": sha256_file(p), "bytes": p.stat().st_size}
            for p in sorted(folder.rglob("*")) if p.is_file() and p.relative_to(folder).as_posix() not in left_out}


def write_manifest(folder: Path, manifest: dict) -> None:
    """Write manifest.json as it is (atomically): for a copy whose file table is already right."""
    write_json(folder / layouts.MANIFEST, manifest)


def seal(folder: Path, manifest: dict, card: Callable[[dict], str] | None = None) -> dict:
    """List every file of the bundle folder in `manifest["files"]`, write the model card from the manifest when
    `card` is given (README.md, listed last: it names every other file), then manifest.json. Returns the manifest."""
    manifest["files"] = file_table(folder, skip=(layouts.MODEL_CARD,) if card is not None else ())
    if card is not None:
        write_text(folder / layouts.MODEL_CARD, card(manifest))
        readme = folder / layouts.MODEL_CARD
        manifest["files"][layouts.MODEL_CARD] = {"sha256": sha256_file(readme), "bytes": readme.stat().st_size}
    write_manifest(folder, manifest)
    return manifest
