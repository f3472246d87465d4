"""A sharded Hamming index: S index files in the ordinary format (ids global) and a manifest with their checksums.

    manifest = build_shards(codes, "catalog/", shards=4)        # catalog/shard-00000.odx ... + manifest.json
    index = ShardedIndex.open("catalog/")                      # in-process; see ondevice.scale.ray_search for Ray
    distances, ids = index.search(queries, k=10)               # exactly HammingIndex over all codes

Each shard returns its own top-k by (distance, id); the global top-k by (distance, id) is a subset of the union
of those, so `merge_topk` over the S x k candidates gives exactly the single index's answer, ties included.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ondevice import layouts
from ondevice.errors import OndeviceError
from ondevice.index import HammingIndex
from ondevice.io import artifact_file, check_out_kind, read_json, sha256_file, write_json

VERSION = 1
MAX_SHARDS = 4096  # each shard is a memory-mapped open file; more would exhaust the process's descriptors


@dataclass
class ShardInfo:
    """One shard file of a manifest."""

    file: str  # a plain file name inside the manifest's folder
    count: int
    bytes: int
    sha256: str  # of the whole file
    id_min: int = -1
    id_max: int = -1


@dataclass
class Manifest:
    """The list of shard files that together form one index."""

    bits: int
    count: int
    shards: list[ShardInfo] = field(default_factory=list)
    format: str = layouts.SHARDS_FORMAT
    version: int = VERSION

    def path_of(self, folder: Path, i: int) -> Path:
        """Path of shard i; a name that would leave the folder is refused."""
        name = self.shards[i].file
        if not isinstance(name, str) or not name or ":" in name or "/" in name or "\\" in name or name in (".", "..") or os.path.basename(name) != name:
            raise OndeviceError(f"manifest in {folder} names shard file {name!r} outside its folder; rebuild the index")
        return artifact_file(folder, name, "sharded index")


def manifest_path(path: str | os.PathLike) -> Path:
    """A sharded index is given by its folder or its manifest.json."""
    path = Path(path)
    return path / layouts.MANIFEST if path.is_dir() else path


def is_sharded(path: str | os.PathLike) -> bool:
    """True when `path` is a sharded index folder or manifest (not a single index file)."""
    return manifest_path(path).name == layouts.MANIFEST and manifest_path(path).is_file()


def shard_bounds(n: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous row ranges of near-equal size, the first ones one row longer."""
    base, extra = divmod(n, shards)
    bounds, lo = [], 0
    for s in range(shards):
        hi = lo + base + (s < extra)
        bounds.append((lo, hi))
        lo = hi
    return bounds


def build_shards(codes: np.ndarray, out: str | os.PathLike, shards: int, ids: np.ndarray | None = None,
                 bits: int | None = None) -> Manifest:
    """Write `shards` index files of contiguous rows (ids global) and their manifest into folder `out`."""
    if not isinstance(shards, (int, np.integer)) or not 1 <= shards <= MAX_SHARDS:
        raise OndeviceError(f"--shards must be a positive integer up to {MAX_SHARDS:,}, got {shards!r}")
    codes = np.asarray(codes)
    if codes.dtype != np.uint8 or codes.ndim != 2:
        raise OndeviceError(f"codes must be uint8 of shape (n, code_bytes), got {codes.dtype} {codes.shape}")
    n = len(codes)
    if shards > max(n, 1):
        raise OndeviceError(f"--shards {shards} is more than the {n} codes; use at most {max(n, 1)} shards")
    bits = codes.shape[1] * 8 if bits is None else int(bits)
    if ids is None:
        ids = np.arange(n, dtype=np.int64)
    else:
        ids = np.asarray(ids)
        if ids.shape != (n,) or not np.issubdtype(ids.dtype, np.integer):
            raise OndeviceError(f"ids must be integers of shape ({n},), got {ids.dtype} {ids.shape}")
        ids = ids.astype(np.int64)
        if n and not np.all(ids[1:] > ids[:-1]) and len(np.unique(ids)) != n:  # shards cannot see each other's ids
            raise OndeviceError("ids contain duplicates; every code needs its own id")
    folder = Path(out)
    if folder.is_file():
        raise OndeviceError(f"{folder} is a file; a sharded index is written into a folder, give a folder path")
    check_out_kind(folder, "sharded-index")  # never into a bundle or any other folder holding a manifest.json
    folder.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(bits=bits, count=n)
    for s, (lo, hi) in enumerate(shard_bounds(n, shards)):
        index = HammingIndex(bits)
        index.add(codes[lo:hi], ids[lo:hi])
        path = index.save(folder / f"shard-{s:05d}.odx")
        manifest.shards.append(ShardInfo(file=path.name, count=hi - lo, bytes=path.stat().st_size,
                                         sha256=sha256_file(path), id_min=int(ids[lo:hi].min()) if hi > lo else -1,
                                         id_max=int(ids[lo:hi].max()) if hi > lo else -1))
    write_json(folder / layouts.MANIFEST, manifest)  # last: a folder without a manifest is not an index yet
    return manifest


def read_manifest(path: str | os.PathLike) -> tuple[Manifest, Path]:
    """Parse and check a manifest; returns it and its folder."""
    mpath = manifest_path(path)
    if mpath.is_file() and mpath.name != layouts.MANIFEST and layouts.identify(mpath) == "index":
        raise OndeviceError(f"{mpath} is a single index file; this needs a sharded index folder: build one with "
                            "`ondevice index build --shards N --out DIR`")
    if Path(path).is_dir():  # a manifest.json given by its own name may be a link (the user chose it)
        artifact_file(path, layouts.MANIFEST, "sharded index")
    raw = read_json(mpath, "sharded index manifest")
    if not isinstance(raw, dict) or raw.get("format") != layouts.SHARDS_FORMAT:
        raise OndeviceError(f"{mpath} is not an ondevice sharded index manifest; build one with `ondevice index build --shards S`")
    if raw.get("version") != VERSION:
        raise OndeviceError(f"{mpath} is manifest version {raw.get('version')}; this ondevice reads version {VERSION}")
    if isinstance(raw.get("shards"), list) and len(raw["shards"]) > MAX_SHARDS:
        raise OndeviceError(f"{mpath} lists {len(raw['shards']):,} shards, more than the {MAX_SHARDS:,} an index may have "
                            "(each is an open file); rebuild the index with fewer --shards")
    try:
        shards = [ShardInfo(**s) for s in raw["shards"]]
        manifest = Manifest(bits=int(raw["bits"]), count=int(raw["count"]), shards=shards)
        fields_ok = all(isinstance(s.file, str) and isinstance(s.sha256, str) and
                        all(isinstance(v, int) and not isinstance(v, bool) for v in (s.count, s.bytes, s.id_min, s.id_max))
                        and s.count >= 0 and s.bytes >= 0 for s in shards)
    except (KeyError, TypeError, ValueError) as exc:
        raise OndeviceError(f"{mpath} is malformed ({exc}); rebuild the index") from None
    if not fields_ok:
        raise OndeviceError(f"{mpath} is malformed (a shard's file, count, bytes, sha256 or id range has the wrong "
                            "type); rebuild the index")
    if not shards or sum(s.count for s in shards) != manifest.count:
        raise OndeviceError(f"{mpath} is inconsistent (shard counts do not add up); rebuild the index")
    seen: dict[str, int] = {}
    for i in range(len(shards)):
        manifest.path_of(mpath.parent, i)
        folded = shards[i].file.casefold()  # one file twice (or twice on a case-insensitive file system): duplicate ids
        if folded in seen:
            raise OndeviceError(f"{mpath} lists shard file {shards[i].file!r} twice (shards {seen[folded]} and {i}); "
                                "rebuild the index")
        seen[folded] = i
    return manifest, mpath.parent


def open_shard(manifest: Manifest, folder: Path, i: int, verify: bool = True, threads: int | None = None) -> HammingIndex:
    """Memory-map shard i after checking it is the file the manifest names (size, and sha256 when `verify`)."""
    info, path = manifest.shards[i], manifest.path_of(folder, i)
    if not path.is_file():
        raise OndeviceError(f"shard {i} file {path} is missing; copy it there or rebuild the index")
    if path.stat().st_size != info.bytes or (verify and sha256_file(path) != info.sha256):
        raise OndeviceError(f"shard {i} file {path} does not match the manifest checksum; copy the right file or rebuild")
    index = HammingIndex.load(path, mmap=True, verify=False, threads=threads)
    if index.bits != manifest.bits or len(index) != info.count:
        raise OndeviceError(f"shard {i} file {path} holds {len(index)} x {index.bits}-bit codes, the manifest says "
                            f"{info.count} x {manifest.bits}; rebuild the index")
    return index


def merge_topk(distances: list[np.ndarray], ids: list[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Merge per-shard (nq, k) results into the global top-k by (distance, id), -1 padded like HammingIndex."""
    d = np.concatenate(distances, axis=1).astype(np.int64)
    i = np.concatenate(ids, axis=1)
    key_d = np.where(i < 0, np.iinfo(np.int64).max, d)  # padding sorts last
    key_i = np.where(i < 0, np.iinfo(np.int64).max, i)
    # One int64 sort key per candidate would overflow; a stable two-pass sort orders by (distance, id).
    order = np.argsort(key_i, axis=1, kind="stable")
    order = np.take_along_axis(order, np.argsort(np.take_along_axis(key_d, order, 1), axis=1, kind="stable"), 1)[:, :k]
    out_i = np.take_along_axis(i, order, 1)
    out_d = np.where(out_i < 0, -1, np.take_along_axis(d, order, 1)).astype(np.int32)
    if out_i.shape[1] < k:  # fewer candidates than k in all (S x k >= k always, but keep the shape honest)
        pad = k - out_i.shape[1]
        out_i = np.pad(out_i, ((0, 0), (0, pad)), constant_values=-1)
        out_d = np.pad(out_d, ((0, 0), (0, pad)), constant_values=-1)
    return out_d, out_i


@dataclass
class ShardedResult:
    """Merged k-NN result; `missing` lists shards that did not answer (only when partial results were asked for)."""

    distances: np.ndarray
    ids: np.ndarray
    missing: list[int] = field(default_factory=list)

    @property
    def partial(self) -> bool:
        return bool(self.missing)


class ShardedIndex:
    """All shards of a manifest searched in this process (the reference the Ray router must equal)."""

    def __init__(self, manifest: Manifest, shards: list[HammingIndex]):
        self.manifest, self.shards = manifest, shards

    @classmethod
    def open(cls, path: str | os.PathLike, verify: bool = True, threads: int | None = None) -> ShardedIndex:
        """Open every shard of the manifest at `path` (folder or manifest.json)."""
        manifest, folder = read_manifest(path)
        return cls(manifest, [open_shard(manifest, folder, i, verify, threads) for i in range(len(manifest.shards))])

    @property
    def bits(self) -> int:
        return self.manifest.bits

    def __len__(self) -> int:
        return self.manifest.count

    def search(self, queries: np.ndarray, k: int, threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """k nearest codes over all shards: (int32 distances, int64 ids), (nq, k), by (distance, id), -1 padded."""
        parts = [shard.search(queries, k, threads=threads) for shard in self.shards]
        return merge_topk([p[0] for p in parts], [p[1] for p in parts], k)
